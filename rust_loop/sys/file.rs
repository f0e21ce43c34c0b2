// SPDX-License-Identifier: GPL-2.0

//! [`BackingFile`]: the file or block device behind a loop device, and the I/O done on it.

use super::layout::c;
use super::{IovIter, SECTOR_SIZE};
use core::ptr::NonNull;
use kernel::{bindings, prelude::*};

// `include/linux/fs.h`: typed macros that bindgen does not export, with the C compiler's values
// (`c_values.c`, see `layout.rs`).
/// `FMODE_WRITE`: the file is open for writing.
pub(crate) const FMODE_WRITE: u32 = c::FMODE_WRITE as u32;
/// `FMODE_CAN_ODIRECT`: the file supports `O_DIRECT`.
pub(crate) const FMODE_CAN_ODIRECT: u32 = c::FMODE_CAN_ODIRECT as u32;
/// `FMODE_NOWAIT`: the file supports `IOCB_NOWAIT`.
pub(crate) const FMODE_NOWAIT: u32 = c::FMODE_NOWAIT as u32;
/// `IOCB_NOWAIT` (`RWF_NOWAIT`): fail with `-EAGAIN` rather than block.
pub(crate) const IOCB_NOWAIT: u32 = c::IOCB_NOWAIT as u32;
/// `IOCB_DONTCACHE` (`RWF_DONTCACHE`): drop the page cache of the range once done.
pub(crate) const IOCB_DONTCACHE: u32 = c::IOCB_DONTCACHE as u32;
// `include/uapi/linux/falloc.h`.
/// Keep the file size when allocating or punching.
pub(crate) const FALLOC_FL_KEEP_SIZE: i32 = c::FALLOC_FL_KEEP_SIZE as i32;
/// Deallocate a range.
pub(crate) const FALLOC_FL_PUNCH_HOLE: i32 = c::FALLOC_FL_PUNCH_HOLE as i32;
/// Zero a range, keeping it allocated.
pub(crate) const FALLOC_FL_ZERO_RANGE: i32 = c::FALLOC_FL_ZERO_RANGE as i32;
/// Zero a range by allocating written, zeroed blocks (the file system has the device below it
/// zero them; `EOPNOTSUPP` where it cannot). Not combinable with `FALLOC_FL_KEEP_SIZE`.
pub(crate) const FALLOC_FL_WRITE_ZEROES: i32 = c::FALLOC_FL_WRITE_ZEROES as i32;
// `include/linux/stat.h`.
const S_IFMT: u16 = bindings::S_IFMT as u16;
const S_IFREG: u16 = bindings::S_IFREG as u16;
const S_IFBLK: u16 = bindings::S_IFBLK as u16;
/// The `__GFP_IO | __GFP_FS` bits cleared from the backing mapping while bound (page cache
/// allocations for the backing file must not recurse into the loop device).
const GFP_IO_FS: u32 = (1 << bindings::___GFP_IO_BIT) | (1 << bindings::___GFP_FS_BIT);

// rust_loop/helpers.c: static inline kernel functions (`struct kiocb *` arguments, passed as
// `void *` because `struct kiocb` contains zero-sized C members).
extern "C" {
    fn rust_loop_kiocb_start_write(iocb: *mut core::ffi::c_void);
    fn rust_loop_kiocb_start_write_trylock(iocb: *mut core::ffi::c_void) -> bool;
    fn rust_loop_kiocb_end_write(iocb: *mut core::ffi::c_void);
    fn rust_loop_statfs_bsize(file: *mut core::ffi::c_void) -> core::ffi::c_ulong;
    fn rust_loop_file_cmtime_update_blocks(file: *mut core::ffi::c_void) -> bool;
    fn rust_loop_file_atime_update_blocks(file: *mut core::ffi::c_void) -> bool;
    fn rust_loop_file_sb_has_dio_wq(file: *mut core::ffi::c_void) -> bool;
    fn rust_loop_file_bdev_nowait(file: *mut core::ffi::c_void) -> bool;
    fn rust_loop_file_change_cookie(file: *mut core::ffi::c_void) -> u64;
    fn rust_loop_file_supports_dontcache(file: *mut core::ffi::c_void) -> bool;
    fn rust_loop_file_fs_type(file: *mut core::ffi::c_void) -> *const kernel::ffi::c_char;
}

/// Drops freeze protection taken for an asynchronous write on `iocb`'s file.
///
/// # Safety
///
/// `iocb` must hold protection from [`BackingFile::start_write`] or
/// [`BackingFile::start_write_trylock`], and its file must still be open.
pub(super) unsafe fn kiocb_end_write(iocb: *mut bindings::kiocb) {
    // SAFETY: Forwarded from the caller.
    unsafe { rust_loop_kiocb_end_write(iocb.cast()) }
}

/// Direction of a data transfer on the backing file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    /// From the backing file into the request's pages.
    Read,
    /// From the request's pages to the backing file.
    Write,
}

impl Dir {
    /// The `ITER_DEST`/`ITER_SOURCE` value of an `iov_iter` for this direction.
    pub(crate) fn iter_dir(self) -> u32 {
        match self {
            Dir::Read => bindings::ITER_DEST,
            Dir::Write => bindings::ITER_SOURCE,
        }
    }
}

/// Identity of a backing file, for `LOOP_GET_STATUS`.
pub(crate) struct FileIdentity {
    /// Device of the filesystem holding the file (`stat.dev`).
    pub(crate) dev: u32,
    /// Inode number.
    pub(crate) ino: u64,
    /// Device number if the file is a device node (`stat.rdev`).
    pub(crate) rdev: u32,
}

/// Direct-I/O alignment of a backing file (`loop_update_dio_alignment`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DioAlign {
    /// Minimum offset/size alignment of a direct I/O.
    pub(crate) min_size: u32,
    /// Memory alignment mask of a direct I/O buffer.
    pub(crate) mem_mask: u32,
}

/// An open file (or block device) that holds a loop device's data.
///
/// # Invariants
///
/// `file` is a valid `struct file` on which this object owns one reference.
pub(crate) struct BackingFile {
    file: NonNull<bindings::file>,
}

// SAFETY: `struct file` is reference counted and its operations are thread-safe.
unsafe impl Send for BackingFile {}
// SAFETY: As above.
unsafe impl Sync for BackingFile {}

impl Clone for BackingFile {
    fn clone(&self) -> Self {
        // SAFETY: The file is valid (type invariant); `get_file` takes another reference.
        unsafe { bindings::get_file(self.file.as_ptr()) };
        // INVARIANT: the new object owns the reference just taken.
        Self { file: self.file }
    }
}

impl Drop for BackingFile {
    fn drop(&mut self) {
        // SAFETY: We own one reference (type invariant) and give it back once.
        unsafe { bindings::fput(self.file.as_ptr()) }
    }
}

impl BackingFile {
    /// Takes a reference on the file behind the caller's descriptor `fd` (`fget`).
    pub(crate) fn from_fd(fd: u32) -> Result<Self> {
        // SAFETY: `fget` is safe to call with any descriptor value.
        let file = unsafe { bindings::fget(fd) };
        // INVARIANT: `fget` returned a referenced file, or null.
        NonNull::new(file).map(|file| Self { file }).ok_or(EBADF)
    }

    /// The raw `struct file`.
    pub(crate) fn as_raw(&self) -> *mut bindings::file {
        self.file.as_ptr()
    }

    fn raw(&self) -> &bindings::file {
        // SAFETY: The file is valid (type invariant) and these fields are stable while open.
        unsafe { &*self.file.as_ptr() }
    }

    /// The inode behind the file's mapping (`file->f_mapping->host`).
    fn host(&self) -> *mut bindings::inode {
        // SAFETY: An open file has a mapping with a host inode.
        unsafe { (*self.raw().f_mapping).host }
    }

    fn i_mode(&self) -> u16 {
        // SAFETY: The host inode lives as long as the file.
        unsafe { (*self.host()).i_mode }
    }

    /// Whether the file is a regular file.
    pub(crate) fn is_reg(&self) -> bool {
        self.i_mode() & S_IFMT == S_IFREG
    }

    /// Whether the file is a block device node.
    pub(crate) fn is_blk(&self) -> bool {
        self.i_mode() & S_IFMT == S_IFBLK
    }

    /// The device number if the file is a device node.
    pub(crate) fn rdev(&self) -> u32 {
        // SAFETY: The host inode lives as long as the file.
        unsafe { (*self.host()).i_rdev }
    }

    /// The block device if the file is a block device node.
    pub(crate) fn bdev(&self) -> Option<*mut bindings::block_device> {
        if self.is_blk() {
            // SAFETY: The inode of a block device node is embedded in its `block_device`.
            Some(unsafe { bindings::I_BDEV(self.host()) })
        } else {
            None
        }
    }

    /// The block device of the filesystem the file lives on, if any.
    fn sb_bdev(&self) -> *mut bindings::block_device {
        // SAFETY: The host inode and its superblock live as long as the file.
        unsafe { (*(*self.host()).i_sb).s_bdev }
    }

    /// The block device the data ends up on: the file itself, or its filesystem's device.
    pub(crate) fn underlying_bdev(&self) -> Option<*mut bindings::block_device> {
        self.bdev()
            .or_else(|| NonNull::new(self.sb_bdev()).map(|p| p.as_ptr()))
    }

    /// Whether the data ends up on a loop device (block major 7).
    pub(crate) fn is_on_loop_device(&self) -> bool {
        self.underlying_bdev().is_some_and(|b| {
            // SAFETY: The device lives as long as the file.
            unsafe { (*b).bd_dev >> bindings::MINORBITS == bindings::LOOP_MAJOR }
        })
    }

    fn f_op(&self) -> &bindings::file_operations {
        // SAFETY: An open file has file operations that live as long as it.
        unsafe { &*self.raw().f_op }
    }

    /// Whether the file was opened for writing and supports it.
    pub(crate) fn is_writable(&self) -> bool {
        self.raw().f_mode & FMODE_WRITE != 0 && self.f_op().write_iter.is_some()
    }

    /// Whether the file can back a loop device at all (`loop_check_backing_file`).
    pub(crate) fn check_ops(&self) -> Result {
        if self.f_op().read_iter.is_none() {
            return Err(EINVAL);
        }
        if self.raw().f_mode & FMODE_WRITE != 0 && self.f_op().write_iter.is_none() {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Whether the file supports `fsync` (the loop device then has a write cache).
    pub(crate) fn has_fsync(&self) -> bool {
        self.f_op().fsync.is_some()
    }

    /// Whether the file supports `fallocate` (discard and write-zeroes).
    pub(crate) fn has_fallocate(&self) -> bool {
        self.f_op().fallocate.is_some()
    }

    /// Whether the file was opened with `O_DIRECT`.
    pub(crate) fn is_o_direct(&self) -> bool {
        self.raw().f_flags & bindings::O_DIRECT != 0
    }

    /// Whether the file supports direct I/O (`FMODE_CAN_ODIRECT`).
    pub(crate) fn can_direct_io(&self) -> bool {
        self.raw().f_mode & FMODE_CAN_ODIRECT != 0
    }

    /// The name of the file system type holding the file (`s_type->name`: `xfs`, `ext4`,
    /// `overlay`, ...), `bdev` for a block device.
    pub(crate) fn fs_type(&self) -> &CStr {
        // SAFETY: The file is open for as long as `self` exists, so its inode, super block and
        // file system type are alive; the name is a static string of the file system's module,
        // which cannot be unloaded while it has a mounted super block.
        unsafe { CStr::from_char_ptr(rust_loop_file_fs_type(self.as_raw().cast())) }
    }

    /// Whether the file's page cache honours `IOCB_DONTCACHE` (`FOP_DONTCACHE`: xfs, ext4,
    /// nfs, ...; not on DAX, where there is no page cache to spare).
    pub(crate) fn supports_dontcache(&self) -> bool {
        // SAFETY: The file is open, so its operations, mapping and inode are alive.
        unsafe { rust_loop_file_supports_dontcache(self.as_raw().cast()) }
    }

    /// Whether the file supports non-blocking I/O attempts (`FMODE_NOWAIT`).
    pub(crate) fn can_nowait(&self) -> bool {
        self.raw().f_mode & FMODE_NOWAIT != 0
    }

    /// Whether a write now would first have to update the file's mtime/ctime in a way that
    /// blocks (the check `file_update_time` makes, less the updates a `lazytime` mount of XFS
    /// or of a file system without `->dirty_inode` records without blocking). A prediction:
    /// the answer can change at any time.
    pub(crate) fn cmtime_update_blocks(&self) -> bool {
        // SAFETY: The file is open for as long as `self` exists; the helper only reads its
        // inode's timestamps and flags and its super block's flags and operations.
        unsafe { rust_loop_file_cmtime_update_blocks(self.as_raw().cast()) }
    }

    /// Whether a read now would first update the file's atime in a way that may block (the
    /// check `file_accessed` makes, erring towards yes, less the updates a `lazytime` mount
    /// records without blocking). A prediction: the answer can change at any time.
    pub(crate) fn atime_update_blocks(&self) -> bool {
        // SAFETY: The file is open for as long as `self` exists; the helper only reads fields
        // of the file, its mount, its inode and its super block.
        unsafe { rust_loop_file_atime_update_blocks(self.as_raw().cast()) }
    }

    /// Whether the file's super block has its deferred direct-I/O completion workqueue, which
    /// the first asynchronous direct I/O on it creates (taking `wq_pool_mutex` and allocating
    /// with reclaim).
    pub(crate) fn has_dio_completion_wq(&self) -> bool {
        // SAFETY: The file is open for as long as `self` exists; its inode and super block
        // live at least as long; the helper reads one pointer.
        unsafe { rust_loop_file_sb_has_dio_wq(self.as_raw().cast()) }
    }

    /// Whether the block device the file's direct I/O goes to takes `REQ_NOWAIT` bios: a
    /// `IOCB_NOWAIT` direct I/O on a file system on a device that does not (dm-crypt, dm-thin,
    /// dm-flakey, ...) fails with `-EOPNOTSUPP`. A prediction: a device-mapper table can be
    /// swapped under the file system at any time.
    pub(crate) fn bdev_nowait(&self) -> bool {
        // SAFETY: The file is open for as long as `self` exists; its mapping's host, inode,
        // super block and their block device live at least as long; the helper reads flags.
        unsafe { rust_loop_file_bdev_nowait(self.as_raw().cast()) }
    }

    /// The file's change cookie (`i_version`): a new value after any change to its data or
    /// metadata since this call; 0 where the file system keeps none, and for a block device
    /// (its node's `i_version` does not follow the device's data).
    pub(crate) fn change_cookie(&self) -> u64 {
        // SAFETY: The file is open for as long as `self` exists; the helper reads its inode.
        unsafe { rust_loop_file_change_cookie(self.as_raw().cast()) }
    }

    fn path(&self) -> *const bindings::path {
        // SAFETY: `f_path` is set for an open file; taking its address reads nothing.
        unsafe { &raw const (*self.file.as_ptr()).__bindgen_anon_1.f_path }
    }

    /// Size in bytes: the device size for a block device, the accurate file size otherwise
    /// (`lo_calculate_size` before offset and limit).
    pub(crate) fn size(&self) -> u64 {
        if self.is_blk() {
            // SAFETY: The host inode lives as long as the file.
            let size = unsafe { core::ptr::read_volatile(&raw const (*self.host()).i_size) };
            return size.max(0) as u64;
        }
        // SAFETY: All-zero is a valid `kstat`.
        let mut st: bindings::kstat = unsafe { core::mem::zeroed() };
        // SAFETY: `path` is the file's path and `st` a valid output buffer.
        let rc =
            unsafe { bindings::vfs_getattr_nosec(self.path(), &mut st, bindings::STATX_SIZE, 0) };
        if rc != 0 {
            return 0;
        }
        st.size.max(0) as u64
    }

    /// Device, inode and rdev of the file, for `LOOP_GET_STATUS`.
    pub(crate) fn identity(&self) -> Result<FileIdentity> {
        // SAFETY: All-zero is a valid `kstat`.
        let mut st: bindings::kstat = unsafe { core::mem::zeroed() };
        // SAFETY: `path` is the file's path and `st` a valid output buffer.
        let rc = unsafe {
            bindings::vfs_getattr(
                self.path(),
                &mut st,
                bindings::STATX_INO,
                bindings::AT_STATX_SYNC_AS_STAT,
            )
        };
        kernel::error::to_result(rc)?;
        Ok(FileIdentity {
            dev: st.dev,
            ino: st.ino,
            rdev: st.rdev,
        })
    }

    /// Direct-I/O alignment: the filesystem's `STATX_DIOALIGN`, else its block device's limits,
    /// else one sector.
    pub(crate) fn dio_align(&self) -> DioAlign {
        // SAFETY: All-zero is a valid `kstat`.
        let mut st: bindings::kstat = unsafe { core::mem::zeroed() };
        // SAFETY: `path` is the file's path and `st` a valid output buffer.
        let rc =
            unsafe { bindings::vfs_getattr(self.path(), &mut st, bindings::STATX_DIOALIGN, 0) };
        if rc == 0 && st.result_mask & bindings::STATX_DIOALIGN != 0 && st.dio_mem_align != 0 {
            return DioAlign {
                min_size: st.dio_offset_align,
                mem_mask: (st.dio_mem_align - 1).min(kernel::page::PAGE_SIZE as u32 - 1),
            };
        }
        let sb_bdev = self.sb_bdev();
        if !sb_bdev.is_null() {
            // SAFETY: The superblock's device lives as long as the file.
            let lim = unsafe { (*(*(*sb_bdev).bd_disk).queue).limits };
            return DioAlign {
                min_size: lim.logical_block_size,
                mem_mask: lim.dma_alignment,
            };
        }
        DioAlign {
            min_size: SECTOR_SIZE,
            mem_mask: SECTOR_SIZE - 1,
        }
    }

    /// Discard support: `(granularity, max sectors)` (`loop_get_discard_config`).
    pub(crate) fn discard_config(&self) -> (u32, u32) {
        if let Some(bdev) = self.bdev() {
            // SAFETY: The block device of an open device node is valid.
            let lim = unsafe { (*(*(*bdev).bd_disk).queue).limits };
            return (lim.discard_granularity, lim.max_write_zeroes_sectors);
        }
        if self.has_fallocate() {
            // SAFETY: The file is open; the helper calls `vfs_statfs` on its path.
            let bsize = unsafe { rust_loop_statfs_bsize(self.as_raw().cast()) };
            if bsize != 0 {
                return (bsize as u32, u32::MAX >> 9);
            }
        }
        (0, 0)
    }

    /// The logical block size a backing block device has now, or `None` for a regular file.
    /// It can change while the file backs a loop device (`LOOP_SET_BLOCK_SIZE` on a loop
    /// device below), unlike the direct-I/O alignment a file system reports.
    pub(crate) fn current_block_size(&self) -> Option<u32> {
        let bdev = self.bdev()?;
        // SAFETY: The block device of an open device node, its disk and queue live as long as
        // the file. The limits may be updated meanwhile (`queue_limits_commit_update`): a
        // volatile read of the aligned `u32` sees the old or the new size, as
        // `bdev_logical_block_size` does.
        Some(unsafe {
            core::ptr::read_volatile(core::ptr::addr_of!(
                (*(*(*bdev).bd_disk).queue).limits.logical_block_size
            ))
        })
    }

    /// Whether the data ends up on a rotational device.
    pub(crate) fn is_rotational(&self) -> bool {
        match self.underlying_bdev() {
            // SAFETY: The device lives as long as the file.
            Some(b) => unsafe {
                (*(*(*b).bd_disk).queue).limits.features & bindings::BLK_FEAT_ROTATIONAL != 0
            },
            None => false,
        }
    }

    /// Clears `__GFP_IO | __GFP_FS` from the backing mapping; returns the old mask.
    pub(crate) fn restrict_gfp(&self) -> u32 {
        // SAFETY: The mapping lives as long as the file; loop.c changes it the same way.
        unsafe {
            let m = self.raw().f_mapping;
            let old = (*m).gfp_mask;
            (*m).gfp_mask = old & !GFP_IO_FS;
            old
        }
    }

    /// Restores the backing mapping's gfp mask saved by [`Self::restrict_gfp`].
    pub(crate) fn restore_gfp(&self, mask: u32) {
        // SAFETY: As in `restrict_gfp`.
        unsafe { (*self.raw().f_mapping).gfp_mask = mask };
    }

    /// Writes `"<path>\n"` of the file into the sysfs page `buf`; returns the length or errno.
    pub(crate) fn path_to_sysfs(&self, buf: &mut [u8]) -> core::result::Result<usize, Error> {
        let len = buf.len().min(kernel::page::PAGE_SIZE) as i32;
        // SAFETY: `buf` is a writable page of `len` bytes; `file_path` writes the path at its
        // end and returns a pointer into it, or an error pointer.
        let p = unsafe { bindings::file_path(self.as_raw(), buf.as_mut_ptr().cast(), len - 1) };
        let p = kernel::error::from_err_ptr(p)?;
        let start = (p as usize).wrapping_sub(buf.as_ptr() as usize);
        if start >= buf.len() {
            return Err(EINVAL);
        }
        let n = buf[start..]
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(buf.len() - start);
        buf.copy_within(start..start + n, 0);
        if n + 1 >= buf.len() {
            return Err(super::compat::code::enametoolong());
        }
        buf[n] = b'\n';
        buf[n + 1] = 0;
        Ok(n + 1)
    }

    /// Synchronous buffered read or write of `iter` at byte `pos`: a kiocb without
    /// `IOCB_DIRECT` (so through the page cache even when the file was opened `O_DIRECT`, as
    /// loop.c's buffered mode), with freeze protection around writes. With `dontcache` (only
    /// where [`Self::supports_dontcache`]) the page cache drops the data once it is read or
    /// written back (`IOCB_DONTCACHE`). Returns the bytes transferred or a negative errno.
    pub(crate) fn rw_sync(
        &self,
        dir: Dir,
        iter: &mut IovIter<'_>,
        pos: u64,
        ioprio: u16,
        dontcache: bool,
    ) -> isize {
        // SAFETY: All-zero is a valid `kiocb`: synchronous (no `ki_complete`), no flags.
        let mut iocb: bindings::kiocb = unsafe { core::mem::zeroed() };
        if dontcache {
            iocb.ki_flags = IOCB_DONTCACHE as i32;
        }
        iocb.ki_filp = self.as_raw();
        iocb.ki_pos = pos as i64;
        iocb.ki_ioprio = ioprio;
        if dir == Dir::Write {
            self.start_write(&mut iocb);
        }
        // SAFETY: `iocb` is synchronous: the call returns only when done with `iter`.
        let ret = unsafe { self.rw_kiocb(dir, &mut iocb, iter) };
        if dir == Dir::Write {
            // SAFETY: Protection was taken on `iocb`, whose file is this open one.
            unsafe { kiocb_end_write(&mut iocb) };
        }
        ret
    }

    /// Submits `iocb` (prepared for this file) with `read_iter`/`write_iter`; returns the bytes
    /// transferred, `-EIOCBQUEUED` when `ki_complete` will report the result, or a negative
    /// errno.
    ///
    /// # Safety
    ///
    /// `iocb` must be valid and target this file; the pages of `iter` (and, for an
    /// asynchronous kiocb, its segment table) must stay alive until the kiocb completes.
    pub(super) unsafe fn rw_kiocb(
        &self,
        dir: Dir,
        iocb: *mut bindings::kiocb,
        iter: &mut IovIter<'_>,
    ) -> isize {
        let op = match dir {
            Dir::Read => self.f_op().read_iter,
            Dir::Write => self.f_op().write_iter,
        };
        match op {
            // SAFETY: The file is open; the rest is guaranteed by the caller.
            Some(f) => unsafe { f(iocb, iter.as_raw()) },
            None => -(bindings::EINVAL as isize),
        }
    }

    /// Takes freeze protection of the file's filesystem for a write (`kiocb_start_write`);
    /// may sleep while the filesystem is frozen.
    pub(super) fn start_write(&self, iocb: &mut bindings::kiocb) {
        // SAFETY: `iocb.ki_filp` is this open file.
        unsafe { rust_loop_kiocb_start_write(core::ptr::from_mut(iocb).cast()) }
    }

    /// As [`Self::start_write`] but fails instead of sleeping.
    pub(super) fn start_write_trylock(&self, iocb: &mut bindings::kiocb) -> bool {
        // SAFETY: `iocb.ki_filp` is this open file.
        unsafe { rust_loop_kiocb_start_write_trylock(core::ptr::from_mut(iocb).cast()) }
    }

    /// `vfs_fsync`.
    pub(crate) fn fsync(&self) -> i32 {
        // SAFETY: The file is open.
        unsafe { bindings::vfs_fsync(self.as_raw(), 0) }
    }

    /// The file's own `fallocate` (as loop.c: no permission checks, the device is the user).
    pub(crate) fn fallocate(&self, mode: i32, pos: u64, len: u64) -> i32 {
        match self.f_op().fallocate {
            // SAFETY: The file is open and implements `fallocate`.
            Some(f) => unsafe { f(self.as_raw(), mode, pos as i64, len as i64) as i32 },
            None => -(bindings::EOPNOTSUPP as i32),
        }
    }
}
