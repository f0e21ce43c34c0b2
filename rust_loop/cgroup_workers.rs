// SPDX-License-Identifier: GPL-2.0

//! The per-blkcg worker threads of a device (loop.c's `struct loop_worker`), bounded by the
//! `max_cgroup_workers` module parameter.

use super::sys::{now_ns, Blkcg, ClaimList, IoCgroups, KthreadWorker, ListClaim};
use core::sync::atomic::{AtomicI64, Ordering};
use kernel::{prelude::*, str::CString};

/// A worker thread for the commands of one blkcg (loop.c's `struct loop_worker`): a command
/// whose issuer is throttled blocks its worker, and must not hold up other cgroups' commands.
pub(crate) struct CgroupWorker {
    /// The blkcg whose commands this worker runs.
    blkcg: Blkcg,
    /// The thread.
    pub(crate) worker: KthreadWorker,
    /// `ktime_get()` when a command last picked the worker.
    last_used: AtomicI64,
}

/// A command's claim on a [`CgroupWorker`]: keeps the worker from being reaped until dropped,
/// the very last thing the command does with the worker.
pub(crate) type CgroupWorkerUse = ListClaim<CgroupWorker>;

/// Workers idle this long are stopped (loop.c's `LOOP_IDLE_WORKER_TIMEOUT`).
const IDLE_NS: i64 = 60 * 1_000_000_000;

/// The per-blkcg workers of a device. Commands of the root cgroup (or of no cgroup) run on
/// the worker of their hardware queue; others on the worker of their blkcg, started on first
/// use and stopped after a minute without commands, or when the device is cleared. At most
/// `max_cgroup_workers` (module parameter) run per device: the commands of further cgroups run
/// on their hardware queue's worker, still inside [`IoCgroups::enter`].
#[pin_data]
pub(crate) struct CgroupWorkers {
    /// `N` of `loopN`, for the thread names.
    number: u32,
    /// Most workers at once (`max_cgroup_workers`).
    max: usize,
    #[pin]
    list: ClaimList<CgroupWorker>,
}

impl CgroupWorkers {
    /// An empty set for `loop<number>`, of at most `max` workers.
    pub(crate) fn new(number: u32, max: usize) -> impl PinInit<Self> {
        pin_init!(Self {
            number,
            max,
            list <- ClaimList::new(),
        })
    }

    /// A claim on the worker for `cgroups`' blkcg, starting it if needed and allowed
    /// (`may_sleep`). `None`: the command runs on its hardware queue's worker (root cgroup, or
    /// no worker available without sleeping or memory).
    pub(crate) fn get(&self, cgroups: &IoCgroups, may_sleep: bool) -> Option<CgroupWorkerUse> {
        let of_cgroup = |w: &CgroupWorker| cgroups.is_in(&w.blkcg);
        if let Some(claim) = self.list.claim(of_cgroup) {
            return Some(Self::used(claim));
        }
        if !may_sleep {
            return None;
        }
        let blkcg = cgroups.blkcg()?;
        self.reap_idle();
        if self.list.len() >= self.max {
            return None;
        }
        let name = CString::try_from_fmt(fmt!("loop{}-cg", self.number)).ok()?;
        let new = CgroupWorker {
            blkcg,
            worker: KthreadWorker::new(&name).ok()?,
            last_used: AtomicI64::new(now_ns()),
        };
        // Another command of the same cgroup may have started one meanwhile: that one is
        // used, and ours stopped (dropped here, outside the list's lock).
        let (claim, unused) = self.list.claim_or_add(of_cgroup, new, self.max);
        drop(unused);
        claim.map(Self::used)
    }

    /// Marks the claimed worker as used now.
    fn used(claim: CgroupWorkerUse) -> CgroupWorkerUse {
        claim.last_used.store(now_ns(), Ordering::Relaxed);
        claim
    }

    /// Stops the workers that have been idle for a minute. May sleep.
    fn reap_idle(&self) {
        let now = now_ns();
        let idle = |w: &CgroupWorker| now - w.last_used.load(Ordering::Relaxed) > IDLE_NS;
        // Each is dropped (its thread stopped) outside the lock.
        while let Some(w) = self.list.take_unclaimed(idle) {
            drop(w);
        }
    }

    /// Stops every worker no command holds (all of them once the device's queue is drained).
    /// May sleep.
    pub(crate) fn stop_all(&self) {
        while let Some(w) = self.list.take_unclaimed(|_| true) {
            drop(w);
        }
    }
}
