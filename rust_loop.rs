// SPDX-License-Identifier: GPL-2.0

//! rust_loop: the loop block driver (`drivers/block/loop.c`) in Rust.
//!
//! Block major 7, devices `loopN`, `/dev/loop-control` (misc minor 237), driven by util-linux
//! `losetup` through the loop ioctl ABI. This file owns the module: its parameters, the table of
//! devices (`loop_index_idr`) and the global locks; each concern lives in `rust_loop/`.

/// The driver: the files of `rust_loop/`, an ordinary module tree (`sys/` is the safe layer over
/// `kernel::bindings`; the others are the driver on it, and name each other as `super::`).
mod rust_loop {
    pub(crate) mod backing;
    pub(crate) mod cgroup_workers;
    pub(crate) mod control;
    pub(crate) mod device;
    pub(crate) mod devices;
    pub(crate) mod dispatch;
    pub(crate) mod io;
    pub(crate) mod ioctl;
    pub(crate) mod nowait_fs;
    pub(crate) mod release;
    pub(crate) mod stats;
    pub(crate) mod sys;
    pub(crate) mod worker_cache;
}
mod uapi;

use rust_loop::*;

use device::DeviceSettings;
use kernel::{bindings, prelude::*};
use sys::compat::ParamValue;

/// The module, its aliases and parameters; `$flag`/`$off` are the type of an on/off parameter
/// and its "off" value, which differ between kernels ([`sys::compat::with_flag_param_type`]).
macro_rules! rust_loop_module {
    ($flag:ident, $off:tt) => {
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
                    description: "Requests in flight per device, shared by its hardware queues. Default: 128",
                },
                nr_hw_queues: u32 {
                    default: 0,
                    description: "Hardware queues per device, each with its own worker thread: 1 to the number of online CPUs, or 0 for one per online CPU up to 8 (per device: /sys/block/loopN/rust_loop/nr_hw_queues). Default: 0",
                },
                nowait_min_stack: u32 {
                    default: 8192,
                    description: "Kernel stack bytes that must remain for queue_rq to submit direct I/O itself (IOCB_NOWAIT); below it the worker submits. Default: 8192",
                },
                max_cgroup_workers: u32 {
                    default: 16,
                    description: "Worker threads per device for the commands of non-root blkcgs (one per cgroup, loop.c's per-cgroup workers); past this bound the commands of further cgroups run on the hardware queue's worker, still charged to their cgroup. 0: none. Default: 16",
                },
                dontcache: $flag {
                    default: $off,
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
    };
}
sys::compat::with_flag_param_type!(rust_loop_module);

/// Devices created at load time when `max_loop` is not given (`CONFIG_BLK_DEV_LOOP_MIN_COUNT`).
const DEFAULT_MIN_COUNT: u32 = 8;

/// Hardware queues of a device by default (`nr_hw_queues=0`): one per online CPU, at most this
/// many. Each queue's worker is a serial stage; with one per device, tasks that keep deep queues
/// on a many-CPU host are held to one thread's rate (loop.c's ceiling); 8 workers keep 12 deep
/// submitters at a fast device's rate by the cost model (BENCHMARKS.md "Many cores"). The
/// queues share one set of requests (`BLK_MQ_F_TAG_HCTX_SHARED`); the worker threads of a
/// bound device grow with the count.
const DEFAULT_MAX_HW_QUEUES: u32 = 8;

/// The module: `/dev/loop-control`, block major 7 and every loop device.
struct LoopModule {
    control: Option<Pin<KBox<control::ControlDevice>>>,
    major: Option<sys::BlockMajor>,
}

impl kernel::Module for LoopModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let max_part = module_parameters::max_part.value().get();
        let max_loop = module_parameters::max_loop.value().get();
        let depth = module_parameters::hw_queue_depth.value().get();
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
        let cpus = sys::online_cpus().max(1);
        let queues = match module_parameters::nr_hw_queues.value().get() {
            0 => cpus.min(DEFAULT_MAX_HW_QUEUES),
            n if n > cpus => {
                pr_info!("nr_hw_queues={} out of range, using {}\n", n, cpus);
                cpus
            }
            n => n,
        };
        let settings = DeviceSettings {
            part_shift: shift,
            queue_depth: depth as u32,
            nr_hw_queues: queues,
            nowait_min_stack: module_parameters::nowait_min_stack.value().get() as usize,
            nowait_max_depth: module_parameters::nowait_max_depth.value().get(),
            dontcache: sys::compat::Flag::is_on(module_parameters::dontcache.value().get()),
            max_cgroup_workers: module_parameters::max_cgroup_workers.value().get() as usize,
        };
        let max_loop_limit = if max_loop > 0 { max_loop as u32 } else { 0 };
        // SAFETY: Each global lock is initialised once, here, before any use: no device,
        // control node, release queue or parked worker exists yet.
        unsafe {
            devices::DEVICES.init();
            release::RELEASES.init();
            device::VALIDATE.init();
            worker_cache::PARKED.init();
        }
        devices::configure(settings, max_loop_limit);
        let reaper = worker_cache::new_reaper()?;

        let control = KBox::pin_init(control::ControlDevice::register(), GFP_KERNEL)?;
        let major = sys::BlockMajor::register(bindings::LOOP_MAJOR, c"loop", devices::probe)?;
        // Last of the steps that can fail: the module's drop destroys it.
        release::open()?;
        worker_cache::open(reaper, module_parameters::worker_linger_ms.value().get());
        let count = if max_loop >= 0 {
            max_loop as u32
        } else {
            DEFAULT_MIN_COUNT
        };
        for i in 0..count {
            let _ = devices::add_device(i as i32);
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
        devices::remove_all();
        // Stops the parked worker threads and the reaper, which runs on the release queue.
        worker_cache::close();
        // Runs the teardowns still queued before the module's code goes away.
        release::close();
    }
}
