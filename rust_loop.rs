// SPDX-License-Identifier: GPL-2.0

//! rust_loop: the loop block driver (`drivers/block/loop.c`) in Rust.
//!
//! Block major 7, devices `loopN`, `/dev/loop-control` (misc minor 237), driven by util-linux
//! `losetup` through the loop ioctl ABI. This file owns the module: its parameters, the table of
//! devices (`loop_index_idr`) and the global locks; each concern lives in `rust_loop/`.

// The driver's modules are the files of `rust_loop/`, an ordinary module tree below this one
// `#[path]` (`sys/` is the safe layer over `kernel::bindings`, the others the driver on it);
// they are named from the crate root, as `crate::device`, `crate::sys`.
#[path = "rust_loop"]
mod modules {
    pub(crate) mod cgroup_workers;
    pub(crate) mod control;
    pub(crate) mod device;
    pub(crate) mod dispatch;
    pub(crate) mod io;
    pub(crate) mod ioctl;
    pub(crate) mod layout;
    pub(crate) mod nowait_fs;
    pub(crate) mod stats;
    pub(crate) mod sys;
    pub(crate) mod sysfs;
    pub(crate) mod worker_cache;
}
mod uapi;

use modules::*;

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use device::{LoopDevice, State};
use kernel::{bindings, prelude::*, sync::Arc};

module! {
    type: LoopModule,
    name: "rust_loop",
    authors: ["rust_loop developers"],
    description: "Loopback block device in Rust",
    license: "GPL",
    alias: ["block-major-7-*", "char-major-10-237", "devname:loop-control"],
    params: {
        max_loop: i32 {
            default: -1,
            description: "Maximum number of loop devices (-1: create 8 at load, no limit)",
        },
        max_part: i32 {
            default: 0,
            description: "Maximum number of partitions per loop device",
        },
        hw_queue_depth: i32 {
            default: 128,
            description: "Queue depth for each hardware queue. Default: 128",
        },
        nr_hw_queues: u32 {
            default: 1,
            description: "Hardware queues per device, each with its own worker thread (1 to the number of online CPUs; per device: /sys/block/loopN/rust_loop/nr_hw_queues). Default: 1",
        },
        nowait_min_stack: u32 {
            default: 8192,
            description: "Kernel stack bytes that must remain for queue_rq to submit direct I/O itself (IOCB_NOWAIT); below it the worker submits. Default: 8192",
        },
        max_cgroup_workers: u32 {
            default: 16,
            description: "Worker threads per device for the commands of non-root blkcgs (one per cgroup, loop.c's per-cgroup workers); past this bound the commands of further cgroups run on the hardware queue's worker, still charged to their cgroup. 0: none. Default: 16",
        },
        dontcache: bool {
            default: false,
            description: "Cache mode of new devices: buffered backing I/O with IOCB_DONTCACHE (the backing file's page cache drops the data once read or written back), so data is not cached twice, where the backing file system supports it (per device: /sys/block/loopN/rust_loop/cache_mode, normal or dontcache). Default: false",
        },
        nowait_max_depth: u32 {
            default: 1,
            description: "Requests in flight on a hardware queue from which on queue_rq hands a single submitter's direct I/O to the worker (which submits on another CPU) instead of submitting it itself, and every submitter's from 16 on (or from this value, if larger); 0: always the worker (per device: /sys/block/loopN/rust_loop/nowait_max_depth). Default: 1",
        },
        worker_linger_ms: u32 {
            default: 500,
            description: "Milliseconds an unbound device's worker threads are kept (up to twice that) for the next binding of the same device number, which then starts no thread; 0: stopped at unbinding. Default: 500",
        },
    },
}

/// Devices created at load time when `max_loop` is not given (`CONFIG_BLK_DEV_LOOP_MIN_COUNT`).
const DEFAULT_MIN_COUNT: u32 = 8;

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init` before any device exists.
    /// Every device (`loop_index_idr`), visible or not (`LoopDevice::visible`).
    unsafe(uninit) static DEVICES: Mutex<DeviceTable> = DeviceTable {
        devices: KVec::new(),
        adding: KVec::new(),
    };
}

/// The table of devices ([`DEVICES`]): the devices, and the numbers of those being created.
struct DeviceTable {
    devices: KVec<Arc<LoopDevice>>,
    /// Numbers taken by `LOOP_CTL_ADD`s that are still creating their device (its tag set and
    /// disk are allocated outside the table's lock, as loop.c's `loop_add` does).
    adding: KVec<u32>,
}

impl DeviceTable {
    /// Whether `number` belongs to a device, or to one being created.
    fn taken(&self, number: u32) -> bool {
        self.devices.iter().any(|d| d.number == number) || self.adding.contains(&number)
    }
}

impl core::ops::Deref for DeviceTable {
    type Target = KVec<Arc<LoopDevice>>;

    fn deref(&self) -> &Self::Target {
        &self.devices
    }
}

impl core::ops::DerefMut for DeviceTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.devices
    }
}

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init` before any device exists.
    /// Where removed devices finish their teardown ([`sys::DiskRelease`]) off the remover's
    /// path; drained and destroyed at module exit. `None` until then.
    unsafe(uninit) static RELEASES: Mutex<Option<sys::OwnedQueue>> = None;
}

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init` before any device exists.
    /// `loop_validate_mutex`: serialises following chains of loop devices against rebinding.
    unsafe(uninit) static VALIDATE: Mutex<()> = ();
}

/// `part_shift`: minors per device are `1 << part_shift`.
static PART_SHIFT: AtomicU32 = AtomicU32::new(0);
/// Highest device count that may be created on demand (0: no limit).
static MAX_LOOP_LIMIT: AtomicU32 = AtomicU32::new(0);
/// Tag set depth of new devices.
static QUEUE_DEPTH: AtomicU32 = AtomicU32::new(128);
/// Hardware queues (and workers) of new devices.
static NR_HW_QUEUES: AtomicU32 = AtomicU32::new(1);

/// How long an unbound device's worker threads wait for its next binding ([`worker_cache`]).
static WORKER_LINGER_MS: AtomicU32 = AtomicU32::new(500);

fn worker_linger_ms() -> u32 {
    WORKER_LINGER_MS.load(Ordering::Relaxed)
}

/// Stack that must remain for a NOWAIT submission from `queue_rq`.
static NOWAIT_MIN_STACK: AtomicU32 = AtomicU32::new(8192);

fn nowait_min_stack() -> usize {
    NOWAIT_MIN_STACK.load(Ordering::Relaxed) as usize
}

/// Bound on the per-cgroup worker threads of a device.
static MAX_CGROUP_WORKERS: AtomicU32 = AtomicU32::new(16);

fn max_cgroup_workers() -> usize {
    MAX_CGROUP_WORKERS.load(Ordering::Relaxed) as usize
}

/// Cache mode of new devices: `dontcache` when set.
static DONTCACHE: AtomicBool = AtomicBool::new(false);

fn dontcache_default() -> bool {
    DONTCACHE.load(Ordering::Relaxed)
}

/// `nowait_max_depth` of new devices.
static NOWAIT_MAX_DEPTH: AtomicU32 = AtomicU32::new(1);

fn nowait_max_depth() -> u32 {
    NOWAIT_MAX_DEPTH.load(Ordering::Relaxed)
}

fn part_shift() -> u32 {
    PART_SHIFT.load(Ordering::Relaxed)
}

/// `THIS_MODULE`.
fn this_module() -> *mut bindings::module {
    this_module_const()
}

/// `THIS_MODULE`, usable in constants.
const fn this_module_const() -> *mut bindings::module {
    <LoopModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr()
}

/// `loop_add`: creates `loop<index>`, or the lowest free number when `index` is negative.
///
/// As loop.c, the table's lock covers choosing the number (reserved in [`DeviceTable::adding`]
/// while the device's tag set and disk are allocated) and entering the device, hidden; its disk
/// is added (sysfs, uevent, tens of milliseconds) outside the lock, so that devices being added
/// or removed at the same time do not wait for each other, and it is shown afterwards.
fn add_device(index: i32) -> Result<u32> {
    let number = {
        let mut table = DEVICES.lock();
        let number = if index >= 0 {
            let n = index as u32;
            if table.taken(n) {
                return Err(EEXIST);
            }
            n
        } else {
            let mut n = 0;
            while table.taken(n) {
                n += 1;
            }
            n
        };
        table.adding.push(number, GFP_KERNEL)?;
        number
    };
    // The tag set and the disk are allocated without the lock, the number reserved meanwhile,
    // so that concurrent adds do not wait for each other's allocations (as loop.c's `loop_add`).
    let made = LoopDevice::new(
        number,
        part_shift(),
        QUEUE_DEPTH.load(Ordering::Relaxed),
        NR_HW_QUEUES.load(Ordering::Relaxed),
    );
    let dev = {
        let mut table = DEVICES.lock();
        table.adding.retain(|n| *n != number);
        let dev = made?;
        table.push(dev.clone(), GFP_KERNEL)?;
        dev
    };
    let added = dev.add_disk();
    let mut devices = DEVICES.lock();
    if let Err(e) = added {
        // Hidden all along: nobody else picked it.
        devices.retain(|d| !Arc::ptr_eq(d, &dev));
        return Err(e);
    }
    dev.visible.store(true, Ordering::Release);
    Ok(dev.number)
}

/// `loop_control_remove`.
fn remove_device(index: i32) -> Result<u32> {
    if index < 0 {
        kernel::pr_warn_once!("deleting an unspecified loop device is not supported.\n");
        return Err(EINVAL);
    }
    let dev = {
        let devices = DEVICES.lock();
        let dev = devices
            .iter()
            .find(|d| d.number == index as u32 && d.visible.load(Ordering::Acquire))
            .ok_or(ENODEV)?
            .clone();
        // Hidden while we check it, so nobody else picks or removes it.
        dev.visible.store(false, Ordering::Release);
        dev
    };
    if let Err(e) = dev.begin_delete() {
        dev.visible.store(true, Ordering::Release);
        return Err(e);
    }
    // The number stays taken (the device in the table, hidden) until the disk is deleted, as
    // loop.c keeps it in its idr: a `LOOP_CTL_ADD`/`GET_FREE` picking it earlier would register
    // a second `loopN` in sysfs while the old one is still there (`EEXIST`, found by the fuzzer).
    // Freeing the tag set and the disk waits for grace periods that the caller need not wait
    // for: that goes to the module's queue (or runs here, should the queue item not allocate).
    if let Some(release) = dev.remove() {
        drop_later(release);
    }
    {
        let mut devices = DEVICES.lock();
        if let Some(pos) = devices.iter().position(|d| Arc::ptr_eq(d, &dev)) {
            drop(devices.remove(pos));
        }
    }
    Ok(0)
}

/// Drops `value` on the module's release queue ([`RELEASES`]), off the caller's path: for
/// teardowns that wait (grace periods, thread exits) and that nobody needs to wait for. Drops it
/// here should the queue item not allocate.
pub(crate) fn drop_later<T: Send + 'static>(value: T) {
    // Without the queue, or on failure, the closure, and with it `value`, is dropped here.
    on_release_queue(move |queue| {
        let _ = queue.try_spawn(GFP_KERNEL, move || drop(value));
    });
}

/// Runs `f` with the module's release queue ([`RELEASES`]), unless module exit has taken it.
pub(crate) fn on_release_queue(f: impl FnOnce(&sys::OwnedQueue)) {
    if let Some(queue) = RELEASES.lock().as_ref() {
        f(queue);
    }
}

/// `loop_control_get_free`: the first unbound device, else a new one.
fn get_free_device() -> Result<u32> {
    {
        let devices = DEVICES.lock();
        let mut free: Option<u32> = None;
        for d in devices.iter() {
            if d.visible.load(Ordering::Acquire) && d.state() == State::Unbound {
                free = Some(free.map_or(d.number, |f| f.min(d.number)));
            }
        }
        if let Some(n) = free {
            return Ok(n);
        }
    }
    add_device(-1)
}

/// `loop_probe`: opening `/dev/loopN` of a device that does not exist creates it. Safe: it only
/// uses the device number.
extern "C" fn probe(devt: bindings::dev_t) {
    let index = (devt & ((1 << bindings::MINORBITS) - 1)) >> part_shift();
    let limit = MAX_LOOP_LIMIT.load(Ordering::Relaxed);
    if limit != 0 && index >= limit {
        return;
    }
    let _ = add_device(index as i32);
}

/// The module: `/dev/loop-control`, block major 7 and every loop device.
struct LoopModule {
    control: Option<Pin<KBox<control::ControlDevice>>>,
    major: Option<sys::BlockMajor>,
}

impl kernel::Module for LoopModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        layout::check()?;
        let max_part = module_parameters::max_part.value();
        let max_loop = module_parameters::max_loop.value();
        let depth = module_parameters::hw_queue_depth.value();
        if depth < 1 {
            return Err(EINVAL);
        }
        let mut shift = 0;
        if max_part > 0 {
            // `fls(max_part)`.
            shift = 32 - (max_part as u32).leading_zeros();
        }
        if (1u64 << shift) > u64::from(bindings::DISK_MAX_PARTS) {
            return Err(EINVAL);
        }
        if max_loop > 0 && max_loop as u64 > 1u64 << (bindings::MINORBITS - shift) {
            return Err(EINVAL);
        }
        PART_SHIFT.store(shift, Ordering::Relaxed);
        QUEUE_DEPTH.store(depth as u32, Ordering::Relaxed);
        let cpus = sys::online_cpus();
        let queues = module_parameters::nr_hw_queues.value();
        if queues == 0 || queues > cpus {
            pr_info!(
                "nr_hw_queues={} out of range, using {}\n",
                queues,
                queues.clamp(1, cpus)
            );
        }
        NR_HW_QUEUES.store(queues.clamp(1, cpus.max(1)), Ordering::Relaxed);
        NOWAIT_MIN_STACK.store(
            module_parameters::nowait_min_stack.value(),
            Ordering::Relaxed,
        );
        NOWAIT_MAX_DEPTH.store(
            module_parameters::nowait_max_depth.value(),
            Ordering::Relaxed,
        );
        DONTCACHE.store(module_parameters::dontcache.value(), Ordering::Relaxed);
        MAX_CGROUP_WORKERS.store(
            module_parameters::max_cgroup_workers.value(),
            Ordering::Relaxed,
        );
        WORKER_LINGER_MS.store(
            module_parameters::worker_linger_ms.value(),
            Ordering::Relaxed,
        );
        MAX_LOOP_LIMIT.store(
            if max_loop > 0 { max_loop as u32 } else { 0 },
            Ordering::Relaxed,
        );
        // SAFETY: Called once, before any use.
        unsafe {
            DEVICES.init();
            RELEASES.init();
            VALIDATE.init();
            worker_cache::init();
        }
        let reaper = worker_cache::new_reaper()?;

        let control = KBox::pin_init(control::ControlDevice::register(), GFP_KERNEL)?;
        let major = sys::BlockMajor::register(bindings::LOOP_MAJOR, c"loop", probe)?;
        // Last of the steps that can fail: the module's drop destroys it.
        *RELEASES.lock() = Some(sys::OwnedQueue::new_unbound(c"rust_loop_release")?);
        worker_cache::open(reaper);
        let count = if max_loop >= 0 {
            max_loop as u32
        } else {
            DEFAULT_MIN_COUNT
        };
        for i in 0..count {
            let _ = add_device(i as i32);
        }
        pr_info!("module loaded\n");
        Ok(LoopModule {
            control: Some(control),
            major: Some(major),
        })
    }
}

impl Drop for LoopModule {
    fn drop(&mut self) {
        drop(self.major.take());
        drop(self.control.take());
        // Nobody can reach the table any more: the control device and major are gone, and no
        // device is open or bound (either would hold a module reference).
        let (devices, adding) = {
            let mut table = DEVICES.lock();
            // Both vectors taken out, so that their buffers are freed with them (the static
            // outlives the module: kmemleak on the debug kernel).
            (
                core::mem::take(&mut table.devices),
                core::mem::take(&mut table.adding),
            )
        };
        drop(adding);
        for dev in devices.iter() {
            drop(dev.remove());
        }
        // Stops the parked worker threads and the reaper, which runs on the release queue.
        worker_cache::close();
        // Runs the teardowns still queued before the module's code goes away; taken out first,
        // so that the lock is not held while the queue drains.
        let releases = RELEASES.lock().take();
        drop(releases);
    }
}
