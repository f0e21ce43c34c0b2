// SPDX-License-Identifier: GPL-2.0

//! The loop device ioctls (`lo_ioctl`, `lo_compat_ioctl`): argument copies, permission checks,
//! the old `loop_info` and 32-bit `compat_loop_info` conversions, and dispatch to [`LoopDevice`].

use crate::{
    blk::BLK_OPEN_WRITE,
    device::{LoopDevice, NAME_SIZE},
    uapi::{self, loop_config, loop_info, loop_info64},
};
use core::mem::{size_of, MaybeUninit};
use kernel::{bindings, prelude::*};

/// Copies a `T` from user memory at `arg`.
fn read_user<T: Copy>(arg: usize) -> Result<T> {
    let mut v = MaybeUninit::<T>::uninit();
    let (dst, src) = (v.as_mut_ptr().cast(), arg as *const _);
    // SAFETY: `dst` is a writable kernel buffer of `size_of::<T>()` bytes; `copy_from_user`
    // validates the user pointer and returns the number of bytes it could not copy.
    let left = unsafe { bindings::copy_from_user(dst, src, size_of::<T>()) };
    if left != 0 {
        return Err(EFAULT);
    }
    // SAFETY: All bytes were copied, and `T` is a plain C struct valid for any bit pattern.
    Ok(unsafe { v.assume_init() })
}

/// Copies `v` to user memory at `arg`.
fn write_user<T: Copy>(arg: usize, v: &T) -> Result {
    // SAFETY: `v` is a readable kernel object of `size_of::<T>()` bytes; `copy_to_user`
    // validates the user pointer.
    let left = unsafe {
        bindings::copy_to_user(arg as *mut _, core::ptr::from_ref(v).cast(), size_of::<T>())
    };
    if left != 0 {
        return Err(EFAULT);
    }
    Ok(())
}

fn capable_sys_admin() -> bool {
    // SAFETY: `capable` checks the current task's credentials.
    unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as i32) }
}

/// Reconfiguring ioctls need a writable open or `CAP_SYS_ADMIN`.
fn check_writer(mode: u32) -> Result {
    if mode & BLK_OPEN_WRITE != 0 || capable_sys_admin() {
        Ok(())
    } else {
        Err(EPERM)
    }
}

/// `lo_ioctl`.
pub(crate) fn dispatch(
    dev: &LoopDevice,
    bdev: *mut bindings::block_device,
    mode: u32,
    cmd: u32,
    arg: usize,
) -> Result {
    match cmd {
        uapi::LOOP_SET_FD => {
            // Legacy: a zeroed `loop_config` with only the descriptor set.
            // SAFETY: All-zero is a valid `loop_config`.
            let mut config: loop_config = unsafe { core::mem::zeroed() };
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
            let info = info64_to_old(&dev.get_status()?)?;
            write_user(arg, &info)
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
            write_user(arg, &dev.get_status()?)
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
/// the old structure's types of `lo_device`/`lo_rdevice` and of `lo_inode`.
macro_rules! old_info_conversions {
    ($old:ty, $from:ident, $to:ident, dev: $dev:ty, ino: $ino:ty) => {
        fn $from(info: &$old) -> loop_info64 {
            // SAFETY: All-zero is a valid `loop_info64`.
            let mut i: loop_info64 = unsafe { core::mem::zeroed() };
            i.lo_number = info.lo_number as u32;
            i.lo_device = u64::from(info.lo_device);
            i.lo_inode = u64::from(info.lo_inode);
            i.lo_rdevice = u64::from(info.lo_rdevice);
            i.lo_offset = i64::from(info.lo_offset) as u64;
            i.lo_flags = info.lo_flags as u32;
            copy_name(&mut i.lo_file_name, &info.lo_name);
            i
        }

        fn $to(i: &loop_info64) -> Result<$old> {
            // SAFETY: All-zero is a valid old-style status structure.
            let mut info: $old = unsafe { core::mem::zeroed() };
            info.lo_number = i.lo_number as i32;
            info.lo_device = i.lo_device as $dev;
            info.lo_inode = i.lo_inode as $ino;
            info.lo_rdevice = i.lo_rdevice as $dev;
            info.lo_offset = i.lo_offset as i32;
            info.lo_flags = i.lo_flags as i32;
            copy_name(&mut info.lo_name, &i.lo_file_name);
            // Values that do not fit the old structure are an error, as loop.c.
            if u64::from(info.lo_device) != i.lo_device
                || u64::from(info.lo_rdevice) != i.lo_rdevice
                || u64::from(info.lo_inode) != i.lo_inode
                || i64::from(info.lo_offset) as u64 != i.lo_offset
            {
                return Err(EOVERFLOW);
            }
            Ok(info)
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

/// Copies a `LO_NAME_SIZE` name between the `u8`/`c_char` arrays of the two structures.
fn copy_name<A: Copy, B: Copy>(dst: &mut [A; NAME_SIZE], src: &[B; NAME_SIZE]) {
    const { assert!(size_of::<A>() == 1 && size_of::<B>() == 1) };
    // SAFETY: Both arrays are `NAME_SIZE` bytes of one-byte integer types.
    unsafe {
        core::ptr::copy_nonoverlapping(
            src.as_ptr().cast::<u8>(),
            dst.as_mut_ptr().cast::<u8>(),
            NAME_SIZE,
        )
    };
}

/// `struct compat_loop_info`: `loop_info` as a 32-bit x86 process lays it out.
#[repr(C)]
#[derive(Clone, Copy)]
struct CompatLoopInfo {
    lo_number: i32,
    lo_device: u16,
    lo_inode: u32,
    lo_rdevice: u16,
    lo_offset: i32,
    lo_encrypt_type: i32,
    lo_encrypt_key_size: i32,
    lo_flags: i32,
    lo_name: [u8; NAME_SIZE],
    lo_encrypt_key: [u8; uapi::LO_KEY_SIZE as usize],
    lo_init: [u32; 2],
    reserved: [u8; 4],
}

// The 32-bit layout, fixed by the ABI.
const _: () = assert!(size_of::<CompatLoopInfo>() == 140);
const _: () = assert!(core::mem::offset_of!(CompatLoopInfo, lo_name) == 32);

/// `lo_compat_ioctl`.
pub(crate) fn dispatch_compat(
    dev: &LoopDevice,
    bdev: *mut bindings::block_device,
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
