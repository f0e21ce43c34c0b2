// SPDX-License-Identifier: GPL-2.0

//! A blk-mq tag set and gendisk with full block-device operations (open, release, ioctl,
//! compat_ioctl, free_disk, owner), the per-command PDU and the per-disk data.
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

use super::{request::RequestPdu, BlkStatus, BlockDevice, OwnedRequest, Queue, Request};

/// `blk_mode_t` bits (`include/linux/blkdev.h`).
pub(crate) const BLK_OPEN_WRITE: u32 = super::layout::c::BLK_OPEN_WRITE as u32;
/// `BLK_OPEN_EXCL`: the opener holds the device exclusively.
pub(crate) const BLK_OPEN_EXCL: u32 = super::layout::c::BLK_OPEN_EXCL as u32;

/// The callbacks of a blk-mq disk with full block-device operations.
///
/// `Data` is the per-disk state: it is set as both the queue's `queuedata` and the gendisk's
/// `private_data`; the disk keeps one reference, dropped in `free_disk`.
pub(crate) trait DiskOps: Sized + 'static {
    /// The module the disk's code belongs to (the `owner` of its block-device operations: an
    /// open of the disk holds the module).
    type Module: kernel::ModuleMetadata;
    /// Per-disk state.
    type Data: Send + Sync;
    /// Per-command data, kept with each `struct request` ([`OwnedRequest::pdu_mut`]).
    type Pdu: Send;

    /// The per-command data of a newly allocated request (once per tag; the tag set drops it
    /// when it frees the request).
    fn new_pdu() -> Self::Pdu;
    /// Starts a request: the driver owns it until it ends it (a failed one too, with
    /// [`OwnedRequest::end`]).
    fn queue_rq(data: &Self::Data, rq: OwnedRequest<Self>);
    /// Completes a request after [`OwnedRequest::complete`]: the driver owns it again.
    fn complete(data: &Self::Data, rq: OwnedRequest<Self>);
    /// A new opener.
    fn open(data: &Self::Data, mode: u32) -> Result;
    /// An opener went away (called with the disk's `open_mutex` held).
    fn release(data: &Self::Data);
    /// A block device ioctl.
    fn ioctl(data: &Self::Data, bdev: &BlockDevice, mode: u32, cmd: u32, arg: usize)
        -> Result<i32>;
    /// A 32-bit block device ioctl.
    fn compat_ioctl(
        data: &Self::Data,
        bdev: &BlockDevice,
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
/// `__blk_mq_alloc_disk`, until `state` is `DISK_REMOVED`; both are freed exactly once (by
/// the [`DiskRelease`] that [`Disk::remove`] returns, or on drop if the disk was never added).
pub(crate) struct Disk<T: DiskOps> {
    /// Shared with the [`DiskRelease`] of the removed disk, which frees the tag set.
    tag_set: Arc<Opaque<bindings::blk_mq_tag_set>>,
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
        exit_request: Some(Self::exit_request_callback),
        // SAFETY: All-zero is a valid `blk_mq_ops` (every callback absent).
        ..unsafe { core::mem::zeroed() }
    };
    const FOPS: bindings::block_device_operations = bindings::block_device_operations {
        open: Some(Self::open_callback),
        release: Some(Self::release_callback),
        ioctl: Some(Self::ioctl_callback),
        compat_ioctl: Some(Self::compat_ioctl_callback),
        free_disk: Some(Self::free_disk_callback),
        owner: super::compat::this_module::<T::Module>(),
        // SAFETY: All-zero is a valid `block_device_operations` (every callback absent).
        ..unsafe { core::mem::zeroed() }
    };

    /// Allocates the tag set and the gendisk named `name`; the disk is not yet visible.
    pub(crate) fn new(cfg: &DiskConfig, name: &CStr) -> Result<Self> {
        let tag_set = Arc::new(Opaque::<bindings::blk_mq_tag_set>::zeroed(), GFP_KERNEL)?;
        let set = tag_set.get();
        // SAFETY: `set` points to a zeroed tag set that outlives the disk (we own both). The
        // ops tables are `'static` promoted constants.
        unsafe {
            (*set).ops = &Self::MQ_OPS;
            (*set).nr_hw_queues = cfg.nr_hw_queues;
            (*set).queue_depth = cfg.queue_depth;
            (*set).numa_node = bindings::NUMA_NO_NODE;
            (*set).cmd_size = size_of::<RequestPdu<T>>() as u32;
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
    /// allocate the new contexts. The caller keeps [`Disk::remove`] out meanwhile; once the disk
    /// is removed nothing changes.
    pub(crate) fn set_nr_hw_queues(&self, count: u32) -> u32 {
        let set = self.tag_set.get();
        if self.state.load(Ordering::Acquire) == DISK_REMOVED {
            // SAFETY: The tag set's memory lives as long as `self`; its count is not written
            // after removal.
            return unsafe { (*set).nr_hw_queues };
        }
        // SAFETY: The tag set is allocated (type invariant: not removed, checked above and
        // kept so by the caller) and has this one queue.
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

    /// Deletes the disk (`del_gendisk`): it leaves sysfs, its I/O is drained and its number may
    /// be registered again at once. The rest of the teardown is returned for the caller to run
    /// now or on another thread (see [`DiskRelease`]). `None` the second time.
    pub(crate) fn remove(&self) -> Option<DiskRelease> {
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
            return None;
        }
        // SAFETY: The disk was added and is deleted exactly once (guarded by `state`).
        unsafe { bindings::del_gendisk(self.as_raw()) };
        // INVARIANT: the disk is deleted, so its queue has left the tag set; the tag set and
        // the allocation reference pass to the release (`state` keeps `Drop` off them).
        Some(DiskRelease {
            tag_set: self.tag_set.clone(),
            disk: self.disk,
        })
    }

    /// The raw gendisk.
    pub(crate) fn as_raw(&self) -> *mut bindings::gendisk {
        self.disk.as_ptr()
    }

    /// Whether `rq` is a request of this disk's queue.
    pub(crate) fn owns(&self, rq: &Request<T>) -> bool {
        // SAFETY: The gendisk is valid (type invariant) and so is the request (its type
        // invariant); both `queue` fields are set for their lifetime.
        unsafe { (*rq.as_raw()).q == (*self.as_raw()).queue }
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

    /// The data of the disk that `rq` belongs to (its queue's `queuedata`).
    ///
    /// # Safety
    ///
    /// The returned reference must not be used once the request has ended and the disk may
    /// be gone (a request in flight holds the queue, which holds the data).
    pub(super) unsafe fn data_of_request<'a>(rq: &Request<T>) -> &'a T::Data {
        // SAFETY: A `Request<T>` belongs to the queue of a `Disk<T>` (type invariant), whose
        // `queuedata` is an `Arc<T::Data>` pointer that the disk keeps alive.
        unsafe { &*(*(*rq.as_raw()).q).queuedata.cast::<T::Data>() }
    }

    /// The data of the disk whose device is `dev` (`dev_to_disk(dev)->private_data`).
    ///
    /// # Safety
    ///
    /// `dev` must be the device of a live disk created by `Disk::<T>::new` and added.
    pub(super) unsafe fn data_of_device<'a>(dev: *mut bindings::device) -> &'a T::Data {
        let off = core::mem::offset_of!(bindings::block_device, bd_device);
        // SAFETY: A disk's device is embedded in its whole-disk `block_device`, whose `bd_disk`
        // is the disk.
        unsafe {
            let bdev = dev.cast::<u8>().sub(off).cast::<bindings::block_device>();
            Self::data_of_disk((*bdev).bd_disk)
        }
    }

    /// The data of the disk behind `file` when `file` is an open node of block major `major`;
    /// `None` for any other file.
    ///
    /// # Safety
    ///
    /// Every disk of block major `major` must be a disk created by `Disk::<T>::new` (the
    /// caller's driver owns the major for as long as the call runs).
    pub(crate) unsafe fn data_of_node(
        file: &super::BackingFile,
        major: u32,
    ) -> Option<Arc<T::Data>> {
        let bdev = file.bdev()?;
        if file.rdev() >> bindings::MINORBITS != major {
            return None;
        }
        // SAFETY: The disk is a `Disk<T>` (the caller's contract); an open device node keeps its
        // disk, and so the disk's `Arc<T::Data>` in `private_data`, alive.
        let data = unsafe { (*(*bdev).bd_disk).private_data.cast::<T::Data>() };
        // SAFETY: As above: `data` comes from `Arc::into_raw` in `add` and is still owned by the
        // disk.
        Some(unsafe { kernel::sync::ArcBorrow::from_raw(data) }.into())
    }

    /// Shows the attribute group `group` in the disk's sysfs directory.
    pub(crate) fn add_group(&self, group: &'static super::AttrGroup<T>) -> Result {
        // SAFETY: The kobject is the disk's, alive with `self`; the group is static, and its
        // callbacks are for disks of `T` (type invariant of `AttrGroup<T>`).
        to_result(unsafe { bindings::sysfs_create_group(self.kobj(), group.as_raw()) })
    }

    /// Removes a group shown by [`Disk::add_group`] (waits for its running callbacks).
    pub(crate) fn remove_group(&self, group: &'static super::AttrGroup<T>) {
        // SAFETY: As in `add_group`; a group that is not there only draws a warning.
        unsafe { bindings::sysfs_remove_group(self.kobj(), group.as_raw()) }
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
        // SAFETY: blk-mq hands us a valid request of our queue that we own until we end it.
        let rq = unsafe { OwnedRequest::<T>::from_raw(NonNull::new_unchecked((*bd).rq)) };
        // SAFETY: The request belongs to one of our queues and is in flight during the call.
        let data = unsafe { Self::data_of_request(&rq) };
        T::queue_rq(data, rq);
        // The driver owns the request now; a failure ends it with its status.
        BlkStatus::OK.as_raw()
    }

    /// `blk_mq_ops::complete`.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`]: `rq` is a request of the queue of a disk
    /// created by `Disk::<T>::new`, completed with [`OwnedRequest::complete`] and still owned by the
    /// driver until it ends it.
    unsafe extern "C" fn complete_callback(rq: *mut bindings::request) {
        // SAFETY: blk-mq passes a request of ours that is being completed, ours until we end it.
        let rq = unsafe { OwnedRequest::<T>::from_raw(NonNull::new_unchecked(rq)) };
        // SAFETY: The request belongs to one of our queues and is in flight during the call.
        let data = unsafe { Self::data_of_request(&rq) };
        T::complete(data, rq)
    }

    /// `blk_mq_ops::init_request`.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`]: `rq` is a newly allocated request of a
    /// tag set of `Disk::<T>::new`, not in use, followed by its PDU: `cmd_size`
    /// (`size_of::<RequestPdu<T>>()`) bytes of uninitialised memory.
    unsafe extern "C" fn init_request_callback(
        _set: *mut bindings::blk_mq_tag_set,
        rq: *mut bindings::request,
        _hctx_idx: core::ffi::c_uint,
        _numa_node: core::ffi::c_int,
    ) -> core::ffi::c_int {
        // SAFETY: `rq` is a new request of our tag set; its PDU is uninitialised.
        unsafe { RequestPdu::<T>::init(rq) };
        0
    }

    /// `blk_mq_ops::exit_request`: drops the PDU that `init_request` made.
    ///
    /// # Safety
    ///
    /// Only blk-mq calls this, through [`Self::MQ_OPS`], once per request that
    /// `init_request_callback` initialised, when the tag set frees it: no one uses the request.
    unsafe extern "C" fn exit_request_callback(
        _set: *mut bindings::blk_mq_tag_set,
        rq: *mut bindings::request,
        _hctx_idx: core::ffi::c_uint,
    ) {
        // SAFETY: The PDU was initialised by `init_request_callback` and is unused from now on.
        unsafe { RequestPdu::<T>::drop_in_place(rq) };
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
        // SAFETY: Forwarded from the caller.
        unsafe { Self::ioctl_with(bdev, |data, bdev| T::ioctl(data, bdev, mode, cmd, arg)) }
    }

    /// `block_device_operations::compat_ioctl`.
    ///
    /// # Safety
    ///
    /// As for [`Self::ioctl_callback`].
    unsafe extern "C" fn compat_ioctl_callback(
        bdev: *mut bindings::block_device,
        mode: bindings::blk_mode_t,
        cmd: core::ffi::c_uint,
        arg: usize,
    ) -> core::ffi::c_int {
        // SAFETY: Forwarded from the caller.
        unsafe {
            Self::ioctl_with(bdev, |data, bdev| {
                T::compat_ioctl(data, bdev, mode, cmd, arg)
            })
        }
    }

    /// Runs an ioctl handler on the disk's data and the block device; returns its result or
    /// the negative errno.
    ///
    /// # Safety
    ///
    /// As for [`Self::ioctl_callback`].
    unsafe fn ioctl_with(
        bdev: *mut bindings::block_device,
        f: impl FnOnce(&T::Data, &BlockDevice) -> Result<i32>,
    ) -> core::ffi::c_int {
        // SAFETY: The block layer passes an open block device of one of our disks.
        let (data, bdev) = unsafe {
            (
                Self::data_of_disk((*bdev).bd_disk),
                BlockDevice::from_raw(bdev),
            )
        };
        match f(data, bdev) {
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

/// The end of a removed disk's teardown, run on drop: frees the tag set
/// (`blk_mq_free_tag_set`) and drops the allocation reference (`put_disk`), after which the
/// block layer releases the per-disk state in `free_disk` once the last opener is gone.
///
/// Both mostly wait (the tag set in `srcu_barrier`, the disk in its release before
/// `free_disk`), longer than the rest of a removal, and nothing that removes a device needs to wait for them (`loop.c` itself
/// frees the device number before `put_disk`). Dropping this on a workqueue of the module's
/// own takes them off the caller's path.
///
/// # Invariants
///
/// `disk` was deleted (`del_gendisk`) and its allocation reference is owned here; `tag_set`
/// is the initialised tag set it was allocated on, which no queue uses any more.
pub(crate) struct DiskRelease {
    tag_set: Arc<Opaque<bindings::blk_mq_tag_set>>,
    disk: NonNull<bindings::gendisk>,
}

// SAFETY: `blk_mq_free_tag_set` and `put_disk` may run on any thread (process context).
unsafe impl Send for DiskRelease {}

impl Drop for DiskRelease {
    fn drop(&mut self) {
        // SAFETY: The disk is deleted and its queue left the tag set, which is freed exactly
        // once, here; then the allocation reference owned here is dropped (type invariant).
        unsafe {
            bindings::blk_mq_free_tag_set(self.tag_set.get());
            bindings::put_disk(self.disk.as_ptr());
        }
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

extern "C" {
    // rust_loop/helpers.c. `struct gendisk *` as `void *`: it contains zero-sized members, not
    // FFI-safe to Rust.
    fn rust_loop_disk_part_scan_pending(disk: *mut core::ffi::c_void) -> bool;
    fn rust_loop_disk_cancel_part_scan(disk: *mut core::ffi::c_void);
    fn rust_loop_disk_page_cache_dirty(disk: *mut core::ffi::c_void) -> bool;
    fn rust_loop_disk_parts_digest(disk: *mut core::ffi::c_void) -> u64;
}
