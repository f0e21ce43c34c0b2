// SPDX-License-Identifier: GPL-2.0

//! The hardware queues' worker threads: started by binding, kept for a moment after unbinding
//! for the next binding of any device.
//!
//! A bound device's hardware queues run on kernel threads of their own, so that an unbound
//! device costs no thread. Starting one is the largest part of `LOOP_CONFIGURE` (kthreadd
//! creates threads one at a time; BENCHMARKS.md "Lifecycle" has the cost), and tools bind again soon after unbinding: `losetup -f` and
//! `LOOP_CTL_GET_FREE` take the lowest free number, container and snap managers attach images
//! to numbers never used before, test rigs detach and attach in a loop. So unbinding parks the
//! threads here and the next binding, of whichever device and queue, takes them back. A thread
//! therefore does not carry its device's name, as loop.c's workqueue workers do not: it is
//! `rust_loop/K` (`K` counts the threads started since load), and `rust_loop/worker_pids` in a
//! device's sysfs directory names the threads of its hardware queues. Threads nobody takes are
//! stopped `worker_linger_ms` (module parameter; 0: at unbinding) to twice that after parking,
//! by the reaper, a delayed work item on the module's release queue.

use super::sys::{self, now_ns, KthreadWorker};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    prelude::*,
    str::CString,
    sync::Arc,
    time::msecs_to_jiffies,
    workqueue::{impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem},
};

/// Most threads parked at once; past it, unbinding stops its threads at once.
const MAX_PARKED: usize = 64;

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init` before any device exists.
    /// The parked threads, and the reaper while the module is live.
    pub(crate) unsafe(uninit) static PARKED: Mutex<Parked> = Parked {
        workers: KVec::new(),
        reaper: None,
        linger_ms: 0,
    };
}

/// The threads parked by unbinding devices ([`PARKED`]).
pub(crate) struct Parked {
    workers: KVec<ParkedWorker>,
    /// `None` before [`open`] and after [`close`]: nothing is parked then.
    reaper: Option<Arc<Reaper>>,
    /// How long a parked thread waits for a binding (`worker_linger_ms`; 0: not parked).
    linger_ms: u32,
}

/// The threads started so far, for the next one's name.
static STARTED: AtomicU32 = AtomicU32::new(0);

/// A hardware queue's thread, idle since its device's unbinding.
struct ParkedWorker {
    worker: KthreadWorker,
    /// When it was parked (`ktime_get`, ns).
    since: i64,
}

/// Stops the threads parked for longer than `worker_linger_ms`.
#[pin_data]
pub(crate) struct Reaper {
    #[pin]
    work: DelayedWork<Reaper>,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for Reaper { self.work }
}

impl WorkItem for Reaper {
    type Pointer = Arc<Reaper>;

    fn run(this: Arc<Reaper>) {
        loop {
            // One at a time, so that no thread is stopped under the lock (`kthread_stop` waits
            // for the thread's exit): at most `MAX_PARKED` rounds.
            let (expired, next_due, live) = {
                let mut parked = PARKED.lock();
                let now = now_ns();
                let live = parked.reaper.is_some();
                let linger = i64::from(parked.linger_ms) * 1_000_000;
                match parked
                    .workers
                    .iter()
                    .position(|w| !live || now - w.since >= linger)
                {
                    Some(i) => (parked.workers.remove(i).ok(), None, live),
                    None => (
                        None,
                        parked.workers.iter().map(|w| w.since + linger - now).min(),
                        live,
                    ),
                }
            };
            match expired {
                Some(parked) => drop(parked),
                None => {
                    if let (Some(due), true) = (next_due, live) {
                        arm(this, due);
                    }
                    return;
                }
            }
        }
    }
}

/// Queues the reaper to run `ns` nanoseconds from now (at least one jiffy). Does nothing if it
/// is queued already: it then runs earlier, and arms itself again for what remains.
fn arm(reaper: Arc<Reaper>, ns: i64) {
    let ms = u32::try_from(ns.max(0) / 1_000_000 + 1).unwrap_or(u32::MAX);
    super::release::on_release_queue(move |queue| {
        // `Err` when it is queued already: the queued run covers this thread too.
        let _ = queue.enqueue_delayed(reaper, msecs_to_jiffies(ms));
    });
}

/// Allocates the reaper for [`open`].
pub(crate) fn new_reaper() -> Result<Arc<Reaper>> {
    Arc::pin_init(
        pin_init!(Reaper {
            work <- new_delayed_work!("rust_loop::worker_cache::Reaper"),
        }),
        GFP_KERNEL,
    )
}

/// Starts parking threads for `linger_ms` milliseconds (0: none are parked), with `reaper` to
/// stop them (after [`PARKED`] is initialised).
pub(crate) fn open(reaper: Arc<Reaper>, linger_ms: u32) {
    let mut parked = PARKED.lock();
    parked.reaper = Some(reaper);
    parked.linger_ms = linger_ms;
}

/// Stops every parked thread and the reaper; threads are no longer parked. Module exit calls it
/// before it drains the release queue, on which the reaper runs.
pub(crate) fn close() {
    let reaper = PARKED.lock().reaper.take();
    loop {
        let parked = PARKED.lock().workers.pop();
        match parked {
            Some(parked) => drop(parked),
            None => break,
        }
    }
    // Empty now; its buffer is freed with it (the static outlives the module: kmemleak on the
    // debug kernel).
    drop(core::mem::take(&mut PARKED.lock().workers));
    if let Some(reaper) = reaper {
        // A queued run finds nothing parked and does not arm itself again.
        sys::flush_delayed_work(&reaper.work);
    }
}

/// A worker thread for a hardware queue: the one parked last, or else a new one (`rust_loop/K`).
/// May sleep.
pub(crate) fn take_or_start() -> Result<KthreadWorker> {
    if let Some(parked) = PARKED.lock().workers.pop() {
        // The most recently parked: its stack and task are the likeliest to be cache-hot, and
        // the others keep their place in the reaper's order.
        return Ok(parked.worker);
    }
    let k = STARTED.fetch_add(1, Ordering::Relaxed);
    KthreadWorker::new(&CString::try_from_fmt(fmt!("rust_loop/{}", k))?)
}

/// Parks `worker`, the idle thread of a hardware queue of an unbound device, for the next
/// binding; or stops it on the release queue when the cache is off, full or closed.
pub(crate) fn park(worker: KthreadWorker) {
    let (reaper, linger) = {
        let mut parked = PARKED.lock();
        let linger = parked.linger_ms;
        let room = linger > 0 && parked.workers.len() < MAX_PARKED;
        let Some(reaper) = parked.reaper.as_ref().filter(|_| room).cloned() else {
            drop(parked);
            super::release::drop_later(worker);
            return;
        };
        let entry = ParkedWorker {
            worker,
            since: now_ns(),
        };
        // On failure the entry, and with it the thread, is dropped (stopped) here.
        if parked.workers.push(entry, GFP_KERNEL).is_err() {
            return;
        }
        (reaper, linger)
    };
    arm(reaper, i64::from(linger) * 1_000_000);
}
