// SPDX-License-Identifier: GPL-2.0

//! [`LoopDevice`]: one `loopN` and its state machine (Unbound → Bound → Rundown → Unbound, or
//! Deleting): creation, binding's and unbinding's data-path cells, the last close, removal.
//! Reconfiguration is in [`config`], the queue limits in [`limits`], the partition-scan record
//! in [`partscan`], the sysfs knobs in [`knobs`], the debugfs counters in [`debugfs`]. Behaviour and errno values follow
//! `drivers/block/loop.c`.

mod config;
mod debugfs;
mod hw_queues;
mod knobs;
mod limits;
mod partscan;
mod settings;
mod sysfs;

pub(crate) use hw_queues::HwQueue;
use hw_queues::HwQueues;
use limits::{MAX_HW_SECTORS, MAX_SEGMENTS};
use partscan::PartTableStamp;
pub(crate) use settings::DeviceSettings;

use super::{
    backing::IoState,
    cgroup_workers::CgroupWorkers,
    dispatch::{LoadTracker, SubmissionPolicy},
    stats::{DevStats, FlushWatch, PerQueue, PerQueues},
    sys::{
        online_cpus, BackingFile, BlockDevice, DataPathCell, DataPathIdle, DebugFiles, DioAlign,
        Disk, DiskConfig, DiskRelease, KthreadWorker, ModuleRef, Queue, Request,
        BLK_FEAT_WRITE_CACHE, BLK_OPEN_WRITE, SECTOR_SHIFT, SECTOR_SIZE,
    },
};
use crate::uapi::{self, loop_config, loop_info64};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
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

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init`, before any device exists.
    /// `loop_validate_mutex`: serialises following chains of loop devices against rebinding.
    pub(crate) unsafe(uninit) static VALIDATE: Mutex<()> = ();
}

/// The loop device behind `file`, if it is a loop block device node.
pub(crate) fn loop_device_of(file: &BackingFile) -> Option<Arc<LoopDevice>> {
    // SAFETY: Block major 7 belongs to this module while it is loaded; all its disks are
    // `Disk<LoopDisk>`s.
    unsafe { Disk::<LoopDisk>::data_of_node(file, bindings::LOOP_MAJOR) }
}

/// The [`DiskOps`](super::sys::DiskOps) of a loop device: its request path is in `io.rs`.
pub(crate) struct LoopDisk;

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
    /// Minors of the device are `1 << part_shift`; 0: no partitions unless `LO_FLAGS_PARTSCAN`.
    part_shift: u32,

    /// The control path's counters.
    pub(crate) stats: DevStats,
    /// The request path's counters, one entry per hardware queue (wrapping around: as many as
    /// CPUs were online at creation), for the device's whole life.
    per_queue: PerQueues,
    /// The counters' debugfs files (`rust_loop/loopN/`), while the device is added.
    #[pin]
    debugfs: SpinLock<Option<DebugFiles<LoopDevice>>>,
    /// The submission policy ([`super::dispatch`]).
    pub(crate) policy: SubmissionPolicy,
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
    io: DataPathCell<Option<IoState>>,
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
    /// Whether the `rust_loop/` knobs group exists.
    stats_on: AtomicBool,
    /// Fault injection (debugfs' `inject_drop_requests`): `queue_rq` drops this many of the
    /// next requests without ending them, to show that such a request still ends, failed. Read
    /// only once a write has armed `sys::fault_injection_armed`'s static key.
    pub(crate) inject_drop_requests: AtomicU32,
}

impl LoopDevice {
    /// Creates `loop<number>` (not yet visible; see [`LoopDevice::add_disk`]).
    pub(crate) fn new(number: u32, settings: &DeviceSettings) -> Result<Arc<Self>> {
        let part_shift = settings.part_shift;
        let nr_hw_queues = settings.nr_hw_queues;
        let name = CString::try_from_fmt(fmt!("loop{}", number))?;
        let per_queue = PerQueues::new(online_cpus())?;
        let disk = Disk::new(
            &DiskConfig {
                major: bindings::LOOP_MAJOR,
                first_minor: number << part_shift,
                minors: 1 << part_shift,
                queue_depth: settings.queue_depth,
                nr_hw_queues,
                // BLOCKING: `queue_rq` may submit to the backing file itself. TAG_HCTX_SHARED:
                // the hardware queues share one set of `queue_depth` requests, so a device
                // holds as many as with one queue, whatever the number of queues.
                flags: bindings::BLK_MQ_F_STACKING
                    | bindings::BLK_MQ_F_NO_SCHED_BY_DEFAULT
                    | bindings::BLK_MQ_F_BLOCKING
                    | bindings::BLK_MQ_F_TAG_HCTX_SHARED,
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
                hw_queues: HwQueues(DataPathCell::new(KVec::new())),
                cgroup_workers <- CgroupWorkers::new(*number, settings.max_cgroup_workers),
                nr_hw_queues: AtomicU32::new(nr_hw_queues.max(1)),
                part_shift,
                stats: DevStats::default(),
                per_queue,
                debugfs <- kernel::new_spinlock!(None),
                policy: SubmissionPolicy::new(settings.nowait_min_stack, settings.nowait_max_depth),
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
                io: DataPathCell::new(None),
                discard_on: AtomicBool::new(true),
                write_zeroes_on: AtomicBool::new(true),
                part_stamp <- kernel::new_spinlock!(None),
                nowait_on: AtomicBool::new(false),
                dontcache_on: AtomicBool::new(settings.dontcache),
                dontcache_capable: AtomicBool::new(false),
                dio_min_size: AtomicU32::new(SECTOR_SIZE),
                visible: AtomicBool::new(false),
                sysfs_on: AtomicBool::new(false),
                stats_on: AtomicBool::new(false),
                inject_drop_requests: AtomicU32::new(0),
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

    /// Makes the device visible as `/dev/loopN`, with its knobs in sysfs.
    pub(crate) fn add_disk(self: &Arc<Self>) -> Result {
        self.disk.add(self.clone())?;
        // The knobs are extras: a device without them still works.
        self.stats_on.store(
            self.disk.add_group(&sysfs::RUST_LOOP_GROUP).is_ok(),
            Ordering::Relaxed,
        );
        Ok(())
    }

    fn queue(&self) -> &Queue {
        self.disk.queue()
    }

    /// The data path's state and hardware queues, for `rq`, a request of this device in flight
    /// (lent by its owner) that `queue_rq` found the device bound for; `None` should `rq` be
    /// another device's. The borrow is the request's: they stay while `rq` is in flight.
    fn in_flight<'r>(
        &'r self,
        rq: &'r Request<LoopDisk>,
    ) -> Option<(Option<&'r IoState>, &'r [HwQueue])> {
        if !self.disk.owns(rq) {
            return None;
        }
        // SAFETY: A request of this device is in flight (`rq`, checked above), one that found
        // the device bound (`queue_rq` reads the cells only then): neither cell is replaced
        // before it ends.
        let (io, queues) = unsafe { (self.io.get(), self.hw_queues.0.get()) };
        Some((io.as_ref(), queues))
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

    /// The data path's state, for `rq`, a request of this device in flight that `queue_rq`
    /// found the device bound for; `None` when unbound, or should `rq` be another device's.
    pub(crate) fn io_backing<'r>(&'r self, rq: &'r Request<LoopDisk>) -> Option<&'r IoState> {
        self.in_flight(rq)?.0
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
        if mode & super::sys::FALLOC_FL_PUNCH_HOLE != 0 {
            self.discard_on.store(false, Ordering::Relaxed);
        }
        // As loop.c, this updates the limits without freezing: the caller is a command in
        // flight, which a freeze would wait for.
        let _ = self.queue().update_limits(|lim| {
            if mode & super::sys::FALLOC_FL_ZERO_RANGE != 0 {
                lim.max_write_zeroes_sectors = 0;
            }
            // Write-zeroes with unmap are hole punches: both need them (and the block layer
            // wants the unmap limit 0 or equal to the write-zeroes one).
            if mode & (super::sys::FALLOC_FL_ZERO_RANGE | super::sys::FALLOC_FL_PUNCH_HOLE) != 0 {
                lim.max_hw_wzeroes_unmap_sectors = 0;
            }
            if mode & super::sys::FALLOC_FL_PUNCH_HOLE != 0 {
                lim.max_hw_discard_sectors = 0;
                lim.discard_granularity = 0;
            }
        });
    }

    /// Publishes the current configuration to the data path.
    fn publish_io(&self, idle: &DataPathIdle<'_>, file: Option<BackingFile>) {
        let flags = self.flags();
        // Fail closed: `queue_rq` calls only into the file systems `nowait_fs` names.
        let nowait = file
            .as_ref()
            .is_some_and(|f| f.can_nowait() && super::nowait_fs::allows(f.fs_type()));
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
        let _validate = VALIDATE.lock();
        let _cfg = self.cfg.lock();
        if self.state() != State::Bound {
            return Err(ENXIO);
        }
        let _watch = FlushWatch::new(&self.per_queue, &self.stats.flushes_racing_clr_fd);
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
            let idle = unsafe { DataPathIdle::assume(&cfg) };
            self.publish_io(&idle, None);
            let old = self.hw_queues.replace(&cfg, &idle, KVec::new());
            // Keep the counts for the next binding (lost only if this allocation fails).
            cfg.retired_requests.clear();
            for q in old.iter() {
                let _ = cfg.retired_requests.push(q.load.started(), GFP_KERNEL);
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
        if self.part_shift == 0 {
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
        self.remove_debugfs();
        self.disk.remove()
    }
}

impl LoopDevice {
    /// `lo_open`: refuses an open while the device is being removed or cleared; drops a
    /// partition scan asked for again on an unchanged backing file.
    pub(crate) fn opened(&self) -> Result {
        let _cfg = self.cfg.lock();
        match self.state() {
            State::Deleting | State::Rundown => return Err(ENXIO),
            State::Bound if self.disk.part_scan_pending() => self.drop_redundant_part_scan(),
            _ => {}
        }
        Ok(())
    }

    /// `lo_release`: at the last close, an autoclear device is cleared.
    pub(crate) fn released(&self) {
        if self.disk.openers() > 0 {
            return;
        }
        let need_clear = {
            let _cfg = self.cfg.lock();
            if self.state() == State::Bound && self.flags() & FLAG_AUTOCLEAR != 0 {
                self.set_state(State::Rundown);
            }
            self.state() == State::Rundown
        };
        if need_clear {
            self.unbind();
        }
    }
}
