// SPDX-License-Identifier: GPL-2.0

//! cgroup attribution of the I/O the worker does for a command.
//!
//! A command that `queue_rq` hands to a worker thread would otherwise be charged to the worker
//! (the root cgroup): its block I/O would escape the issuer's `io.max`, and the backing file's
//! page cache its `memory.max`. As loop.c, the command records the blkcg of its first bio and
//! that cgroup's memory cgroup ([`IoCgroups::of`]); the worker runs it inside
//! [`IoCgroups::enter`] (`kthread_associate_blkcg`, `set_active_memcg`). Direct I/O submitted
//! from `queue_rq` itself is charged to the current task, so `queue_rq` only does that when
//! the current task is in the issuer's blkcg ([`issued_here`]).
//!
//! C header: [`include/linux/blk-cgroup.h`](srctree/include/linux/blk-cgroup.h).

use crate::{blk::Request, worker::KthreadWorker};
use core::{
    ffi::c_void,
    ptr::null_mut,
    sync::atomic::{AtomicI64, AtomicU32, Ordering},
};
use kernel::{
    bindings,
    prelude::*,
    str::CString,
    sync::{Arc, SpinLock},
};

/// A `struct cgroup_subsys_state *`, opaque here (passed as `void *`: the C structures involved
/// contain zero-sized members, which are not FFI-safe in Rust's view).
type Css = c_void;

extern "C" {
    // rust_loop/helpers.c: static inline functions and `task_struct` fields.
    fn rust_loop_rq_cgroups(rq: *mut c_void, blkcg: *mut *mut Css, memcg: *mut *mut Css);
    fn rust_loop_cgroups_enter(blkcg: *mut Css, memcg: *mut Css) -> *mut c_void;
    fn rust_loop_cgroups_leave(blkcg: *mut Css, memcg: *mut Css, old: *mut c_void);
    fn rust_loop_css_put(css: *mut Css);
    fn rust_loop_rq_issued_here(rq: *mut c_void) -> bool;
    fn rust_loop_css_is_root(css: *mut Css) -> bool;
    fn rust_loop_css_get(css: *mut Css);
}

/// Whether I/O submitted by the current task is charged to the same blkcg as `rq`'s issuer
/// (then `queue_rq` may submit the request itself; otherwise the worker must, inside
/// [`IoCgroups::enter`]).
pub(crate) fn issued_here(rq: &Request) -> bool {
    // SAFETY: The request is in flight; the helper reads its first bio and the current task's
    // cgroup under RCU.
    unsafe { rust_loop_rq_issued_here(rq.as_raw().cast()) }
}

/// The cgroups a command's I/O is charged to (loop.c's `blkcg_css` and `memcg_css`).
///
/// # Invariants
///
/// `blkcg` is null or the blkcg of the command's first bio, which holds it until the request
/// ends (and the value is only used while the request is in flight); `memcg` is null or a
/// memory cgroup css this value holds a reference on.
pub(crate) struct IoCgroups {
    blkcg: *mut Css,
    memcg: *mut Css,
}

// SAFETY: css references may be used and dropped on any thread.
unsafe impl Send for IoCgroups {}

impl IoCgroups {
    /// The cgroups of the request's issuer (its first bio); none for the root blkcg, which the
    /// workers are charged to already.
    pub(crate) fn of(rq: &Request) -> Self {
        let mut blkcg = null_mut();
        let mut memcg = null_mut();
        // SAFETY: The request is in flight (type invariant of `Request`); the helper only reads
        // its first bio and takes a reference on the memory cgroup it returns.
        unsafe { rust_loop_rq_cgroups(rq.as_raw().cast(), &mut blkcg, &mut memcg) };
        // INVARIANT: as returned by the helper.
        Self { blkcg, memcg }
    }

    /// Charges what the current kernel thread does to these cgroups until the scope drops.
    /// Must be called on a `kthread` (a worker), not in a user task's context.
    pub(crate) fn enter(self) -> CgroupScope {
        // SAFETY: The css pointers are valid (type invariant); the current task is a kthread.
        let old = unsafe { rust_loop_cgroups_enter(self.blkcg, self.memcg) };
        CgroupScope { cgroups: self, old }
    }
}

impl Drop for IoCgroups {
    fn drop(&mut self) {
        if !self.memcg.is_null() {
            // SAFETY: The reference was taken in `of` (type invariant) and is dropped once.
            unsafe { rust_loop_css_put(self.memcg) };
        }
    }
}

/// While alive, the current kernel thread's I/O and allocations are charged to [`IoCgroups`].
pub(crate) struct CgroupScope {
    cgroups: IoCgroups,
    old: *mut c_void,
}

impl Drop for CgroupScope {
    fn drop(&mut self) {
        // SAFETY: Undoes `enter` on the same thread, restoring the memory cgroup it replaced;
        // the css references are still held by `self.cgroups`, dropped after this.
        unsafe { rust_loop_cgroups_leave(self.cgroups.blkcg, self.cgroups.memcg, self.old) };
    }
}

/// A worker thread for the commands of one blkcg (loop.c's `struct loop_worker`): a command
/// whose issuer is throttled blocks its worker, and must not hold up other cgroups' commands.
///
/// # Invariants
///
/// `blkcg` is a css this value holds a reference on.
pub(crate) struct CgroupWorker {
    blkcg: *mut Css,
    /// The thread.
    pub(crate) worker: KthreadWorker,
    /// Commands given to this worker and not yet finished; only incremented under the list lock
    /// of [`CgroupWorkers`], decremented by [`CgroupWorkerUse`] as the very last thing a command
    /// does with the worker.
    users: AtomicU32,
    /// `ktime_get()` when a command last picked the worker.
    last_used: AtomicI64,
}

// SAFETY: css references and kthread workers may be used from any thread.
unsafe impl Send for CgroupWorker {}
// SAFETY: As above; the counters are atomics.
unsafe impl Sync for CgroupWorker {}

impl Drop for CgroupWorker {
    fn drop(&mut self) {
        // SAFETY: The reference was taken in `CgroupWorkers::get` (type invariant).
        unsafe { rust_loop_css_put(self.blkcg) };
    }
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

fn now_ns() -> i64 {
    // SAFETY: `ktime_get` may be called from any context but NMI.
    unsafe { bindings::ktime_get() }
}

/// The per-blkcg workers of a device. Commands of the root cgroup (or of no cgroup) run on
/// the worker of their hardware queue; others on the worker of their blkcg, started on first
/// use and stopped after a minute without commands, or when the device is cleared. At most
/// `max_cgroup_workers` (module parameter) run per device: the commands of further cgroups run
/// on their hardware queue's worker, still inside [`IoCgroups::enter`].
#[pin_data]
pub(crate) struct CgroupWorkers {
    /// `N` of `loopN`, for the thread names.
    number: u32,
    #[pin]
    list: SpinLock<KVec<Arc<CgroupWorker>>>,
}

impl CgroupWorkers {
    /// An empty set for `loop<number>`.
    pub(crate) fn new(number: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            number,
            list <- kernel::new_spinlock!(KVec::new()),
        })
    }

    /// A claim on the worker for `cgroups`' blkcg, starting it if needed and allowed
    /// (`may_sleep`). `None`: the command runs on its hardware queue's worker (root cgroup, or
    /// no worker available without sleeping or memory).
    pub(crate) fn get(&self, cgroups: &IoCgroups, may_sleep: bool) -> Option<CgroupWorkerUse> {
        let css = cgroups.blkcg;
        // SAFETY: `css` is null or a live blkcg css (type invariant of `IoCgroups`).
        if css.is_null() || unsafe { rust_loop_css_is_root(css) } {
            return None;
        }
        if let Some(claim) = self.find(css) {
            return Some(claim);
        }
        if !may_sleep {
            return None;
        }
        self.reap_idle();
        let max = crate::max_cgroup_workers();
        if self.list.lock().len() >= max {
            return None;
        }
        let name = CString::try_from_fmt(fmt!("loop{}-cg", self.number)).ok()?;
        let worker = KthreadWorker::new(&name).ok()?;
        // SAFETY: `css` is live (see above); the new worker holds its own reference.
        unsafe { rust_loop_css_get(css) };
        // INVARIANT: the reference was just taken.
        let new = Arc::new(
            CgroupWorker {
                blkcg: css,
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
        if let Some(claim) = Self::claim(&list, css) {
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
        Self::claim(&list, css)
    }

    fn find(&self, css: *mut Css) -> Option<CgroupWorkerUse> {
        Self::claim(&self.list.lock(), css)
    }

    /// Claims the worker of `css` in `list` (whose lock the caller holds).
    fn claim(list: &KVec<Arc<CgroupWorker>>, css: *mut Css) -> Option<CgroupWorkerUse> {
        let w = list.iter().find(|w| w.blkcg == css)?;
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
