// SPDX-License-Identifier: GPL-2.0

//! The loop device ioctls (`lo_ioctl`, `lo_compat_ioctl`): argument copies, permission checks,
//! the old `loop_info` and 32-bit `compat_loop_info` conversions, and dispatch to [`LoopDevice`].

use super::{
    device::LoopDevice,
    sys::{BlockDevice, BLK_OPEN_WRITE},
};
use crate::uapi::{self, loop_config, loop_info, loop_info64, CompatLoopInfo};
use core::mem::{offset_of, size_of};
use kernel::{
    bindings,
    prelude::*,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};
use pin_init::Zeroable;

/// Copies a `T` from user memory at `arg`.
fn read_user<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(UserPtr::from_addr(arg), size_of::<T>())
        .reader()
        .read()
}

/// Copies `bytes` to user memory at `arg`.
fn write_user(arg: usize, bytes: &[u8]) -> Result {
    UserSlice::new(UserPtr::from_addr(arg), bytes.len())
        .writer()
        .write_slice(bytes)
}

/// Reconfiguring ioctls need a writable open or `CAP_SYS_ADMIN`.
fn check_writer(mode: u32) -> Result {
    if mode & BLK_OPEN_WRITE != 0 || super::sys::capable(bindings::CAP_SYS_ADMIN) {
        Ok(())
    } else {
        Err(EPERM)
    }
}

/// `lo_ioctl`.
pub(crate) fn dispatch(
    dev: &LoopDevice,
    bdev: &BlockDevice,
    mode: u32,
    cmd: u32,
    arg: usize,
) -> Result {
    match cmd {
        uapi::LOOP_SET_FD => {
            // Legacy: a zeroed `loop_config` with only the descriptor set.
            let mut config = loop_config::zeroed();
            config.fd = arg as u32;
            dev.configure(mode, bdev, &config)
        }
        uapi::LOOP_CONFIGURE => {
            let config: loop_config = read_user(arg)?;
            dev.configure(mode, bdev, &config)
        }
        uapi::LOOP_CHANGE_FD => dev.change_fd(arg as u32),
        uapi::LOOP_CLR_FD => dev.clear_fd(),
        uapi::LOOP_SET_STATUS => {
            check_writer(mode)?;
            let info: loop_info = read_user(arg)?;
            dev.set_status(&info64_from_old(&info))
        }
        uapi::LOOP_GET_STATUS => {
            if arg == 0 {
                return Err(EINVAL);
            }
            write_user(arg, &info64_to_old(&dev.get_status()?)?)
        }
        uapi::LOOP_SET_STATUS64 => {
            check_writer(mode)?;
            let info: loop_info64 = read_user(arg)?;
            dev.set_status(&info)
        }
        uapi::LOOP_GET_STATUS64 => {
            if arg == 0 {
                return Err(EINVAL);
            }
            write_user(arg, dev.get_status()?.as_bytes())
        }
        uapi::LOOP_SET_BLOCK_SIZE => {
            check_writer(mode)?;
            dev.set_block_size(mode, bdev, arg)
        }
        uapi::LOOP_SET_CAPACITY => {
            check_writer(mode)?;
            dev.set_capacity()
        }
        uapi::LOOP_SET_DIRECT_IO => {
            check_writer(mode)?;
            dev.set_direct_io(arg != 0)
        }
        // As loop.c's `lo_simple_ioctl`: an unknown command on a loop device is EINVAL.
        _ => Err(EINVAL),
    }
}

/// The conversions between `loop_info64` and an old-style status structure (`loop_info`, or its
/// 32-bit layout), as loop.c's `loop_info64_{from,to}_old` and `..._compat`. `dev` and `ino` are
/// the old structure's types of `lo_device`/`lo_rdevice` and of `lo_inode`. The old structures
/// have padding, so the way out is their bytes: the fields loop.c fills, every other byte zero.
macro_rules! old_info_conversions {
    ($old:ty, $from:ident, $to:ident, dev: $dev:ty, ino: $ino:ty) => {
        fn $from(info: &$old) -> loop_info64 {
            let mut i = loop_info64::zeroed();
            i.lo_number = info.lo_number as u32;
            i.lo_device = u64::from(info.lo_device);
            i.lo_inode = u64::from(info.lo_inode);
            i.lo_rdevice = u64::from(info.lo_rdevice);
            i.lo_offset = i64::from(info.lo_offset) as u64;
            i.lo_flags = info.lo_flags as u32;
            i.lo_file_name = info.lo_name.map(|c| c as u8);
            i
        }

        fn $to(i: &loop_info64) -> Result<[u8; size_of::<$old>()]> {
            let device = i.lo_device as $dev;
            let inode = i.lo_inode as $ino;
            let rdevice = i.lo_rdevice as $dev;
            let offset = i.lo_offset as i32;
            // Values that do not fit the old structure are an error, as loop.c.
            if u64::from(device) != i.lo_device
                || u64::from(rdevice) != i.lo_rdevice
                || u64::from(inode) != i.lo_inode
                || i64::from(offset) as u64 != i.lo_offset
            {
                return Err(EOVERFLOW);
            }
            let mut b = [0u8; size_of::<$old>()];
            put(
                &mut b,
                offset_of!($old, lo_number),
                (i.lo_number as i32).to_ne_bytes(),
            );
            put(&mut b, offset_of!($old, lo_device), device.to_ne_bytes());
            put(&mut b, offset_of!($old, lo_inode), inode.to_ne_bytes());
            put(&mut b, offset_of!($old, lo_rdevice), rdevice.to_ne_bytes());
            put(&mut b, offset_of!($old, lo_offset), offset.to_ne_bytes());
            put(
                &mut b,
                offset_of!($old, lo_flags),
                (i.lo_flags as i32).to_ne_bytes(),
            );
            put(&mut b, offset_of!($old, lo_name), i.lo_file_name);
            Ok(b)
        }
    };
}

old_info_conversions!(
    loop_info,
    info64_from_old,
    info64_to_old,
    dev: uapi::__kernel_old_dev_t,
    ino: core::ffi::c_ulong
);
old_info_conversions!(CompatLoopInfo, info64_from_compat, info64_to_compat, dev: u16, ino: u32);

/// Writes `v` at `off` in `buf` (a field of a structure laid out in `buf`).
fn put<const N: usize>(buf: &mut [u8], off: usize, v: [u8; N]) {
    if let Some(dst) = buf.get_mut(off..off + N) {
        dst.copy_from_slice(&v);
    }
}

/// `lo_compat_ioctl`.
pub(crate) fn dispatch_compat(
    dev: &LoopDevice,
    bdev: &BlockDevice,
    mode: u32,
    cmd: u32,
    arg: usize,
) -> Result {
    match cmd {
        uapi::LOOP_SET_STATUS => {
            check_writer(mode)?;
            let c: CompatLoopInfo = read_user(arg)?;
            dev.set_status(&info64_from_compat(&c))
        }
        uapi::LOOP_GET_STATUS => {
            if arg == 0 {
                return Err(EINVAL);
            }
            write_user(arg, &info64_to_compat(&dev.get_status()?)?)
        }
        // `compat_ptr` is the identity on x86-64; descriptors and sizes pass through.
        uapi::LOOP_SET_CAPACITY
        | uapi::LOOP_CLR_FD
        | uapi::LOOP_GET_STATUS64
        | uapi::LOOP_SET_STATUS64
        | uapi::LOOP_CONFIGURE
        | uapi::LOOP_SET_FD
        | uapi::LOOP_CHANGE_FD
        | uapi::LOOP_SET_BLOCK_SIZE
        | uapi::LOOP_SET_DIRECT_IO => dispatch(dev, bdev, mode, cmd, arg),
        _ => Err(ENOIOCTLCMD),
    }
}

#[kernel::macros::kunit_tests(rust_loop_ioctl)]
mod tests {
    use super::*;

    fn info64() -> loop_info64 {
        let mut i = loop_info64::zeroed();
        i.lo_number = 3;
        i.lo_device = 0x0801;
        i.lo_inode = 12345;
        i.lo_rdevice = 0x0700;
        i.lo_offset = 4096;
        i.lo_flags = uapi::LO_FLAGS_READ_ONLY | uapi::LO_FLAGS_AUTOCLEAR;
        i.lo_file_name[..8].copy_from_slice(b"disk.img");
        i
    }

    /// `loop_info64` -> old `loop_info` bytes -> `loop_info64` keeps what the old structure
    /// holds, at the ABI's offsets, with every other byte zero.
    #[test]
    fn old_info_round_trip() -> Result {
        let bytes = info64_to_old(&info64())?;
        let old = loop_info::from_bytes_copy(&bytes).ok_or(EINVAL)?;
        assert_eq!(old.lo_number, 3);
        assert_eq!(old.lo_offset, 4096);
        assert!(old.lo_name[..8].iter().map(|&c| c as u8).eq(*b"disk.img"));
        let back = info64_from_old(&old);
        assert_eq!(back.lo_inode, 12345);
        assert_eq!(back.lo_device, 0x0801);
        assert_eq!(back.lo_flags, info64().lo_flags);
        assert_eq!(back.lo_file_name, info64().lo_file_name);
        // The padding after `lo_number` (x86-64: 4 bytes) is zero.
        assert!(bytes[4..8].iter().all(|&b| b == 0));
        Ok(())
    }

    /// The 32-bit layout: 16-bit device numbers; a value that does not fit is `EOVERFLOW`.
    #[test]
    fn compat_info_overflow() -> Result {
        let bytes = info64_to_compat(&info64())?;
        assert_eq!(bytes.len(), 140);
        let c = CompatLoopInfo::from_bytes_copy(&bytes).ok_or(EINVAL)?;
        assert_eq!(c.lo_device, 0x0801);
        let mut big = info64();
        big.lo_device = 0x1_0000;
        assert!(info64_to_compat(&big).is_err());
        let mut far = info64();
        far.lo_offset = 1 << 40;
        assert!(info64_to_compat(&far).is_err());
        assert!(info64_to_old(&far).is_err());
        Ok(())
    }
}
