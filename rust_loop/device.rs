// SPDX-License-Identifier: GPL-2.0

//! [`LoopDevice`]: one `loopN`, its state machine (Unbound → Bound → Rundown → Unbound, or
//! Deleting) and its reconfiguration: configure, clear, change the backing file, status, capacity,
//! direct I/O and block size. Behaviour and errno values follow `drivers/block/loop.c`.

use crate::{
    cgroup_workers::CgroupWorkers,
    cmd::{LoopCmd, LoopRq},
    dispatch::{LoadTracker, QueueLoad, WriteSteering},
    stats::DevStats,
    sys::{
        valid_block_size, BackingFile, BlkStatus, BlockDevice, DioAlign, Disk, DiskConfig, DiskOps,
        DiskRelease, KthreadWorker, ModuleRef, Queue, Request, BLK_FEAT_WRITE_CACHE,
        BLK_OPEN_WRITE, SECTOR_SHIFT, SECTOR_SIZE,
    },
    sysfs,
    uapi::{self, loop_config, loop_info64},
};
use core::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering},
};
use kernel::{
    bindings,
    prelude::*,
    str::CString,
    sync::{Arc, Mutex, SpinLock},
    types::ScopeGuard,
};

/// `LO_NAME_SIZE`.
pub(crate) const NAME_SIZE: usize = uapi::LO_NAME_SIZE as usize;
/// `LO_FLAGS_READ_ONLY`.
pub(crate) const FLAG_READ_ONLY: u32 = uapi::LO_FLAGS_READ_ONLY;
/// `LO_FLAGS_AUTOCLEAR`.
pub(crate) const FLAG_AUTOCLEAR: u32 = uapi::LO_FLAGS_AUTOCLEAR;
/// `LO_FLAGS_PARTSCAN`.
pub(crate) const FLAG_PARTSCAN: u32 = uapi::LO_FLAGS_PARTSCAN;
/// `LO_FLAGS_DIRECT_IO`.
pub(crate) const FLAG_DIRECT_IO: u32 = uapi::LO_FLAGS_DIRECT_IO;
/// `LOOP_SET_STATUS_SETTABLE_FLAGS` (a macro over enum values, which bindgen cannot evaluate).
const SET_STATUS_SETTABLE: u32 = FLAG_AUTOCLEAR | FLAG_PARTSCAN;
/// `LOOP_SET_STATUS_CLEARABLE_FLAGS`.
const SET_STATUS_CLEARABLE: u32 = FLAG_AUTOCLEAR;
/// `LOOP_CONFIGURE_SETTABLE_FLAGS`.
const CONFIGURE_SETTABLE: u32 = FLAG_READ_ONLY | FLAG_AUTOCLEAR | FLAG_PARTSCAN | FLAG_DIRECT_IO;

/// `max_hw_sectors` of a loop queue: 4 MiB, so that large (merged, in direct-I/O mode) requests
/// reach the backing file whole (loop.c keeps the historic 2560-sector cap).
const MAX_HW_SECTORS: u32 = 8192;
/// `max_segments`: enough for a 4 MiB request of scattered pages.
const MAX_SEGMENTS: u16 = 1024;

/// Where a loop device is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum State {
    /// No backing file.
    Unbound = 0,
    /// Backed by a file; I/O flows.
    Bound = 1,
    /// Being cleared at its last close.
    Rundown = 2,
    /// Being removed through `LOOP_CTL_REMOVE`.
    Deleting = 3,
    /// Unbound, its hardware queues being changed (`rust_loop/nr_hw_queues`): not bindable or
    /// removable (`EBUSY`) until that is done.
    Resizing = 4,
}

impl State {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => State::Bound,
            2 => State::Rundown,
            3 => State::Deleting,
            4 => State::Resizing,
            _ => State::Unbound,
        }
    }
}

/// What the data path needs of a bound device. Replaced only while no request reads it
/// ([`DataPathIdle`]).
pub(crate) struct IoState {
    /// The backing file.
    pub(crate) file: BackingFile,
    /// Byte offset of the device's data in the file.
    pub(crate) offset: u64,
    /// Writes fail with an I/O error.
    pub(crate) read_only: bool,
    /// Reads and writes are direct I/O on the backing file.
    pub(crate) direct_io: bool,
    /// The backing file accepts `IOCB_NOWAIT` attempts.
    pub(crate) nowait: bool,
    /// The backing file's page cache honours `IOCB_DONTCACHE`.
    pub(crate) dontcache: bool,
    /// The backing file's direct-I/O offset and size alignment, less one: a read or write
    /// whose position in the file or length is not a multiple of it takes the buffered path.
    pub(crate) dio_mask: u64,
    /// The backing file is a regular file (not a block device).
    pub(crate) file_is_reg: bool,
    /// The backing file's data lives on another loop device.
    pub(crate) backing_on_loop: bool,
}

impl IoState {
    /// Whether `rq` (a read or write) meets the backing file's direct-I/O alignment: its
    /// position in the file and its length. Always so unless the device's block size or
    /// offset is below that alignment (see [`LoopDevice::can_use_dio`]). The memory of its
    /// segments meets the file's alignment through the queue's `dma_alignment`.
    pub(crate) fn dio_aligned(&self, rq: &Request<LoopDisk>) -> bool {
        (rq.pos().wrapping_add(self.offset) | u64::from(rq.bytes())) & self.dio_mask == 0
    }
}

/// A witness that no request reads the data path's cells ([`IoCell`], [`HwQueues`]) while it
/// lives: the queue is frozen, or the device is not bound and no request that found it bound is
/// still in flight (`queue_rq` reads the cells only after it has found [`State::Bound`], which
/// [`LoopDevice::set_state`] publishes with release ordering after the cells are written).
/// Binding and the unbinding at the last close need no freeze, as in loop.c: freezing costs an
/// RCU grace period, most of what binding and clearing a device took.
struct DataPathIdle<'a>(core::marker::PhantomData<&'a ()>);

impl<'a> DataPathIdle<'a> {
    /// The queue is frozen: no request is in flight.
    fn frozen(_frozen: &'a crate::sys::QueueFreeze<'_>) -> Self {
        Self(core::marker::PhantomData)
    }

    /// The device is not bound, with its mutex held (`_cfg`), and not bound since the last
    /// time no request was in flight.
    ///
    /// # Safety
    ///
    /// The device's state must not be [`State::Bound`], and every request that `queue_rq`
    /// found bound must have ended.
    unsafe fn unbound(_cfg: &'a Config) -> Self {
        Self(core::marker::PhantomData)
    }
}

/// The data path's view of the device.
///
/// # Invariants
///
/// The value is written only while no request reads it ([`DataPathIdle`]), and read only by
/// requests in flight, so reads and writes never overlap.
struct IoCell(UnsafeCell<Option<IoState>>);

impl IoCell {
    fn replace(&self, _idle: &DataPathIdle<'_>, new: Option<IoState>) -> Option<IoState> {
        // SAFETY: No request reads the cell (witnessed by `_idle`).
        unsafe { core::mem::replace(&mut *self.0.get(), new) }
    }

    /// # Safety
    ///
    /// The caller must be handling a request of the device that `queue_rq` found bound.
    unsafe fn get(&self) -> Option<&IoState> {
        // SAFETY: No writer while a request is in flight (type invariant).
        unsafe { (*self.0.get()).as_ref() }
    }
}

/// A hardware queue's worker thread and counter.
pub(crate) struct HwQueue {
    /// Runs the commands of this hardware queue that `queue_rq` does not complete itself.
    pub(crate) worker: KthreadWorker,
    /// Requests started on this hardware queue.
    pub(crate) requests: AtomicU64,
    /// The pattern of the requests in flight here, for the submission policy.
    load: LoadTracker,
}

impl HwQueue {
    /// Counts a request started on this hardware queue and tells how it should run
    /// ([`LoadTracker::request_started`]); `cmd::end` calls [`HwQueue::request_ended`].
    pub(crate) fn request_started(&self, max_depth: u32) -> QueueLoad {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.load.request_started(max_depth)
    }

    /// Counts the end of a request counted by [`HwQueue::request_started`].
    pub(crate) fn request_ended(&self) {
        self.load.request_ended();
    }
}

/// The device's hardware queues.
///
/// # Invariants
///
/// Empty while the device is unbound; one entry per hardware queue while it is bound (started by
/// `configure`, stopped by `unbind`: an idle device costs no thread, as with loop.c, whose
/// workqueue exists only while bound). Replaced only while no request reads them
/// ([`DataPathIdle`]) and the device mutex is held; read by requests in flight or under the
/// device mutex, so reads and writes never overlap.
struct HwQueues(UnsafeCell<KVec<HwQueue>>);

impl HwQueues {
    /// Starts `count` (at least one) workers; queue K's request counter starts at
    /// `requests[K]` (0 past its end). Takes the threads that unbinding parked
    /// ([`crate::worker_cache`]) where there are any. May sleep.
    fn start(count: u32, requests: &[u64]) -> Result<KVec<HwQueue>> {
        let count = count.max(1);
        let mut queues = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for q in 0..count as usize {
            let queue = HwQueue {
                worker: crate::worker_cache::take_or_start()?,
                requests: AtomicU64::new(requests.get(q).copied().unwrap_or(0)),
                load: LoadTracker::new(),
            };
            queues.push(queue, GFP_KERNEL)?;
        }
        Ok(queues)
    }

    /// Parks the workers of `queues` for the next binding ([`crate::worker_cache`]), which
    /// stops them if nobody takes them in time.
    fn park(queues: KVec<HwQueue>) {
        for HwQueue { worker, .. } in queues {
            crate::worker_cache::park(worker);
        }
    }

    fn replace(
        &self,
        _cfg: &Config,
        _idle: &DataPathIdle<'_>,
        new: KVec<HwQueue>,
    ) -> KVec<HwQueue> {
        // SAFETY: No request reads the cell and the device mutex is held (witnessed by the
        // arguments), so nobody reads it.
        unsafe { core::mem::replace(&mut *self.0.get(), new) }
    }

    /// The hardware queues, read under the device mutex (`_cfg` is its guarded data).
    fn all<'a>(&'a self, _cfg: &'a Config) -> &'a [HwQueue] {
        // SAFETY: The device mutex is held for `'a`, so no writer meanwhile (type invariant).
        unsafe { &*self.0.get() }
    }

    /// The queue of a request in flight (`hw_queue` wraps around the queues there are).
    ///
    /// # Safety
    ///
    /// The caller must be handling a request of the device that `queue_rq` found bound, or
    /// hold the device mutex.
    unsafe fn get(&self, hw_queue: u32) -> Option<&HwQueue> {
        // SAFETY: No writer meanwhile (the caller's contract and the type invariant).
        let queues: &[HwQueue] = unsafe { &*self.0.get() };
        match queues.len() {
            0 => None,
            n => queues.get(hw_queue as usize % n),
        }
    }
}

/// Configuration guarded by the device mutex (`lo_mutex`).
struct Config {
    file_name: [u8; NAME_SIZE],
    old_gfp: u32,
    dio: DioAlign,
    /// Requests started on each hardware queue in earlier bindings (the queues and their
    /// counters go with the workers at unbinding; the next binding starts from these).
    retired_requests: KVec<u64>,
    /// While bound: the reference that keeps the module loaded.
    module_ref: Option<ModuleRef>,
}

/// What a partition scan read: the backing file (an identity, never dereferenced), the
/// device's offset into it and size, and the file's change cookie read before the scan; and
/// what it left: the digest of the partitions it created ([`Disk::partitions_digest`]).
#[derive(Clone, Copy, PartialEq, Eq)]
struct PartTableStamp {
    file: usize,
    offset: u64,
    sectors: u64,
    cookie: u64,
    /// `None` until known (a scan run by someone else's open is not watched to its end).
    parts: Option<u64>,
}

/// One loop device.
#[pin_data]
pub(crate) struct LoopDevice {
    /// N of `loopN`.
    pub(crate) number: u32,
    /// The disk and its tag set.
    pub(crate) disk: Disk<LoopDisk>,
    /// The hardware queues, each with its worker.
    hw_queues: HwQueues,
    /// Workers for the commands of non-root blkcgs.
    #[pin]
    pub(crate) cgroup_workers: CgroupWorkers,
    /// Number of hardware queues (and workers).
    nr_hw_queues: AtomicU32,
    /// Requests in flight on a hardware queue from which on `queue_rq` hands a single
    /// submitter's direct I/O to the worker instead of submitting it itself.
    nowait_max_depth: AtomicU32,
    /// Counters.
    pub(crate) stats: DevStats,
    /// The submission policy's write steering ([`crate::dispatch`]).
    pub(crate) steering: WriteSteering,
    /// `lo_mutex`: serialises reconfiguration.
    #[pin]
    cfg: Mutex<Config>,
    /// The [`State`], readable without the mutex.
    state: AtomicU8,
    /// `lo_offset`, `lo_sizelimit`, `lo_flags`: written under `cfg`, read anywhere.
    offset: AtomicU64,
    sizelimit: AtomicU64,
    flags: AtomicU32,
    /// The backing file for readers outside the data path (sysfs, validation, status).
    #[pin]
    backing: SpinLock<Option<BackingFile>>,
    /// The data path's view.
    io: IoCell,
    /// Discard/write-zeroes still advertised (cleared when the file cannot fallocate).
    discard_on: AtomicBool,
    /// What the last partition scan saw (see [`PartTableStamp`]).
    #[pin]
    part_stamp: SpinLock<Option<PartTableStamp>>,
    /// `REQ_NOUNMAP` write-zeroes try `FALLOC_FL_WRITE_ZEROES` first (until the backing file
    /// refuses it with `EOPNOTSUPP`).
    write_zeroes_on: AtomicBool,
    /// `queue_rq` may submit direct I/O itself: the device is in direct-I/O mode, the backing
    /// file supports `IOCB_NOWAIT` and its file system is one `nowait_fs` names (what the data
    /// path's [`IoState`] says).
    pub(crate) nowait_on: AtomicBool,
    /// The `dontcache` cache mode is chosen (`rust_loop/cache_mode`, default from the
    /// `dontcache` module parameter): buffered backing I/O with `IOCB_DONTCACHE`.
    dontcache_on: AtomicBool,
    /// The bound backing file's page cache honours `IOCB_DONTCACHE`.
    dontcache_capable: AtomicBool,
    /// The bound backing file's direct-I/O alignment (`Config::dio`'s `min_size`), for
    /// [`IoState::dio_mask`]; written under `cfg`.
    dio_min_size: AtomicU32,
    /// Visible to `LOOP_CTL_GET_FREE`/`REMOVE` (`idr_visible`).
    pub(crate) visible: AtomicBool,
    /// Whether the `loop/` sysfs group exists.
    sysfs_on: AtomicBool,
    /// Whether the `rust_loop/` counters group exists.
    stats_on: AtomicBool,
}

// SAFETY: `IoCell` is only accessed under its invariant; every other field is thread-safe.
unsafe impl Sync for LoopDevice {}
// SAFETY: As above.
unsafe impl Send for LoopDevice {}

impl LoopDevice {
    /// Creates `loop<number>` (not yet visible; see [`LoopDevice::add_disk`]).
    pub(crate) fn new(
        number: u32,
        part_shift: u32,
        queue_depth: u32,
        nr_hw_queues: u32,
    ) -> Result<Arc<Self>> {
        let name = CString::try_from_fmt(fmt!("loop{}", number))?;
        let disk = Disk::new(
            &DiskConfig {
                major: bindings::LOOP_MAJOR,
                first_minor: number << part_shift,
                minors: 1 << part_shift,
                queue_depth,
                nr_hw_queues,
                // BLOCKING: `queue_rq` may submit to the backing file itself.
                flags: bindings::BLK_MQ_F_STACKING
                    | bindings::BLK_MQ_F_NO_SCHED_BY_DEFAULT
                    | bindings::BLK_MQ_F_BLOCKING,
                max_hw_sectors: MAX_HW_SECTORS,
                max_segments: MAX_SEGMENTS,
                suppress_part_scan: part_shift == 0,
            },
            &name,
        )?;
        let dev = Arc::pin_init(
            pin_init!(Self {
                number,
                disk,
                hw_queues: HwQueues(UnsafeCell::new(KVec::new())),
                cgroup_workers <- CgroupWorkers::new(*number),
                nr_hw_queues: AtomicU32::new(nr_hw_queues.max(1)),
                nowait_max_depth: AtomicU32::new(crate::nowait_max_depth()),
                stats: DevStats::default(),
                steering: WriteSteering::new(),
                cfg <- kernel::new_mutex!(Config {
                    file_name: [0; NAME_SIZE],
                    old_gfp: 0,
                    dio: DioAlign { min_size: SECTOR_SIZE, mem_mask: SECTOR_SIZE - 1 },
                    retired_requests: KVec::new(),
                    module_ref: None,
                }),
                state: AtomicU8::new(State::Unbound as u8),
                offset: AtomicU64::new(0),
                sizelimit: AtomicU64::new(0),
                flags: AtomicU32::new(0),
                backing <- kernel::new_spinlock!(None),
                io: IoCell(UnsafeCell::new(None)),
                discard_on: AtomicBool::new(true),
                write_zeroes_on: AtomicBool::new(true),
                part_stamp <- kernel::new_spinlock!(None),
                nowait_on: AtomicBool::new(false),
                dontcache_on: AtomicBool::new(crate::dontcache_default()),
                dontcache_capable: AtomicBool::new(false),
                dio_min_size: AtomicU32::new(SECTOR_SIZE),
                visible: AtomicBool::new(false),
                sysfs_on: AtomicBool::new(false),
                stats_on: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        // Buffered mode: no request merging (nomerges=2), as loop.c.
        dev.queue().set_flag(bindings::QUEUE_FLAG_NOMERGES, true);
        // No writeback throttling by default: wbt may sleep inside a NOWAIT submission and
        // deadlock against this queue (one of the failures of upstream's NOWAIT series). If a
        // user enables an rq-qos policy anyway, `queue_rq` leaves submission to the worker.
        dev.queue()
            .set_flag(bindings::QUEUE_FLAG_DISABLE_WBT_DEF, true);
        Ok(dev)
    }

    /// Makes the device visible as `/dev/loopN`, with its counters in sysfs.
    pub(crate) fn add_disk(self: &Arc<Self>) -> Result {
        self.disk.add(self.clone())?;
        // The counters are informational: a device without them still works.
        self.stats_on.store(
            self.disk.add_group(&sysfs::RUST_LOOP_GROUP).is_ok(),
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// Whether rq-qos policies are attached to the loop queue.
    pub(crate) fn has_rq_qos(&self) -> bool {
        self.queue().has_rq_qos()
    }

    fn queue(&self) -> &Queue {
        self.disk.queue()
    }

    /// The hardware queue `rq` was dispatched on (present while the device is bound).
    pub(crate) fn hw_queue_of(&self, rq: &Request<LoopDisk>) -> Option<&HwQueue> {
        // SAFETY: `rq` is in flight, so the hardware queues are not being replaced.
        unsafe { self.hw_queues.get(rq.hw_queue()) }
    }

    /// Calls `f` with the number of requests started on each hardware queue.
    pub(crate) fn hw_queue_requests<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = u64>) -> R,
    ) -> R {
        let cfg = self.cfg.lock();
        let queues = self.hw_queues.all(&cfg);
        if queues.is_empty() {
            // Unbound: what the queues counted while bound.
            return f(&mut cfg.retired_requests.iter().copied());
        }
        f(&mut queues.iter().map(|q| q.requests.load(Ordering::Relaxed)))
    }

    /// Calls `f` with the process IDs of the hardware queues' worker threads, in queue order
    /// (none while the device is unbound).
    pub(crate) fn worker_pids<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = i32>) -> R) -> R {
        let cfg = self.cfg.lock();
        f(&mut self.hw_queues.all(&cfg).iter().map(|q| q.worker.pid()))
    }

    /// The queue depth from which on a single submitter's direct I/O goes to the worker. When
    /// the task that starts a request also started the 32 before it on its hardware queue and
    /// at least this many requests are in flight there, or at least this many and
    /// [`crate::dispatch::SHARED_QUEUE_DEPTH`] are in flight whichever tasks started them (see [`QueueLoad`]),
    /// `queue_rq` hands the request to the queue's worker, which submits it on another CPU while
    /// the submitters prepare their next requests (a two-stage pipeline: the throughput of a
    /// deep queue); otherwise it submits the request itself (`IOCB_NOWAIT`: the latency of a
    /// shallow queue). 0: the worker submits every request.
    pub(crate) fn nowait_max_depth(&self) -> u32 {
        self.nowait_max_depth.load(Ordering::Relaxed)
    }

    /// Sets [`LoopDevice::nowait_max_depth`]; takes effect for the next request.
    pub(crate) fn set_nowait_max_depth(&self, depth: u32) {
        self.nowait_max_depth.store(depth, Ordering::Relaxed);
    }

    /// Whether buffered backing I/O keeps the page cache free of the device's data
    /// (`IOCB_DONTCACHE`: read data is dropped once copied, written data once written back),
    /// so that it is cached once, in the device's own page cache, instead of twice. Applies in
    /// buffered mode, where the backing file supports it ([`IoState::dontcache`]).
    pub(crate) fn dontcache(&self) -> bool {
        self.dontcache_on.load(Ordering::Relaxed)
    }

    /// The cache mode as `rust_loop/cache_mode` shows it: `dontcache` when chosen and (while
    /// bound) the backing file supports it, else `normal`.
    pub(crate) fn cache_mode(&self) -> &'static str {
        let bound = self.state() == State::Bound;
        if self.dontcache() && (!bound || self.dontcache_capable.load(Ordering::Relaxed)) {
            "dontcache"
        } else {
            "normal"
        }
    }

    /// Chooses the cache mode (`normal` or `dontcache`); the next request sees it. `EINVAL` for
    /// another mode, `EOPNOTSUPP` for `dontcache` while bound to a file that does not support
    /// it (an unbound device keeps the choice, and a binding to such a file uses `normal`).
    pub(crate) fn set_cache_mode(&self, mode: &str) -> Result {
        let dontcache = match mode {
            "normal" => false,
            "dontcache" => true,
            _ => return Err(EINVAL),
        };
        let _cfg = self.cfg.lock();
        if dontcache
            && self.state() == State::Bound
            && !self.dontcache_capable.load(Ordering::Relaxed)
        {
            return Err(EOPNOTSUPP);
        }
        self.dontcache_on.store(dontcache, Ordering::Relaxed);
        Ok(())
    }

    /// Number of hardware queues, each with its worker.
    pub(crate) fn nr_hw_queues(&self) -> u32 {
        self.nr_hw_queues.load(Ordering::Relaxed)
    }

    /// Changes the number of hardware queues of an unbound device (the per-device form of the
    /// `nr_hw_queues` module parameter): 1 to the number of online CPUs. Their workers start
    /// when the device is bound.
    pub(crate) fn set_nr_hw_queues(&self, count: u32) -> Result {
        if count == 0 || count > crate::sys::online_cpus() {
            return Err(EINVAL);
        }
        {
            let mut cfg = self.cfg.lock();
            if self.state() != State::Unbound {
                return Err(EBUSY);
            }
            if count == self.nr_hw_queues() {
                return Ok(());
            }
            self.set_state(State::Resizing);
            // New queues count from zero.
            cfg.retired_requests.clear();
        }
        // Not under the device mutex: `blk_mq_update_nr_hw_queues` takes the tag set's
        // `update_nr_hwq_lock`, which `del_gendisk` holds while it takes `open_mutex`, under
        // which `open` takes the device mutex. `Resizing` keeps binding and removal out.
        let got = self.disk.set_nr_hw_queues(count);
        self.nr_hw_queues.store(got, Ordering::Relaxed);
        {
            let _cfg = self.cfg.lock();
            self.set_state(State::Unbound);
        }
        if got == count {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }

    /// The current state.
    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// `lo_flags`.
    pub(crate) fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    fn set_flags(&self, f: u32) {
        self.flags.store(f, Ordering::Relaxed);
    }

    /// `lo_offset`.
    pub(crate) fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }

    /// `lo_sizelimit`.
    pub(crate) fn sizelimit(&self) -> u64 {
        self.sizelimit.load(Ordering::Relaxed)
    }

    /// A new reference on the backing file, if bound.
    pub(crate) fn backing_file(&self) -> Option<BackingFile> {
        self.backing.lock().clone()
    }

    /// The data path's state, for `rq`, a request of this device in flight (lent by its
    /// owner) that `queue_rq` found the device bound for; `None` when unbound, or should `rq`
    /// be another device's. The state stays valid while `rq` is in flight.
    pub(crate) fn io_backing(&self, rq: &Request<LoopDisk>) -> Option<&IoState> {
        if !self.disk.owns(rq) {
            return None;
        }
        // SAFETY: A request of this device is in flight (`rq`, checked above): the cell is not
        // written until it ends (`IoCell`'s invariant).
        unsafe { self.io.get() }
    }

    /// Whether discard and write-zeroes are still advertised.
    pub(crate) fn discard_enabled(&self) -> bool {
        self.discard_on.load(Ordering::Relaxed)
    }

    /// Whether a `REQ_NOUNMAP` write-zeroes tries `FALLOC_FL_WRITE_ZEROES` first.
    pub(crate) fn write_zeroes_enabled(&self) -> bool {
        self.write_zeroes_on.load(Ordering::Relaxed)
    }

    /// The backing file refused `FALLOC_FL_WRITE_ZEROES`: `REQ_NOUNMAP` write-zeroes use
    /// `FALLOC_FL_ZERO_RANGE` from now on (until the next binding).
    pub(crate) fn disable_write_zeroes(&self) {
        self.write_zeroes_on.store(false, Ordering::Relaxed);
    }

    /// The backing file cannot `fallocate` in `mode`: stop advertising what needs it
    /// (`loop_clear_limits`). Called from the worker, once per kind.
    pub(crate) fn disable_fallocate(&self, mode: i32) {
        if mode & crate::sys::FALLOC_FL_PUNCH_HOLE != 0 {
            self.discard_on.store(false, Ordering::Relaxed);
        }
        // As loop.c, this updates the limits without freezing: the caller is a command in
        // flight, which a freeze would wait for.
        let _ = self.queue().update_limits(|lim| {
            if mode & crate::sys::FALLOC_FL_ZERO_RANGE != 0 {
                lim.max_write_zeroes_sectors = 0;
            }
            // Write-zeroes with unmap are hole punches: both need them (and the block layer
            // wants the unmap limit 0 or equal to the write-zeroes one).
            if mode & (crate::sys::FALLOC_FL_ZERO_RANGE | crate::sys::FALLOC_FL_PUNCH_HOLE) != 0 {
                lim.max_hw_wzeroes_unmap_sectors = 0;
            }
            if mode & crate::sys::FALLOC_FL_PUNCH_HOLE != 0 {
                lim.max_hw_discard_sectors = 0;
                lim.discard_granularity = 0;
            }
        });
    }

    /// Size of the device in sectors for `file` with the current offset and limit
    /// (`lo_calculate_size`).
    fn calculate_size(&self, file: &BackingFile) -> u64 {
        let mut size = file.size().saturating_sub(self.offset());
        let limit = self.sizelimit();
        if limit > 0 && limit < size {
            size = limit;
        }
        size >> SECTOR_SHIFT
    }

    /// Whether direct I/O is possible (`lo_can_use_dio`): the backing file supports it. Unlike
    /// loop.c, a block size or offset below the file's direct-I/O alignment does not turn it
    /// off for the whole device: the reads and writes that meet the alignment still go to the
    /// file with `IOCB_DIRECT`, the others take the buffered path ([`IoState::dio_aligned`],
    /// counted in `dio_fallbacks`). The two paths stay coherent through the backing file
    /// system's own direct-I/O rules: a direct read first writes back dirty page-cache data
    /// of its range, a direct write invalidates the cached pages of its range before and
    /// after (`kiocb_write_and_wait`, `kiocb_invalidate_pages`,
    /// `kiocb_invalidate_post_direct_write`).
    fn can_use_dio(&self, file: &BackingFile, dio: DioAlign) -> bool {
        file.can_direct_io() && dio.min_size != 0
    }

    /// Drops `LO_FLAGS_DIRECT_IO` when direct I/O is not possible (`loop_update_dio`).
    fn update_dio(&self, file: &BackingFile, dio: DioAlign) {
        if self.flags() & FLAG_DIRECT_IO != 0 && !self.can_use_dio(file, dio) {
            self.set_flags(self.flags() & !FLAG_DIRECT_IO);
        }
    }

    /// Publishes the current configuration to the data path.
    fn publish_io(&self, idle: &DataPathIdle<'_>, file: Option<BackingFile>) {
        let flags = self.flags();
        // Fail closed: `queue_rq` calls only into the file systems `nowait_fs` names.
        let nowait = file
            .as_ref()
            .is_some_and(|f| f.can_nowait() && crate::nowait_fs::allows(f.fs_type()));
        self.nowait_on
            .store(nowait && flags & FLAG_DIRECT_IO != 0, Ordering::Relaxed);
        self.dontcache_capable.store(
            file.as_ref().is_some_and(|f| f.supports_dontcache()),
            Ordering::Relaxed,
        );
        let old = self.io.replace(
            idle,
            file.map(|file| IoState {
                offset: self.offset(),
                read_only: flags & FLAG_READ_ONLY != 0,
                direct_io: flags & FLAG_DIRECT_IO != 0,
                nowait,
                dontcache: file.supports_dontcache(),
                dio_mask: u64::from(self.dio_min_size.load(Ordering::Relaxed).max(1) - 1),
                file_is_reg: file.is_reg(),
                backing_on_loop: file.is_on_loop_device(),
                file,
            }),
        );
        drop(old);
    }

    /// Fills `lim` for `file` with block size `bsize` (0: the default) (`loop_update_limits`).
    fn fill_limits(
        &self,
        lim: &mut bindings::queue_limits,
        file: &BackingFile,
        dio: DioAlign,
        bsize: u32,
    ) {
        let flags = self.flags();
        let bsize = match bsize {
            0 if flags & FLAG_DIRECT_IO != 0 => dio.min_size,
            0 => SECTOR_SIZE,
            b => b,
        };
        let (granularity, max_discard) = file.discard_config();
        lim.logical_block_size = bsize;
        lim.physical_block_size = bsize;
        lim.io_min = bsize;
        lim.dma_alignment = Self::dma_alignment(flags, dio);
        lim.features &= !(BLK_FEAT_WRITE_CACHE | bindings::BLK_FEAT_ROTATIONAL);
        if file.has_fsync() && flags & FLAG_READ_ONLY == 0 {
            lim.features |= BLK_FEAT_WRITE_CACHE;
        }
        if file.is_rotational() {
            lim.features |= bindings::BLK_FEAT_ROTATIONAL;
        }
        lim.max_hw_discard_sectors = max_discard;
        lim.max_write_zeroes_sectors = max_discard;
        // A write-zeroes that may unmap punches a hole: as cheap as a discard, and the range
        // reads as zeroes. Advertised, file systems on the device can offer
        // `FALLOC_FL_WRITE_ZEROES` themselves (xfs and ext4 ask the device for this limit).
        lim.max_hw_wzeroes_unmap_sectors = max_discard;
        lim.discard_granularity = if max_discard != 0 { granularity } else { 0 };
    }

    fn dma_alignment(flags: u32, dio: DioAlign) -> u32 {
        if flags & FLAG_DIRECT_IO != 0 {
            dio.mem_mask.max(SECTOR_SIZE - 1)
        } else {
            SECTOR_SIZE - 1
        }
    }

    /// Checks `info` and applies offset, size limit and file name (`loop_set_status_from_info`).
    fn apply_info(&self, cfg: &mut Config, info: &loop_info64) -> Result {
        if info.lo_encrypt_key_size > uapi::LO_KEY_SIZE {
            return Err(EINVAL);
        }
        match info.lo_encrypt_type {
            uapi::LO_CRYPT_NONE => {}
            uapi::LO_CRYPT_XOR => {
                pr_warn!("support for the xor transformation has been removed.\n");
                return Err(EINVAL);
            }
            uapi::LO_CRYPT_CRYPTOAPI => {
                pr_warn!("support for cryptoloop has been removed.  Use dm-crypt instead.\n");
                return Err(EINVAL);
            }
            _ => return Err(EINVAL),
        }
        if info.lo_offset > i64::MAX as u64 || info.lo_sizelimit > i64::MAX as u64 {
            return Err(EOVERFLOW);
        }
        self.offset.store(info.lo_offset, Ordering::Relaxed);
        self.sizelimit.store(info.lo_sizelimit, Ordering::Relaxed);
        cfg.file_name = info.lo_file_name;
        cfg.file_name[NAME_SIZE - 1] = 0;
        Ok(())
    }

    /// Follows a chain of loop devices backing `file`: the chain must not reach `own_dev`
    /// (`loop_validate_file`). The caller holds the global validation lock if `file` is a loop
    /// device.
    fn validate_file(file: &BackingFile, own_dev: u32) -> Result {
        let mut cur = file.clone();
        while let Some(other) = crate::loop_device_of(&cur) {
            if cur.rdev() == own_dev {
                return Err(EBADF);
            }
            if other.state() != State::Bound {
                return Err(EINVAL);
            }
            cur = other.backing_file().ok_or(EINVAL)?;
        }
        if !cur.is_reg() && !cur.is_blk() {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// `LOOP_CONFIGURE` and `LOOP_SET_FD` (`loop_configure`).
    pub(crate) fn configure(&self, mode: u32, bdev: &BlockDevice, config: &loop_config) -> Result {
        let file = BackingFile::from_fd(config.fd)?;
        file.check_ops()?;
        let is_loop = crate::loop_device_of(&file).is_some();
        let module_ref = ModuleRef::get();
        let claim = bdev.claim(mode)?;
        let validate = if is_loop {
            Some(crate::VALIDATE.lock())
        } else {
            None
        };
        let mut cfg = self.cfg.lock();

        if self.state() != State::Unbound {
            return Err(EBUSY);
        }
        Self::validate_file(&file, self.disk.devt())?;
        let info = &config.info;
        if info.lo_flags & !CONFIGURE_SETTABLE != 0 {
            return Err(EINVAL);
        }
        if config.block_size != 0 && !valid_block_size(config.block_size as usize) {
            return Err(EINVAL);
        }
        // The workers run only while the device is bound; on a later failure they are parked
        // again (a retry with corrected arguments takes them back).
        let queues = ScopeGuard::new_with_data(
            HwQueues::start(self.nr_hw_queues(), &cfg.retired_requests)?,
            HwQueues::park,
        );
        self.apply_info(&mut cfg, info)?;
        let mut flags = info.lo_flags;
        if !file.is_writable() || mode & BLK_OPEN_WRITE == 0 {
            flags |= FLAG_READ_ONLY;
        }
        if file.is_o_direct() {
            flags |= FLAG_DIRECT_IO;
        }
        self.set_flags(flags);

        self.disk.suppress_uevents(true);
        self.disk.force_media_change();
        self.disk.set_read_only(flags & FLAG_READ_ONLY != 0);

        cfg.old_gfp = file.restrict_gfp();
        cfg.dio = file.dio_align();
        self.dio_min_size.store(cfg.dio.min_size, Ordering::Relaxed);
        self.discard_on.store(true, Ordering::Relaxed);
        self.write_zeroes_on.store(true, Ordering::Relaxed);
        let dio = cfg.dio;
        if let Err(e) = self
            .queue()
            .update_limits(|lim| self.fill_limits(lim, &file, dio, config.block_size))
        {
            file.restore_gfp(cfg.old_gfp);
            self.set_flags(0);
            self.disk.suppress_uevents(false);
            return Err(e);
        }
        // Direct I/O may follow: write back what the page cache holds now.
        file.fsync();
        self.update_dio(&file, dio);
        self.set_merging();
        *self.backing.lock() = Some(file.clone());
        self.sysfs_add();
        self.disk.set_capacity(self.calculate_size(&file));
        {
            // SAFETY: The state is `Unbound` (checked above under the device mutex, which every
            // state change holds); the last unbinding ran at the last close, with no request in
            // flight, and no request has found the device bound since. `set_state` publishes the
            // cells below.
            let idle = unsafe { DataPathIdle::unbound(&cfg) };
            self.publish_io(&idle, Some(file));
            // The old value is empty (unbound).
            drop(self.hw_queues.replace(&cfg, &idle, queues.dismiss()));
        }
        self.set_state(State::Bound);
        // A bound device keeps the module loaded until it is cleared.
        cfg.module_ref = Some(module_ref);
        if crate::part_shift() != 0 {
            self.set_flags(self.flags() | FLAG_PARTSCAN);
        }
        let partscan = self.flags() & FLAG_PARTSCAN != 0;
        if partscan {
            self.disk.set_part_scan(true);
        }
        self.disk.suppress_uevents(false);
        self.disk.uevent_change();
        drop(cfg);
        drop(validate);
        if partscan {
            self.reread_partitions();
        }
        drop(claim);
        Ok(())
    }

    /// Merging on in direct-I/O mode, off (nomerges=2) in buffered mode.
    fn set_merging(&self) {
        self.queue().set_flag(
            bindings::QUEUE_FLAG_NOMERGES,
            self.flags() & FLAG_DIRECT_IO == 0,
        );
    }

    /// The state of the backing file a partition scan reads, if it can be known to be
    /// unchanged later (the file system keeps a change cookie).
    fn part_table_stamp(&self) -> Option<PartTableStamp> {
        let file = self.backing.lock().clone()?;
        let cookie = file.change_cookie();
        if cookie == 0 {
            return None;
        }
        Some(PartTableStamp {
            file: file.as_raw() as usize,
            offset: self.offset(),
            sectors: self.calculate_size(&file),
            cookie,
            parts: None,
        })
    }

    /// From `open`: a pending partition scan (`BLKRRPART`) over a partition table that cannot
    /// have changed since the last scan is dropped, so the partitions are not removed and
    /// added again. That is what made them appear, vanish and reappear after `losetup -P`:
    /// udev watches loop devices, and when `losetup` closes the device it had open for writing,
    /// udev asks for a rescan (`BLKRRPART`) right after the driver's own. The table cannot have
    /// changed when the backing file, its offset and size are the same and its change cookie
    /// (`i_version`, bumped by every write and `fallocate`, through the device or not) is the
    /// one read before that scan, the device's page cache holds no unwritten data, and the
    /// partitions are still the ones that scan created (none added, removed or resized with
    /// `BLKPG` since: a rescan is how such changes are undone).
    fn drop_redundant_part_scan(&self) {
        let now = self.part_table_stamp().map(|s| PartTableStamp {
            parts: Some(self.disk.partitions_digest()),
            ..s
        });
        let mut last = self.part_stamp.lock();
        if now.is_some() && *last == now && !self.disk.page_cache_dirty() {
            self.disk.cancel_part_scan();
            self.stats.partscan_skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            // The scan goes ahead; what it leaves is not known here, so none is dropped until
            // the driver scans again.
            *last = None;
        }
    }

    fn reread_partitions(&self) {
        let before = self.part_table_stamp();
        let scanned = self.disk.rescan_partitions(false);
        *self.part_stamp.lock() = match scanned {
            Ok(digest) => before.map(|s| PartTableStamp {
                parts: Some(digest),
                ..s
            }),
            Err(_) => None,
        };
        if let Err(e) = scanned {
            pr_warn!(
                "loop_reread_partitions: partition scan of loop{} failed (rc={})\n",
                self.number,
                e.to_errno()
            );
        }
    }

    fn sysfs_add(&self) {
        if !self.sysfs_on.load(Ordering::Relaxed) {
            self.sysfs_on.store(
                self.disk.add_group(&sysfs::LOOP_GROUP).is_ok(),
                Ordering::Relaxed,
            );
        }
    }

    fn sysfs_remove(&self) {
        if self.sysfs_on.swap(false, Ordering::Relaxed) {
            self.disk.remove_group(&sysfs::LOOP_GROUP);
        }
    }

    /// `LOOP_CLR_FD`: mark for clearing at the last close (`loop_clr_fd`).
    pub(crate) fn clear_fd(&self) -> Result {
        let _validate = crate::VALIDATE.lock();
        let _cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        self.set_flags(self.flags() | FLAG_AUTOCLEAR);
        if self.disk.openers() == 1 {
            self.set_state(State::Rundown);
        }
        Ok(())
    }

    /// Unbinds the backing file at the last close (`__loop_clr_fd`). The caller holds the
    /// disk's `open_mutex` and there are no openers, so no I/O is in flight.
    fn unbind(&self) {
        let file = self.backing.lock().take();
        let workers = {
            let mut cfg = self.cfg.lock();
            // SAFETY: The state is `Rundown` (set by the caller or `clear_fd`), so `queue_rq`
            // reads no cell; this is the last close, so no request is in flight (as loop.c's
            // `__loop_clr_fd`: the page cache was written back and dropped before `release`,
            // and asynchronous I/O holds the file open).
            let idle = unsafe { DataPathIdle::unbound(&cfg) };
            self.publish_io(&idle, None);
            let old = self.hw_queues.replace(&cfg, &idle, KVec::new());
            // Keep the counts for the next binding (lost only if this allocation fails).
            cfg.retired_requests.clear();
            for q in old.iter() {
                let _ = cfg
                    .retired_requests
                    .push(q.requests.load(Ordering::Relaxed), GFP_KERNEL);
            }
            old
        };
        // Drained: no command holds a worker. Parked for the next binding, then stopped on the
        // module's release queue (`kthread_stop` waits for each thread's exit, which the
        // closer need not wait for; module exit drains the queue).
        HwQueues::park(workers);
        *self.part_stamp.lock() = None;
        self.cgroup_workers.stop_all();
        let (old_gfp, module_ref) = {
            let mut cfg = self.cfg.lock();
            self.offset.store(0, Ordering::Relaxed);
            self.sizelimit.store(0, Ordering::Relaxed);
            cfg.file_name = [0; NAME_SIZE];
            (cfg.old_gfp, cfg.module_ref.take())
        };
        let _ = self.queue().update_limits(|lim| {
            lim.logical_block_size = SECTOR_SIZE;
            lim.physical_block_size = SECTOR_SIZE;
            lim.io_min = SECTOR_SIZE;
        });
        self.disk.invalidate();
        self.sysfs_remove();
        self.disk.uevent_change();
        if let Some(f) = &file {
            f.restore_gfp(old_gfp);
        }
        drop(module_ref);
        self.disk.force_media_change();
        // Drop every partition, also those added by BLKPG; `open_mutex` is held by release.
        if let Err(e) = self.disk.rescan_partitions(true) {
            pr_warn!(
                "__loop_clr_fd: partition scan of loop{} failed (rc={})\n",
                self.number,
                e.to_errno()
            );
        }
        self.set_flags(0);
        if crate::part_shift() == 0 {
            self.disk.set_part_scan(false);
        }
        {
            let _cfg = self.cfg.lock();
            self.set_state(State::Unbound);
        }
        self.set_merging();
        // The file reference goes last, outside every lock (fput may take open_mutex).
        drop(file);
    }

    /// `LOOP_CHANGE_FD`: swap the backing file of a read-only device for one of the same size.
    pub(crate) fn change_fd(&self, fd: u32) -> Result {
        let file = BackingFile::from_fd(fd)?;
        file.check_ops()?;
        self.disk.suppress_uevents(true);
        let result = self.change_fd_locked(file);
        self.disk.suppress_uevents(false);
        let partscan = matches!(result, Ok(true));
        if partscan {
            self.reread_partitions();
        }
        self.disk.uevent_change();
        result.map(|_| ())
    }

    fn change_fd_locked(&self, file: BackingFile) -> Result<bool> {
        let is_loop = crate::loop_device_of(&file).is_some();
        let validate = if is_loop {
            Some(crate::VALIDATE.lock())
        } else {
            None
        };
        let mut cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if self.flags() & FLAG_READ_ONLY == 0 {
            return Err(EINVAL);
        }
        Self::validate_file(&file, self.disk.devt())?;
        let old = self.backing_file().ok_or(ENXIO)?;
        if self.calculate_size(&file) != self.calculate_size(&old) {
            return Err(EINVAL);
        }
        file.fsync();
        self.disk.force_media_change();
        {
            let frozen = self.queue().freeze();
            old.restore_gfp(cfg.old_gfp);
            cfg.old_gfp = file.restrict_gfp();
            if file.is_o_direct() {
                self.set_flags(self.flags() | FLAG_DIRECT_IO);
            }
            cfg.dio = file.dio_align();
            self.dio_min_size.store(cfg.dio.min_size, Ordering::Relaxed);
            self.update_dio(&file, cfg.dio);
            *self.backing.lock() = Some(file.clone());
            self.publish_io(&DataPathIdle::frozen(&frozen), Some(file));
        }
        self.set_merging();
        let partscan = self.flags() & FLAG_PARTSCAN != 0;
        drop(cfg);
        drop(validate);
        // Let a concurrent validation that may still look at the old file finish first.
        if !is_loop {
            drop(crate::VALIDATE.lock());
        }
        drop(old);
        Ok(partscan)
    }

    /// `LOOP_SET_STATUS[64]` (`loop_set_status`).
    pub(crate) fn set_status(&self, info: &loop_info64) -> Result {
        let mut cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        let size_changed = self.offset() != info.lo_offset || self.sizelimit() != info.lo_sizelimit;
        if size_changed {
            self.disk.sync_and_invalidate_bdev();
        }
        let mut partscan = false;
        let result = {
            let frozen = self.queue().freeze();
            let r = self.apply_info(&mut cfg, info);
            if r.is_ok() {
                let flags = self.flags();
                partscan = flags & FLAG_PARTSCAN == 0 && info.lo_flags & FLAG_PARTSCAN != 0;
                self.set_flags(
                    (flags & !SET_STATUS_CLEARABLE) | (info.lo_flags & SET_STATUS_SETTABLE),
                );
                self.update_dio(&file, cfg.dio);
                self.publish_io(&DataPathIdle::frozen(&frozen), Some(file.clone()));
            }
            r
        };
        self.set_merging();
        if partscan {
            self.disk.set_part_scan(true);
        }
        if result.is_ok() && size_changed {
            self.disk.set_capacity(self.calculate_size(&file));
        }
        drop(cfg);
        if partscan {
            self.reread_partitions();
        }
        result
    }

    /// `LOOP_GET_STATUS[64]` (`loop_get_status`).
    pub(crate) fn get_status(&self) -> Result<loop_info64> {
        let (mut info, file) = {
            let cfg = self.cfg.lock();
            if self.state() != State::Bound {
                return Err(ENXIO);
            }
            let mut info = <loop_info64 as pin_init::Zeroable>::zeroed();
            info.lo_number = self.number;
            info.lo_offset = self.offset();
            info.lo_sizelimit = self.sizelimit();
            info.lo_flags = self.flags();
            info.lo_file_name = cfg.file_name;
            (info, self.backing_file().ok_or(ENXIO)?)
        };
        // Outside the mutex: this calls into the filesystem.
        let id = file.identity()?;
        info.lo_device = huge_encode_dev(id.dev);
        info.lo_inode = id.ino;
        info.lo_rdevice = huge_encode_dev(id.rdev);
        Ok(info)
    }

    /// `LOOP_SET_CAPACITY` (`loop_set_capacity`).
    pub(crate) fn set_capacity(&self) -> Result {
        let _cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        self.disk.set_capacity(self.calculate_size(&file));
        Ok(())
    }

    /// `LOOP_SET_DIRECT_IO` (`loop_set_dio`).
    pub(crate) fn set_direct_io(&self, on: bool) -> Result {
        let cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if on == (self.flags() & FLAG_DIRECT_IO != 0) {
            return Ok(());
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        if on {
            if !self.can_use_dio(&file, cfg.dio) {
                return Err(EINVAL);
            }
            // Flush dirty pages before direct I/O starts.
            file.fsync();
        }
        let dio = cfg.dio;
        self.queue().update_limits_frozen(
            |lim| {
                let flags = if on {
                    self.flags() | FLAG_DIRECT_IO
                } else {
                    self.flags() & !FLAG_DIRECT_IO
                };
                lim.dma_alignment = Self::dma_alignment(flags, dio);
            },
            |frozen| {
                let f = self.flags();
                self.set_flags(if on {
                    f | FLAG_DIRECT_IO
                } else {
                    f & !FLAG_DIRECT_IO
                });
                self.publish_io(&DataPathIdle::frozen(frozen), Some(file.clone()));
            },
        )?;
        self.set_merging();
        Ok(())
    }

    /// `LOOP_SET_BLOCK_SIZE` (`loop_set_block_size`).
    pub(crate) fn set_block_size(&self, mode: u32, bdev: &BlockDevice, arg: usize) -> Result {
        let _claim = bdev.claim(mode)?;
        let cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        if self.queue().limits().logical_block_size as usize == arg {
            return Ok(());
        }
        // 0 means the default (as loop.c): 512, or the direct-I/O size in direct-I/O mode.
        if arg != 0 && !valid_block_size(arg) {
            return Err(EINVAL);
        }
        let file = self.backing_file().ok_or(ENXIO)?;
        self.disk.sync_and_invalidate_bdev();
        let dio = cfg.dio;
        self.queue().update_limits_frozen(
            |lim| self.fill_limits(lim, &file, dio, arg as u32),
            |frozen| {
                self.update_dio(&file, dio);
                self.publish_io(&DataPathIdle::frozen(frozen), Some(file.clone()));
            },
        )?;
        self.set_merging();
        Ok(())
    }

    /// Whether `LOOP_CTL_REMOVE` may delete the device; marks it `Deleting` if so.
    pub(crate) fn begin_delete(&self) -> Result {
        let _cfg = self.cfg.lock();
        if self.state() != State::Unbound || self.disk.openers() > 0 {
            return Err(EBUSY);
        }
        self.set_state(State::Deleting);
        Ok(())
    }

    /// Deletes the disk; the device is freed when its last reference goes, after the returned
    /// rest of the disk's teardown has run (see [`DiskRelease`]).
    ///
    /// The counters group goes first, outside `del_gendisk`: that holds the tag set's
    /// `update_nr_hwq_lock` while it removes the disk's sysfs files (waiting for their running
    /// `show`/`store` calls), and the `nr_hw_queues` store takes that lock itself
    /// (`blk_mq_update_nr_hw_queues`), so removing the group under it could deadlock against a
    /// concurrent store (lockdep: kn->active -> lo_mutex -> update_nr_hwq_lock -> kn->active).
    pub(crate) fn remove(&self) -> Option<DiskRelease> {
        if self.stats_on.swap(false, Ordering::Relaxed) {
            self.disk.remove_group(&sysfs::RUST_LOOP_GROUP);
        }
        self.disk.remove()
    }
}

/// `huge_encode_dev`: a kernel `dev_t` in the 64-bit user-space encoding.
fn huge_encode_dev(dev: u32) -> u64 {
    let major = u64::from(dev >> bindings::MINORBITS);
    let minor = u64::from(dev & ((1 << bindings::MINORBITS) - 1));
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

#[kernel::macros::kunit_tests(rust_loop_device)]
mod tests {
    use super::*;
    use crate::sys::max_block_size;

    /// `blk_validate_block_size`: a power of two from 512 to `BLK_MAX_BLOCK_SIZE` (at least the
    /// page size).
    #[test]
    fn block_sizes() {
        let max = max_block_size();
        for ok in [512, 1024, 2048, 4096, kernel::page::PAGE_SIZE, max] {
            assert!(valid_block_size(ok));
        }
        for bad in [0, 1, 256, 511, 513, 1000, 3072, max * 2, usize::MAX] {
            assert!(!valid_block_size(bad));
        }
    }
}

/// The [`DiskOps`] of a loop device.
pub(crate) struct LoopDisk;

impl DiskOps for LoopDisk {
    type Data = LoopDevice;
    type Pdu = LoopCmd;

    unsafe fn init_pdu(pdu: *mut LoopCmd) {
        // SAFETY: Forwarded from the caller.
        unsafe { LoopCmd::init(pdu) }
    }

    fn queue_rq(dev: &LoopDevice, rq: LoopRq) {
        rq.start();
        if dev.state() != State::Bound {
            rq.end(BlkStatus::IOERR);
            return;
        }
        let load = dev.hw_queue_of(&rq).map_or(QueueLoad::default(), |q| {
            q.request_started(dev.nowait_max_depth())
        });
        let rq = match dev.io_backing(&rq) {
            Some(io) if crate::dispatch::nowait_allowed(dev, io, &rq, load) => {
                match crate::cmd::try_nowait(dev, io, rq) {
                    Ok(()) => return,
                    Err(rq) => rq,
                }
            }
            _ => rq,
        };
        // `BLK_MQ_F_BLOCKING`: `queue_rq` may sleep.
        crate::cmd::queue_to_worker(dev, rq, true);
    }

    fn complete(dev: &LoopDevice, rq: LoopRq) {
        crate::cmd::end(dev, rq)
    }

    fn open(dev: &LoopDevice, _mode: u32) -> Result {
        let _cfg = dev.cfg.lock();
        match dev.state() {
            State::Deleting | State::Rundown => return Err(ENXIO),
            State::Bound if dev.disk.part_scan_pending() => dev.drop_redundant_part_scan(),
            _ => {}
        }
        Ok(())
    }

    fn release(dev: &LoopDevice) {
        if dev.disk.openers() > 0 {
            return;
        }
        let need_clear = {
            let _cfg = dev.cfg.lock();
            if dev.state() == State::Bound && dev.flags() & FLAG_AUTOCLEAR != 0 {
                dev.set_state(State::Rundown);
            }
            dev.state() == State::Rundown
        };
        if need_clear {
            dev.unbind();
        }
    }

    fn ioctl(dev: &LoopDevice, bdev: &BlockDevice, mode: u32, cmd: u32, arg: usize) -> Result<i32> {
        crate::ioctl::dispatch(dev, bdev, mode, cmd, arg).map(|()| 0)
    }

    fn compat_ioctl(
        dev: &LoopDevice,
        bdev: &BlockDevice,
        mode: u32,
        cmd: u32,
        arg: usize,
    ) -> Result<i32> {
        crate::ioctl::dispatch_compat(dev, bdev, mode, cmd, arg).map(|()| 0)
    }
}
