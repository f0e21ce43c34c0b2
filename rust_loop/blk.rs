// SPDX-License-Identifier: GPL-2.0

//! The block-layer pieces that the 7.3 kernel crate's `block::mq` does not offer: a tag set with a
//! typed per-command PDU, a gendisk with full `block_device_operations` (open, release, ioctl,
//! compat_ioctl, free_disk, owner), request accessors (op, position, bytes, bio/bvec walk), queue
//! limits updates and queue freezing.
//!
//! C headers: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h),
//! [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use core::{
    marker::PhantomData,
    mem::size_of,
    ptr::NonNull,
    sync::atomic::{AtomicU8, Ordering},
};
use kernel::{
    bindings,
    error::{from_err_ptr, to_result},
    prelude::*,
    sync::Arc,
    types::Opaque,
};

/// Bytes per sector, the unit of request positions.
pub(crate) const SECTOR_SHIFT: u32 = 9;
/// One sector in bytes.
pub(crate) const SECTOR_SIZE: u32 = 1 << SECTOR_SHIFT;

// `include/linux/blk_types.h`: typed macros that bindgen does not export.
const REQ_OP_MASK: u32 = (1 << bindings::REQ_OP_BITS) - 1;
/// `REQ_NOUNMAP`: write-zeroes must not deallocate.
const REQ_NOUNMAP: u32 = 1 << bindings::req_flag_bits___REQ_NOUNMAP;

/// `blk_mode_t` bits (`include/linux/blkdev.h`).
pub(crate) const BLK_OPEN_WRITE: u32 = 1 << 1;
/// `BLK_OPEN_EXCL`: the opener holds the device exclusively.
pub(crate) const BLK_OPEN_EXCL: u32 = 1 << 2;
/// `BLK_FEAT_WRITE_CACHE`: the device has a volatile write cache (flushes are meaningful).
pub(crate) const BLK_FEAT_WRITE_CACHE: u32 = 1 << 0;

/// Completion status of a request (`blk_status_t`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BlkStatus(u8);

impl BlkStatus {
    /// Success.
    pub(crate) const OK: Self = Self(0);
    /// `BLK_STS_NOTSUPP`.
    pub(crate) const NOTSUPP: Self = Self(1);
    /// `BLK_STS_IOERR`.
    pub(crate) const IOERR: Self = Self(10);
}

/// The operation of a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReqOp {
    /// Read data.
    Read,
    /// Write data.
    Write,
    /// Flush the volatile write cache.
    Flush,
    /// Discard (deallocate) a range.
    Discard,
    /// Write zeroes to a range.
    WriteZeroes,
    /// Any other operation (not advertised by rust_loop).
    Other,
}

/// A request handed to the driver by blk-mq.
///
/// # Invariants
///
/// The wrapped `struct request` is valid and owned by the driver (started, not yet ended) for as
/// long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct Request(Opaque<bindings::request>);

impl Request {
    /// Borrows a raw request.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a request that the driver owns for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::request) -> &'a Self {
        // SAFETY: `Request` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// The raw `struct request`.
    pub(crate) fn as_raw(&self) -> *mut bindings::request {
        self.0.get()
    }

    fn cmd_flags(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid; `cmd_flags` is stable while owned.
        unsafe { (*self.as_raw()).cmd_flags }
    }

    /// The request's operation.
    pub(crate) fn op(&self) -> ReqOp {
        match self.cmd_flags() & REQ_OP_MASK {
            bindings::req_op_REQ_OP_READ => ReqOp::Read,
            bindings::req_op_REQ_OP_WRITE => ReqOp::Write,
            bindings::req_op_REQ_OP_FLUSH => ReqOp::Flush,
            bindings::req_op_REQ_OP_DISCARD => ReqOp::Discard,
            bindings::req_op_REQ_OP_WRITE_ZEROES => ReqOp::WriteZeroes,
            _ => ReqOp::Other,
        }
    }

    /// Whether a write-zeroes request must keep the blocks allocated (`REQ_NOUNMAP`).
    pub(crate) fn no_unmap(&self) -> bool {
        self.cmd_flags() & REQ_NOUNMAP != 0
    }

    /// Byte position of the request on the device.
    pub(crate) fn pos(&self) -> u64 {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).__sector << SECTOR_SHIFT }
    }

    /// Remaining bytes of the request.
    pub(crate) fn bytes(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).__data_len }
    }

    /// Whether the request carries more than one bio (it was merged).
    pub(crate) fn is_multi_bio(&self) -> bool {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).bio != (*self.as_raw()).biotail }
    }

    /// The request's I/O priority (`req_get_ioprio`: that of its first bio).
    pub(crate) fn ioprio(&self) -> u16 {
        self.bios().next().map_or(0, |b| {
            // SAFETY: The bio is valid for the request's lifetime.
            unsafe { (*b.as_raw()).bi_ioprio }
        })
    }

    /// The request's bios, in order.
    pub(crate) fn bios(&self) -> Bios<'_> {
        // SAFETY: By the type invariant the request is valid.
        let next = unsafe { (*self.as_raw()).bio };
        Bios {
            next,
            _rq: PhantomData,
        }
    }

    /// Index of the hardware queue the request was dispatched on.
    pub(crate) fn hw_queue(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid; a dispatched request has a
        // hardware context.
        unsafe { rust_loop_rq_hw_queue(self.as_raw().cast()) }
    }

    /// The per-command data of the request.
    pub(crate) fn pdu<T>(&self) -> *mut T {
        // SAFETY: By the type invariant the request is valid; the PDU follows it in memory.
        unsafe { bindings::blk_mq_rq_to_pdu(self.as_raw()).cast() }
    }

    /// Marks the request as started (`blk_mq_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver.
        unsafe { bindings::blk_mq_start_request(self.as_raw()) }
    }

    /// Hands the request to the `complete` callback through `blk_mq_complete_request`,
    /// possibly later or on another CPU (for a single hardware queue: the BLOCK softirq, which
    /// from task context means a ksoftirqd wakeup). The request must not be touched by the
    /// caller afterwards.
    pub(crate) fn complete(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver.
        unsafe { bindings::blk_mq_complete_request(self.as_raw()) }
    }

    /// Whether [`Request::complete_here`] may be called now: in task context, with at least
    /// [`COMPLETE_HERE_MIN_STACK`] bytes of kernel stack left for the completion (the `end_io`
    /// chain of the request's bios).
    pub(crate) fn may_complete_here() -> bool {
        // SAFETY: Reads the current context and stack position.
        unsafe { rust_loop_may_complete_here(COMPLETE_HERE_MIN_STACK as core::ffi::c_ulong) }
    }

    /// Runs the `complete` callback before returning (`blk_mq_complete_request_direct`). Only
    /// when [`Request::may_complete_here`] said so, and with no lock held that the callback
    /// or the bios' `end_io` take. The request must not be touched by the caller afterwards.
    pub(crate) fn complete_here(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver; the
        // callback is the queue's own.
        unsafe { rust_loop_complete_request_direct(self.as_raw().cast()) }
    }

    /// Ends the request with `status`.
    pub(crate) fn end(&self, status: BlkStatus) {
        // SAFETY: By the type invariant the request is valid and owned by the driver; ending it
        // gives it back to blk-mq and the caller does not use it afterwards.
        unsafe { bindings::blk_mq_end_request(self.as_raw(), status.0) }
    }
}

/// Iterator over the bios of a request.
pub(crate) struct Bios<'a> {
    next: *mut bindings::bio,
    _rq: PhantomData<&'a Request>,
}

impl<'a> Iterator for Bios<'a> {
    type Item = Bio<'a>;

    fn next(&mut self) -> Option<Bio<'a>> {
        let bio = NonNull::new(self.next)?;
        // SAFETY: The bios of an owned request are valid and linked by `bi_next`.
        self.next = unsafe { (*bio.as_ptr()).bi_next };
        Some(Bio {
            ptr: bio,
            _rq: PhantomData,
        })
    }
}

/// A bio of an owned request.
#[derive(Clone, Copy)]
pub(crate) struct Bio<'a> {
    ptr: NonNull<bindings::bio>,
    _rq: PhantomData<&'a Request>,
}

impl<'a> Bio<'a> {
    /// The raw `struct bio`.
    pub(crate) fn as_raw(&self) -> *mut bindings::bio {
        self.ptr.as_ptr()
    }

    fn iter(&self) -> bindings::bvec_iter {
        // SAFETY: The bio is valid for `'a`; `bvec_iter` is `Copy` (read unaligned: it is packed).
        unsafe { core::ptr::addr_of!((*self.as_raw()).bi_iter).read_unaligned() }
    }

    /// Bytes of data in the bio.
    pub(crate) fn size(&self) -> u32 {
        self.iter().bi_size
    }

    /// The bio's multi-page segments (`bio_for_each_bvec`).
    pub(crate) fn bvecs(&self) -> BvecIter<'a> {
        // SAFETY: The bio is valid for `'a`.
        let table = unsafe { (*self.as_raw()).bi_io_vec };
        BvecIter {
            table,
            iter: self.iter(),
            _bio: PhantomData,
        }
    }

    /// The bio's bvec table starting at its current position, with the offset into the first
    /// entry: what `iov_iter_bvec` needs to walk the bio in place.
    pub(crate) fn bvec_table(&self) -> (*const bindings::bio_vec, usize) {
        let it = self.iter();
        // SAFETY: `bi_idx` indexes the bio's own bvec table.
        let first = unsafe { (*self.as_raw()).bi_io_vec.add(it.bi_idx as usize) };
        (first, it.bi_offset as usize)
    }
}

/// Iterator over the multi-page bio_vecs of one bio (`for_each_mp_bvec`).
pub(crate) struct BvecIter<'a> {
    table: *const bindings::bio_vec,
    iter: bindings::bvec_iter,
    _bio: PhantomData<Bio<'a>>,
}

impl Iterator for BvecIter<'_> {
    type Item = bindings::bio_vec;

    fn next(&mut self) -> Option<bindings::bio_vec> {
        if self.iter.bi_size == 0 {
            return None;
        }
        // SAFETY: While `bi_size` is non-zero, `bi_idx` indexes a valid entry of the bio's table.
        let bv = unsafe { *self.table.add(self.iter.bi_idx as usize) };
        let done = self.iter.bi_offset;
        let len = (bv.bv_len - done).min(self.iter.bi_size);
        // `bvec_iter_advance_single`.
        self.iter.bi_size -= len;
        if done + len == bv.bv_len {
            self.iter.bi_idx += 1;
            self.iter.bi_offset = 0;
        } else {
            self.iter.bi_offset = done + len;
        }
        Some(bindings::bio_vec {
            bv_page: bv.bv_page,
            bv_len: len,
            bv_offset: bv.bv_offset + done,
        })
    }
}

extern "C" {
    // rust_loop/helpers.c: `task_struct` fields (see there why not through bindgen).
    fn rust_loop_in_fs_transaction() -> bool;
    fn rust_loop_task_is_loop_worker() -> bool;
    fn rust_loop_stack_remaining() -> core::ffi::c_ulong;
    fn rust_loop_task_flags_set(flags: core::ffi::c_uint) -> core::ffi::c_uint;
    fn rust_loop_task_flags_restore(old: core::ffi::c_uint, flags: core::ffi::c_uint);
    fn rust_loop_task_plugged() -> bool;
    fn rust_loop_bio_list_take() -> *mut core::ffi::c_void;
    fn rust_loop_bio_list_restore(list: *mut core::ffi::c_void);
    fn rust_loop_task_in_reclaim() -> bool;
    // `struct gendisk *` as `void *`: it contains zero-sized members, not FFI-safe to Rust.
    fn rust_loop_disk_part_scan_pending(disk: *mut core::ffi::c_void) -> bool;
    fn rust_loop_disk_cancel_part_scan(disk: *mut core::ffi::c_void);
    fn rust_loop_disk_page_cache_dirty(disk: *mut core::ffi::c_void) -> bool;
    fn rust_loop_disk_parts_digest(disk: *mut core::ffi::c_void) -> u64;
    // `void *`: `struct request` contains zero-sized C members.
    fn rust_loop_rq_hw_queue(rq: *mut core::ffi::c_void) -> core::ffi::c_uint;
    fn rust_loop_may_complete_here(min_stack: core::ffi::c_ulong) -> bool;
    // `void *`: `struct request` contains zero-sized C members.
    fn rust_loop_complete_request_direct(rq: *mut core::ffi::c_void);
    fn rust_loop_online_cpus() -> core::ffi::c_uint;
}

/// Kernel stack bytes that must be left for [`Request::complete_here`] to run the completion
/// (the request's bios' `end_io` chain) on the current stack rather than from the BLOCK
/// softirq.
pub(crate) const COMPLETE_HERE_MIN_STACK: usize = 4096;

/// Number of online CPUs (the bound on hardware queues).
pub(crate) fn online_cpus() -> u32 {
    // SAFETY: Reads the online CPU mask.
    unsafe { rust_loop_online_cpus() }
}

/// Whether the current task has a block plug (requests may be dispatched from its flush).
pub(crate) fn plugged() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_task_plugged() }
}

/// While it lives, bios the current task submits are submitted at once, not deferred.
///
/// Inside `submit_bio` (direct issue, or a submitter that found every tag taken and runs the
/// queue before it sleeps) the block layer queues the bios submitted meanwhile on
/// `current->bio_list` and submits them only once the bio it is handling is done with, which
/// may first wait for a tag of the very queue whose `queue_rq` is running. Backing I/O started
/// from there must not wait on that list: what the worker waits for in the backing file system
/// (XFS's sub-block writes wait for every direct I/O in flight on the file) could be held there
/// by a task waiting for a tag that only the worker's progress frees.
///
/// # Invariants
///
/// `saved` is the list taken from the current task, put back on drop, on the same task (the
/// value is neither `Send` nor kept beyond the scope that created it).
pub(crate) struct UndeferredBios {
    saved: *mut core::ffi::c_void,
}

impl UndeferredBios {
    /// Takes the current task's deferred-bio list until the value is dropped.
    pub(crate) fn new() -> Self {
        // SAFETY: Reads and clears a field of the current task; `drop` puts it back.
        let saved = unsafe { rust_loop_bio_list_take() };
        // INVARIANT: taken from the current task just now.
        Self { saved }
    }

    /// Whether the task was inside `submit_bio` (it had a deferred-bio list).
    pub(crate) fn was_deferring(&self) -> bool {
        !self.saved.is_null()
    }
}

impl Drop for UndeferredBios {
    fn drop(&mut self) {
        // SAFETY: Puts back the list taken from this same task (type invariant); any nested
        // `submit_bio` has cleared it again on return.
        unsafe { rust_loop_bio_list_restore(self.saved) }
    }
}

/// Whether the current task is reclaiming memory or must not recurse into I/O for it
/// (`PF_MEMALLOC*`).
pub(crate) fn in_reclaim() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_task_in_reclaim() }
}

/// Whether the current task is inside a filesystem transaction (`current->journal_info`):
/// submitting to a backing filesystem from there would nest its transaction in ours.
pub(crate) fn in_fs_transaction() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_in_fs_transaction() }
}

/// Whether the current task is a loop device's worker (`PF_LOCAL_THROTTLE`, set by rust_loop's
/// and loop.c's workers): its I/O to another loop device may come from inside the backing file
/// system's transaction (XFS does not mark those in `journal_info`).
pub(crate) fn submitter_is_loop_worker() -> bool {
    // SAFETY: Reads the current task's flags.
    unsafe { rust_loop_task_is_loop_worker() }
}

/// An identity of the current task, for comparing with another (never a pointer to use).
pub(crate) fn current_task_id() -> usize {
    kernel::task::Task::current_raw() as usize
}

/// Bytes of kernel stack left below the current frame.
pub(crate) fn stack_remaining() -> usize {
    // SAFETY: Reads the current task's stack base and the frame address.
    unsafe { rust_loop_stack_remaining() as usize }
}

/// `PF_*` flags set on the current task for a scope; the previous values come back on drop.
pub(crate) struct TaskFlags {
    old: u32,
    flags: u32,
}

impl TaskFlags {
    /// Sets `flags` (`PF_*`) on the current task.
    pub(crate) fn set(flags: u32) -> Self {
        // SAFETY: The current task changes its own flags.
        let old = unsafe { rust_loop_task_flags_set(flags) };
        Self { old, flags }
    }
}

impl Drop for TaskFlags {
    fn drop(&mut self) {
        // SAFETY: Restores what `set` changed on the same (current) task.
        unsafe { rust_loop_task_flags_restore(self.old, self.flags) }
    }
}

/// A request queue of a disk this driver created.
///
/// # Invariants
///
/// The queue is valid for as long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct Queue(Opaque<bindings::request_queue>);

impl Queue {
    /// Borrows a raw queue.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::request_queue) -> &'a Self {
        // SAFETY: Transparent wrapper; validity is the caller's guarantee.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut bindings::request_queue {
        self.0.get()
    }

    /// Freezes the queue: waits for every request in flight to end and holds new ones back
    /// until the returned guard is dropped.
    pub(crate) fn freeze(&self) -> QueueFreeze<'_> {
        // SAFETY: The queue is valid; the guard unfreezes it exactly once.
        unsafe { bindings::blk_mq_freeze_queue_nomemsave(self.as_raw()) };
        QueueFreeze {
            queue: self,
            _noio: TaskFlags::set(bindings::PF_MEMALLOC_NOIO),
        }
    }

    /// Updates the queue limits under the queue's limits lock (`queue_limits_start_update` /
    /// `queue_limits_commit_update`).
    pub(crate) fn update_limits(&self, f: impl FnOnce(&mut bindings::queue_limits)) -> Result {
        // SAFETY: The queue is valid. `queue_limits_start_update` is `mutex_lock(&q->limits_lock)`
        // plus a copy of the limits; `queue_limits_commit_update` releases the lock.
        unsafe {
            let q = self.as_raw();
            bindings::mutex_lock(&raw mut (*q).limits_lock);
            let mut lim = (*q).limits;
            f(&mut lim);
            to_result(bindings::queue_limits_commit_update(q, &mut lim))
        }
    }

    /// Updates the queue limits and commits them with the queue frozen, then runs `frozen`
    /// while it still is (the `queue_limits_start_update`, `blk_mq_freeze_queue`,
    /// `queue_limits_commit_update` sequence of loop.c).
    pub(crate) fn update_limits_frozen(
        &self,
        f: impl FnOnce(&mut bindings::queue_limits),
        frozen: impl FnOnce(&QueueFreeze<'_>),
    ) -> Result {
        let q = self.as_raw();
        // SAFETY: The queue is valid; this is `queue_limits_start_update`, whose lock
        // `queue_limits_commit_update` releases below.
        let mut lim = unsafe {
            bindings::mutex_lock(&raw mut (*q).limits_lock);
            (*q).limits
        };
        f(&mut lim);
        let guard = self.freeze();
        // SAFETY: The limits lock is held (taken above); commit releases it.
        let rc = unsafe { bindings::queue_limits_commit_update(q, &mut lim) };
        frozen(&guard);
        drop(guard);
        to_result(rc)
    }

    /// Whether rq-qos policies (wbt, iolatency, iocost) are attached to the queue.
    pub(crate) fn has_rq_qos(&self) -> bool {
        // SAFETY: The queue is valid; the pointer is only compared with null.
        unsafe { !core::ptr::read_volatile(&raw const (*self.as_raw()).rq_qos).is_null() }
    }

    /// A copy of the current limits.
    pub(crate) fn limits(&self) -> bindings::queue_limits {
        // SAFETY: The queue is valid; reading a snapshot of the limits is what the C helpers do.
        unsafe { (*self.as_raw()).limits }
    }

    /// Sets or clears a `QUEUE_FLAG_*`.
    pub(crate) fn set_flag(&self, flag: u32, on: bool) {
        // SAFETY: The queue is valid; the flag helpers use atomic bit operations.
        unsafe {
            if on {
                bindings::blk_queue_flag_set(flag, self.as_raw())
            } else {
                bindings::blk_queue_flag_clear(flag, self.as_raw())
            }
        }
    }
}

/// A frozen queue; unfreezes on drop.
pub(crate) struct QueueFreeze<'a> {
    queue: &'a Queue,
    /// `memalloc_noio_save()` for the time of the freeze, as `blk_mq_freeze_queue`.
    _noio: TaskFlags,
}

impl Drop for QueueFreeze<'_> {
    fn drop(&mut self) {
        // SAFETY: The queue was frozen by `Queue::freeze`, which created this guard.
        unsafe { bindings::blk_mq_unfreeze_queue_nomemrestore(self.queue.as_raw()) };
    }
}

/// The callbacks of a blk-mq disk with full block-device operations.
///
/// `Data` is the per-disk state: it is set as both the queue's `queuedata` and the gendisk's
/// `private_data`; the disk keeps one reference, dropped in `free_disk`.
pub(crate) trait DiskOps: Sized + 'static {
    /// Per-disk state.
    type Data: Send + Sync;
    /// Per-command data, placed after each `struct request`.
    type Pdu;

    /// Initialises the PDU of a newly allocated request (once per tag).
    ///
    /// # Safety
    ///
    /// `pdu` points to uninitialised memory of `size_of::<Self::Pdu>()` bytes.
    unsafe fn init_pdu(pdu: *mut Self::Pdu);
    /// Starts a request.
    fn queue_rq(data: &Self::Data, rq: &Request) -> BlkStatus;
    /// Completes a request after [`Request::complete`].
    fn complete(data: &Self::Data, rq: &Request);
    /// A new opener.
    fn open(data: &Self::Data, mode: u32) -> Result;
    /// An opener went away (called with the disk's `open_mutex` held).
    fn release(data: &Self::Data);
    /// A block device ioctl.
    fn ioctl(
        data: &Self::Data,
        bdev: *mut bindings::block_device,
        mode: u32,
        cmd: u32,
        arg: usize,
    ) -> Result<i32>;
    /// A 32-bit block device ioctl.
    fn compat_ioctl(
        data: &Self::Data,
        bdev: *mut bindings::block_device,
        mode: u32,
        cmd: u32,
        arg: usize,
    ) -> Result<i32>;
}

/// A blk-mq tag set and gendisk (`loopN`), with its block-device operations.
///
/// Life cycle: [`Disk::new`] allocates both; [`Disk::add`] hands the disk a reference to its
/// per-disk state (`queuedata`, `private_data`) and makes it visible; [`Disk::remove`] deletes
/// it, after which the block layer drops that reference in `free_disk`. A disk that was never
/// added is freed on drop.
///
/// # Invariants
///
/// `tag_set` is initialised (`blk_mq_alloc_tag_set`) and `disk` was allocated on it by
/// `__blk_mq_alloc_disk`, until `state` is `DISK_REMOVED`; both are freed exactly once.
pub(crate) struct Disk<T: DiskOps> {
    tag_set: KBox<Opaque<bindings::blk_mq_tag_set>>,
    disk: NonNull<bindings::gendisk>,
    /// Where the disk is in its life cycle: one of the `DISK_*` values below.
    state: AtomicU8,
    _t: PhantomData<T>,
}

const DISK_ALLOCATED: u8 = 0;
const DISK_ADDING: u8 = 1;
const DISK_ADDED: u8 = 2;
const DISK_REMOVED: u8 = 3;

// SAFETY: The gendisk and tag set are used through thread-safe C APIs.
unsafe impl<T: DiskOps> Send for Disk<T> {}
// SAFETY: As above; `&Disk` only exposes thread-safe operations.
unsafe impl<T: DiskOps> Sync for Disk<T> {}

/// Parameters of a new disk.
pub(crate) struct DiskConfig {
    /// `major` and `first_minor`/`minors` of the disk.
    pub(crate) major: u32,
    /// First minor.
    pub(crate) first_minor: u32,
    /// Minors reserved (1 + partitions).
    pub(crate) minors: u32,
    /// Tag set queue depth.
    pub(crate) queue_depth: u32,
    /// Number of hardware queues.
    pub(crate) nr_hw_queues: u32,
    /// `BLK_MQ_F_*` flags.
    pub(crate) flags: u32,
    /// Initial `max_hw_sectors`.
    pub(crate) max_hw_sectors: u32,
    /// Initial `max_segments`.
    pub(crate) max_segments: u16,
    /// Whether in-kernel partition scanning is suppressed (`GD_SUPPRESS_PART_SCAN`).
    pub(crate) suppress_part_scan: bool,
}

impl<T: DiskOps> Disk<T> {
    const MQ_OPS: bindings::blk_mq_ops = bindings::blk_mq_ops {
        queue_rq: Some(Self::queue_rq_callback),
        complete: Some(Self::complete_callback),
        init_request: Some(Self::init_request_callback),
        // SAFETY: All-zero is a valid `blk_mq_ops` (every callback absent).
        ..unsafe { core::mem::zeroed() }
    };
    const FOPS: bindings::block_device_operations = bindings::block_device_operations {
        open: Some(Self::open_callback),
        release: Some(Self::release_callback),
        ioctl: Some(Self::ioctl_callback),
        compat_ioctl: Some(Self::compat_ioctl_callback),
        free_disk: Some(Self::free_disk_callback),
        owner: <crate::LoopModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr(),
        // SAFETY: All-zero is a valid `block_device_operations` (every callback absent).
        ..unsafe { core::mem::zeroed() }
    };

    /// Allocates the tag set and the gendisk named `name`; the disk is not yet visible.
    pub(crate) fn new(cfg: &DiskConfig, name: &CStr) -> Result<Self> {
        let tag_set = KBox::new(Opaque::<bindings::blk_mq_tag_set>::zeroed(), GFP_KERNEL)?;
        let set = tag_set.get();
        // SAFETY: `set` points to a zeroed tag set that outlives the disk (we own both). The
        // ops tables are `'static` promoted constants.
        unsafe {
            (*set).ops = &Self::MQ_OPS;
            (*set).nr_hw_queues = cfg.nr_hw_queues;
            (*set).queue_depth = cfg.queue_depth;
            (*set).numa_node = bindings::NUMA_NO_NODE;
            (*set).cmd_size = size_of::<T::Pdu>() as u32;
            (*set).flags = cfg.flags;
            to_result(bindings::blk_mq_alloc_tag_set(set))?;
        }
        let free_set = kernel::types::ScopeGuard::new(|| {
            // SAFETY: The tag set was allocated above and no disk uses it.
            unsafe { bindings::blk_mq_free_tag_set(set) }
        });

        // SAFETY: All-zero limits mean "defaults" to `__blk_mq_alloc_disk`.
        let mut lim: bindings::queue_limits = unsafe { core::mem::zeroed() };
        lim.max_hw_sectors = cfg.max_hw_sectors;
        lim.max_segments = cfg.max_segments;
        let key = kernel::static_lock_class!();
        // SAFETY: `set` is an allocated tag set; `lim` is a valid limits structure; the lock
        // class key is static.
        let disk = from_err_ptr(unsafe {
            bindings::__blk_mq_alloc_disk(set, &mut lim, core::ptr::null_mut(), key.as_ptr())
        })?;
        // SAFETY: `disk` was just allocated and is exclusively ours until `add_disk`.
        unsafe {
            (*disk).major = cfg.major as i32;
            (*disk).first_minor = cfg.first_minor as i32;
            (*disk).minors = cfg.minors as i32;
            (*disk).fops = &Self::FOPS;
            (*disk).events = bindings::DISK_EVENT_MEDIA_CHANGE as u16;
            (*disk).event_flags = bindings::DISK_EVENT_FLAG_UEVENT as u16;
            let dst = &mut (*disk).disk_name;
            let src = name.to_bytes_with_nul();
            let n = src.len().min(dst.len());
            for (d, s) in dst.iter_mut().zip(&src[..n]) {
                *d = *s;
            }
            dst[dst.len() - 1] = 0;
            if cfg.suppress_part_scan {
                bindings::set_bit(
                    bindings::GD_SUPPRESS_PART_SCAN as usize,
                    &raw mut (*disk).state,
                );
            }
        }
        free_set.dismiss();
        // SAFETY: `from_err_ptr` succeeded, so the pointer is not null.
        let disk = unsafe { NonNull::new_unchecked(disk) };
        // INVARIANT: the tag set is allocated and the disk was allocated on it.
        Ok(Self {
            tag_set,
            disk,
            state: AtomicU8::new(DISK_ALLOCATED),
            _t: PhantomData,
        })
    }

    /// Changes the number of hardware queues (`blk_mq_update_nr_hw_queues`; freezes the
    /// queue). Returns the number in effect afterwards: blk-mq keeps the old one when it cannot
    /// allocate the new contexts.
    pub(crate) fn set_nr_hw_queues(&self, count: u32) -> u32 {
        let set = self.tag_set.get();
        // SAFETY: The tag set is allocated (type invariant) and has this one queue.
        unsafe {
            bindings::blk_mq_update_nr_hw_queues(set, count as i32);
            (*set).nr_hw_queues
        }
    }

    /// Gives the disk its per-disk state and makes it visible (`add_disk`).
    pub(crate) fn add(&self, data: Arc<T::Data>) -> Result {
        if self
            .state
            .compare_exchange(
                DISK_ALLOCATED,
                DISK_ADDING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(EINVAL);
        }
        // The disk owns this reference; `free_disk` gives it back.
        let raw = Arc::into_raw(data).cast_mut().cast::<core::ffi::c_void>();
        // SAFETY: The disk is allocated and not yet visible, so nobody reads these fields yet.
        unsafe {
            (*(*self.as_raw()).queue).queuedata = raw.cast();
            (*self.as_raw()).private_data = raw.cast();
        }
        // SAFETY: The disk is allocated and not yet added.
        let rc = unsafe {
            bindings::device_add_disk(core::ptr::null_mut(), self.as_raw(), core::ptr::null_mut())
        };
        if rc != 0 {
            // SAFETY: `add_disk` failed, so the block layer never saw `raw`; take it back.
            unsafe {
                (*self.as_raw()).private_data = core::ptr::null_mut();
                drop(Arc::<T::Data>::from_raw(raw.cast()));
            }
            self.state.store(DISK_ALLOCATED, Ordering::Release);
            return to_result(rc);
        }
        self.state.store(DISK_ADDED, Ordering::Release);
        Ok(())
    }

    /// Deletes the disk (`del_gendisk`), frees the tag set and drops the allocation reference;
    /// the block layer then releases the per-disk state in `free_disk` once the last opener is
    /// gone. Does nothing the second time.
    pub(crate) fn remove(&self) {
        if self
            .state
            .compare_exchange(
                DISK_ADDED,
                DISK_REMOVED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return;
        }
        // `del_gendisk` drains all I/O, after which the tag set can be freed; `put_disk` drops
        // the allocation reference.
        // SAFETY: The disk was added and is removed exactly once (guarded by `state`).
        unsafe {
            bindings::del_gendisk(self.as_raw());
            bindings::blk_mq_free_tag_set(self.tag_set.get());
            bindings::put_disk(self.as_raw());
        }
    }

    /// The raw gendisk.
    pub(crate) fn as_raw(&self) -> *mut bindings::gendisk {
        self.disk.as_ptr()
    }

    /// The disk's request queue.
    pub(crate) fn queue(&self) -> &Queue {
        // SAFETY: The queue lives as long as the gendisk.
        unsafe { Queue::from_raw((*self.as_raw()).queue) }
    }

    /// The `struct device` of the whole disk (`disk_to_dev`).
    pub(crate) fn device(&self) -> *mut bindings::device {
        // SAFETY: `part0` is set for an allocated disk.
        unsafe { &raw mut (*(*self.as_raw()).part0).bd_device }
    }

    /// The kobject of the disk's device (for uevents and sysfs).
    pub(crate) fn kobj(&self) -> *mut bindings::kobject {
        // SAFETY: See `device`.
        unsafe { &raw mut (*self.device()).kobj }
    }

    /// The whole-disk block device.
    pub(crate) fn bdev(&self) -> *mut bindings::block_device {
        // SAFETY: `part0` is set for an allocated disk.
        unsafe { (*self.as_raw()).part0 }
    }

    /// Number of openers (`disk_openers`).
    pub(crate) fn openers(&self) -> i32 {
        // SAFETY: `part0` is valid; `bd_openers` is an atomic.
        unsafe { bindings::atomic_read(&raw mut (*self.bdev()).bd_openers) }
    }

    /// Sends a `KOBJ_CHANGE` uevent for the disk.
    pub(crate) fn uevent_change(&self) {
        // SAFETY: The disk's kobject is valid.
        unsafe { bindings::kobject_uevent(self.kobj(), bindings::kobject_action_KOBJ_CHANGE) };
    }

    /// Suppresses (or allows again) uevents of the disk (`dev_set_uevent_suppress`).
    pub(crate) fn suppress_uevents(&self, on: bool) {
        // SAFETY: The disk's kobject is valid; the flag is a plain bitfield written by its owner.
        unsafe { (*self.kobj()).set_uevent_suppress(u32::from(on)) };
    }

    /// Sets the capacity in sectors and announces it; sends a change uevent when the size did
    /// not change (as `loop_set_size`).
    pub(crate) fn set_capacity(&self, sectors: u64) {
        // SAFETY: The disk is valid.
        if !unsafe { bindings::set_capacity_and_notify(self.as_raw(), sectors) } {
            self.uevent_change();
        }
    }

    /// Marks the disk read-only or writable.
    pub(crate) fn set_read_only(&self, ro: bool) {
        // SAFETY: The disk is valid.
        unsafe { bindings::set_disk_ro(self.as_raw(), ro) }
    }

    /// Tells the block layer that the medium changed (`disk_force_media_change`).
    pub(crate) fn force_media_change(&self) {
        // SAFETY: The disk is valid.
        unsafe { bindings::disk_force_media_change(self.as_raw()) }
    }

    /// Allows or suppresses in-kernel partition scanning.
    pub(crate) fn set_part_scan(&self, on: bool) {
        // SAFETY: The disk is valid; `state` is manipulated with atomic bit operations.
        unsafe {
            let state = &raw mut (*self.as_raw()).state;
            if on {
                bindings::clear_bit(bindings::GD_SUPPRESS_PART_SCAN as usize, state)
            } else {
                bindings::set_bit(bindings::GD_SUPPRESS_PART_SCAN as usize, state)
            }
        }
    }

    /// Whether a partition scan is pending (`GD_NEED_PART_SCAN`: `BLKRRPART` sets it before it
    /// opens the disk, and the open rescans).
    pub(crate) fn part_scan_pending(&self) -> bool {
        // SAFETY: The disk is valid; the helper tests one bit.
        unsafe { rust_loop_disk_part_scan_pending(self.as_raw().cast()) }
    }

    /// Drops a pending partition scan (from an `open` callback: the open then does not rescan).
    pub(crate) fn cancel_part_scan(&self) {
        // SAFETY: The disk is valid; the helper clears one bit atomically.
        unsafe { rust_loop_disk_cancel_part_scan(self.as_raw().cast()) }
    }

    /// Whether the whole-disk device's page cache holds data not yet written to the device.
    pub(crate) fn page_cache_dirty(&self) -> bool {
        // SAFETY: The disk is valid and added, so `part0` and its mapping exist.
        unsafe { rust_loop_disk_page_cache_dirty(self.as_raw().cast()) }
    }

    /// A digest of the disk's partitions (number, start and size of each): the same table
    /// gives the same digest; a partition added, removed or resized (`BLKPG`) changes it.
    pub(crate) fn partitions_digest(&self) -> u64 {
        // SAFETY: The disk is valid; the helper reads its partition table under RCU.
        unsafe { rust_loop_disk_parts_digest(self.as_raw().cast()) }
    }

    /// Rescans partitions (`bdev_disk_changed`), taking `open_mutex` unless
    /// `open_mutex_held`. Returns the [`Self::partitions_digest`] the scan left.
    pub(crate) fn rescan_partitions(&self, open_mutex_held: bool) -> Result<u64> {
        // SAFETY: The disk is valid; `open_mutex` is taken unless the caller (a `release`
        // callback) already holds it.
        unsafe {
            let m = &raw mut (*self.as_raw()).open_mutex;
            if !open_mutex_held {
                bindings::mutex_lock(m);
            }
            let rc = bindings::bdev_disk_changed(self.as_raw(), false);
            // Read before `open_mutex` is dropped, so no other scan or `BLKPG` is in between.
            let digest = self.partitions_digest();
            if !open_mutex_held {
                bindings::mutex_unlock(m);
            }
            to_result(rc).map(|()| digest)
        }
    }

    /// Drops the page cache of the disk and its size (`invalidate_disk`).
    pub(crate) fn invalidate(&self) {
        // SAFETY: The disk is valid.
        unsafe { bindings::invalidate_disk(self.as_raw()) }
    }

    /// Writes back and invalidates the whole-disk block device's page cache.
    pub(crate) fn sync_and_invalidate_bdev(&self) {
        // SAFETY: `part0` is valid.
        unsafe {
            bindings::sync_blockdev(self.bdev());
            bindings::invalidate_bdev(self.bdev());
        }
    }

    /// The device number of the whole disk.
    pub(crate) fn devt(&self) -> u32 {
        // SAFETY: `part0` is valid.
        unsafe { (*self.bdev()).bd_dev }
    }

    // -- callbacks --

    /// # Safety
    ///
    /// `q` must be a queue of a disk created by `Disk::<T>::new`.
    unsafe fn data_of_queue<'a>(q: *mut bindings::request_queue) -> &'a T::Data {
        // SAFETY: `queuedata` was set to an `Arc<T::Data>` pointer that the disk keeps alive.
        unsafe { &*(*q).queuedata.cast::<T::Data>() }
    }

    /// # Safety
    ///
    /// `disk` must be a disk created by `Disk::<T>::new`.
    unsafe fn data_of_disk<'a>(disk: *mut bindings::gendisk) -> &'a T::Data {
        // SAFETY: `private_data` holds the disk's `Arc<T::Data>` until `free_disk`.
        unsafe { &*(*disk).private_data.cast::<T::Data>() }
    }

    /// `blk_mq_ops::queue_rq`.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`]: `bd` is valid for the call, and
    /// `(*bd).rq` is a request of the queue of a disk created by `Disk::<T>::new` (whose
    /// `queuedata` [`Disk::add`] set), handed to the driver, which owns it until it ends it.
    unsafe extern "C" fn queue_rq_callback(
        _hctx: *mut bindings::blk_mq_hw_ctx,
        bd: *const bindings::blk_mq_queue_data,
    ) -> bindings::blk_status_t {
        // SAFETY: blk-mq hands us a valid request that we own until we end it.
        let rq = unsafe { Request::from_raw((*bd).rq) };
        // SAFETY: The request belongs to one of our queues.
        let data = unsafe { Self::data_of_queue((*rq.as_raw()).q) };
        T::queue_rq(data, rq).0
    }

    /// `blk_mq_ops::complete`.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`]: `rq` is a request of the queue of a disk
    /// created by `Disk::<T>::new`, completed with [`Request::complete`] and still owned by the
    /// driver until it ends it.
    unsafe extern "C" fn complete_callback(rq: *mut bindings::request) {
        // SAFETY: blk-mq passes a request of ours that is being completed.
        let rq = unsafe { Request::from_raw(rq) };
        // SAFETY: The request belongs to one of our queues.
        let data = unsafe { Self::data_of_queue((*rq.as_raw()).q) };
        T::complete(data, rq)
    }

    /// `blk_mq_ops::init_request`.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`]: `rq` is a newly allocated request of a
    /// tag set of `Disk::<T>::new`, not in use, followed by its PDU: `cmd_size`
    /// (`size_of::<T::Pdu>()`) bytes of uninitialised memory.
    unsafe extern "C" fn init_request_callback(
        _set: *mut bindings::blk_mq_tag_set,
        rq: *mut bindings::request,
        _hctx_idx: core::ffi::c_uint,
        _numa_node: core::ffi::c_int,
    ) -> core::ffi::c_int {
        // SAFETY: `rq` is a new request; its PDU is `cmd_size` bytes of uninitialised memory.
        unsafe { T::init_pdu(bindings::blk_mq_rq_to_pdu(rq).cast()) };
        0
    }

    /// `block_device_operations::open`.
    ///
    /// # Safety
    ///
    /// Only the block layer calls this, through [`Self::FOPS`]: `disk` is a disk created by
    /// `Disk::<T>::new` and added by [`Disk::add`], so its `private_data` is set.
    unsafe extern "C" fn open_callback(
        disk: *mut bindings::gendisk,
        mode: bindings::blk_mode_t,
    ) -> core::ffi::c_int {
        // SAFETY: The block layer passes one of our disks.
        let data = unsafe { Self::data_of_disk(disk) };
        match T::open(data, mode) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// `block_device_operations::release`, called with the disk's `open_mutex` held.
    ///
    /// # Safety
    ///
    /// Only the block layer calls this, through [`Self::FOPS`]: `disk` is a disk created by
    /// `Disk::<T>::new` and added by [`Disk::add`], so its `private_data` is set.
    unsafe extern "C" fn release_callback(disk: *mut bindings::gendisk) {
        // SAFETY: The block layer passes one of our disks.
        let data = unsafe { Self::data_of_disk(disk) };
        T::release(data)
    }

    /// `block_device_operations::ioctl`.
    ///
    /// # Safety
    ///
    /// Only the block layer calls this, through [`Self::FOPS`]: `bdev` is an open block device
    /// whose `bd_disk` was created by `Disk::<T>::new` and added by [`Disk::add`].
    unsafe extern "C" fn ioctl_callback(
        bdev: *mut bindings::block_device,
        mode: bindings::blk_mode_t,
        cmd: core::ffi::c_uint,
        arg: usize,
    ) -> core::ffi::c_int {
        // SAFETY: The block layer passes a block device of one of our disks.
        let data = unsafe { Self::data_of_disk((*bdev).bd_disk) };
        match T::ioctl(data, bdev, mode, cmd, arg) {
            Ok(v) => v,
            Err(e) => e.to_errno(),
        }
    }

    /// `block_device_operations::compat_ioctl`.
    ///
    /// # Safety
    ///
    /// Only the block layer calls this, through [`Self::FOPS`]: `bdev` is an open block device
    /// whose `bd_disk` was created by `Disk::<T>::new` and added by [`Disk::add`].
    unsafe extern "C" fn compat_ioctl_callback(
        bdev: *mut bindings::block_device,
        mode: bindings::blk_mode_t,
        cmd: core::ffi::c_uint,
        arg: usize,
    ) -> core::ffi::c_int {
        // SAFETY: The block layer passes a block device of one of our disks.
        let data = unsafe { Self::data_of_disk((*bdev).bd_disk) };
        match T::compat_ioctl(data, bdev, mode, cmd, arg) {
            Ok(v) => v,
            Err(e) => e.to_errno(),
        }
    }

    /// `block_device_operations::free_disk`.
    ///
    /// # Safety
    ///
    /// Only the block layer calls this, through [`Self::FOPS`], once, when the last reference
    /// to `disk` goes, and only for a disk that was added: `disk` was created by
    /// `Disk::<T>::new` and added by [`Disk::add`], and no other callback runs after it.
    unsafe extern "C" fn free_disk_callback(disk: *mut bindings::gendisk) {
        // SAFETY: `private_data` holds the reference given up by `Arc::into_raw` in `add`; this
        // is the last callback of the disk, so the reference is taken back exactly once.
        drop(unsafe { Arc::<T::Data>::from_raw((*disk).private_data.cast()) });
    }
}

impl<T: DiskOps> Drop for Disk<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() == DISK_ALLOCATED {
            // SAFETY: The disk was allocated but never added, so nobody else references it:
            // free the disk, then the tag set it was allocated on.
            unsafe {
                bindings::put_disk(self.as_raw());
                bindings::blk_mq_free_tag_set(self.tag_set.get());
            }
        }
        // An added disk was removed by `remove` before its state could be dropped (the state
        // is only dropped after `free_disk`).
    }
}
