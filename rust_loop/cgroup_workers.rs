// SPDX-License-Identifier: GPL-2.0

//! The per-blkcg worker threads of a device (loop.c's `struct loop_worker`), bounded by the
//! `max_cgroup_workers` module parameter.

use super::sys::{now_ns, Blkcg, IoCgroups, KthreadWorker};
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use kernel::{
    prelude::*,
    str::CString,
    sync::{Arc, SpinLock},
};

/// A worker thread for the commands of one blkcg (loop.c's `struct loop_worker`): a command
/// whose issuer is throttled blocks its worker, and must not hold up other cgroups' commands.
pub(crate) struct CgroupWorker {
    /// The blkcg whose commands this worker runs.
    blkcg: Blkcg,
    /// The thread.
    pub(crate) worker: KthreadWorker,
    /// Commands given to this worker and not yet finished; only incremented under the list lock
    /// of [`CgroupWorkers`], decremented by [`CgroupWorkerUse`] as the very last thing a command
    /// does with the worker.
    users: AtomicU32,
    /// `ktime_get()` when a command last picked the worker.
    last_used: AtomicI64,
}

/// A command's claim on a [`CgroupWorker`]: keeps the worker from being reaped until dropped.
///
/// # Invariants
///
/// `worker` points to a worker in a [`CgroupWorkers`] list whose `users` count includes this
/// claim; the list keeps it alive while the count is not zero.
pub(crate) struct CgroupWorkerUse {
    worker: *const CgroupWorker,
}

// SAFETY: The claim is a counted reference usable from any thread.
unsafe impl Send for CgroupWorkerUse {}

impl CgroupWorkerUse {
    /// The claimed worker.
    pub(crate) fn get(&self) -> &CgroupWorker {
        // SAFETY: Alive while the claim exists (type invariant).
        unsafe { &*self.worker }
    }
}

impl Drop for CgroupWorkerUse {
    fn drop(&mut self) {
        // The last access: once the count may be zero, the worker may be reaped (which waits
        // for its thread, possibly the current one, to return from the command first).
        self.get().users.fetch_sub(1, Ordering::Release);
    }
}

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
    list: SpinLock<KVec<Arc<CgroupWorker>>>,
}

impl CgroupWorkers {
    /// An empty set for `loop<number>`, of at most `max` workers.
    pub(crate) fn new(number: u32, max: usize) -> impl PinInit<Self> {
        pin_init!(Self {
            number,
            max,
            list <- kernel::new_spinlock!(KVec::new()),
        })
    }

    /// A claim on the worker for `cgroups`' blkcg, starting it if needed and allowed
    /// (`may_sleep`). `None`: the command runs on its hardware queue's worker (root cgroup, or
    /// no worker available without sleeping or memory).
    pub(crate) fn get(&self, cgroups: &IoCgroups, may_sleep: bool) -> Option<CgroupWorkerUse> {
        if let Some(claim) = self.find(cgroups) {
            return Some(claim);
        }
        if !may_sleep {
            return None;
        }
        let blkcg = cgroups.blkcg()?;
        self.reap_idle();
        let max = self.max;
        if self.list.lock().len() >= max {
            return None;
        }
        let name = CString::try_from_fmt(fmt!("loop{}-cg", self.number)).ok()?;
        let worker = KthreadWorker::new(&name).ok()?;
        let new = Arc::new(
            CgroupWorker {
                blkcg,
                worker,
                users: AtomicU32::new(0),
                last_used: AtomicI64::new(now_ns()),
            },
            GFP_KERNEL,
        )
        .ok()?;
        let mut list = self.list.lock();
        // Another command of the same cgroup may have started one meanwhile: use that, and
        // stop ours once the lock is dropped.
        if let Some(claim) = Self::claim(&list, cgroups) {
            drop(list);
            drop(new);
            return Some(claim);
        }
        if list.len() >= max {
            // Others took the last places meanwhile.
            drop(list);
            return None;
        }
        if list.push(new.clone(), GFP_NOWAIT).is_err() {
            drop(list);
            return None;
        }
        Self::claim(&list, cgroups)
    }

    fn find(&self, cgroups: &IoCgroups) -> Option<CgroupWorkerUse> {
        Self::claim(&self.list.lock(), cgroups)
    }

    /// Claims the worker of `cgroups`' blkcg in `list` (whose lock the caller holds).
    fn claim(list: &KVec<Arc<CgroupWorker>>, cgroups: &IoCgroups) -> Option<CgroupWorkerUse> {
        let w = list.iter().find(|w| cgroups.is_in(&w.blkcg))?;
        w.users.fetch_add(1, Ordering::Relaxed);
        w.last_used.store(now_ns(), Ordering::Relaxed);
        // INVARIANT: the count includes this claim; the list holds the worker.
        Some(CgroupWorkerUse {
            worker: &raw const **w,
        })
    }

    /// Removes one worker that `unused` selects and that no command holds.
    fn take_one(&self, unused: impl Fn(&CgroupWorker) -> bool) -> Option<Arc<CgroupWorker>> {
        let mut list = self.list.lock();
        let i = list
            .iter()
            .position(|w| w.users.load(Ordering::Acquire) == 0 && unused(w))?;
        list.remove(i).ok()
    }

    /// Stops the workers that have been idle for a minute. May sleep.
    fn reap_idle(&self) {
        let now = now_ns();
        // Each is dropped (its thread stopped) outside the lock.
        while let Some(w) = self.take_one(|w| now - w.last_used.load(Ordering::Relaxed) > IDLE_NS) {
            drop(w);
        }
    }

    /// Stops every worker no command holds (all of them once the device's queue is drained).
    /// May sleep.
    pub(crate) fn stop_all(&self) {
        while let Some(w) = self.take_one(|_| true) {
            drop(w);
        }
    }
}
