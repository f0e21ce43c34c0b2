// SPDX-License-Identifier: GPL-2.0

//! Worker threads kept for a moment after their device's unbinding, for its next binding.
//!
//! A device's hardware queues run on kernel threads of their own (`loopN`, `loopN-K`), started
//! by binding and stopped after unbinding, so that an unbound device costs no thread. Starting
//! them is the largest part of `LOOP_CONFIGURE` (kthreadd creates threads one at a time: 25-30 ms
//! p50 under TCG with 8 tasks binding at once, BENCHMARKS.md "Lifecycle"), and tools bind the
//! same number again soon after unbinding it: `losetup -f` and `LOOP_CTL_GET_FREE` take the
//! lowest free number, test rigs detach and attach in a loop. So unbinding parks the threads here
//! and a binding of the same device number takes them back; the number and queue index must
//! match, so a thread always carries the name of the device it serves. Threads nobody takes are
//! stopped `worker_linger_ms` (module parameter; 0: at unbinding) to twice that after parking,
//! by the reaper, a delayed work item on the module's release queue.

use crate::sys::{self, now_ns, KthreadWorker};
use kernel::{
    prelude::*,
    sync::Arc,
    time::msecs_to_jiffies,
    workqueue::{impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem},
};

/// Most threads parked at once; past it, unbinding stops its threads at once.
const MAX_PARKED: usize = 64;

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init` before any device exists.
    /// The parked threads, and the reaper while the module is live.
    unsafe(uninit) static PARKED: Mutex<Parked> = Parked {
        workers: KVec::new(),
        reaper: None,
    };
}

/// The threads parked by unbinding devices ([`PARKED`]).
pub(crate) struct Parked {
    workers: KVec<ParkedWorker>,
    /// `None` before [`open`] and after [`close`]: nothing is parked then.
    reaper: Option<Arc<Reaper>>,
}

/// A hardware queue's thread of an unbound device.
struct ParkedWorker {
    /// The device number (`loopN`) and hardware queue the thread is named after.
    number: u32,
    queue: u32,
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
        let linger = i64::from(crate::worker_linger_ms()) * 1_000_000;
        loop {
            // One at a time, so that no thread is stopped under the lock (`kthread_stop` waits
            // for the thread's exit): at most `MAX_PARKED` rounds.
            let (expired, next_due, live) = {
                let mut parked = PARKED.lock();
                let now = now_ns();
                let live = parked.reaper.is_some();
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
    crate::on_release_queue(move |queue| {
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

/// Initialises the cache; threads are parked from then on. Called once, at module load, before
/// any device exists.
///
/// # Safety
///
/// Must be called once, before any other function of this module.
pub(crate) unsafe fn init() {
    // SAFETY: Called once, before any use (the caller's contract).
    unsafe { PARKED.init() };
}

/// Starts parking threads, with `reaper` to stop them (after [`init`]).
pub(crate) fn open(reaper: Arc<Reaper>) {
    PARKED.lock().reaper = Some(reaper);
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

/// Takes the parked thread of hardware queue `queue` of `loop<number>`, if there is one.
pub(crate) fn take(number: u32, queue: u32) -> Option<KthreadWorker> {
    let mut parked = PARKED.lock();
    let i = parked
        .workers
        .iter()
        .position(|w| w.number == number && w.queue == queue)?;
    parked.workers.remove(i).ok().map(|w| w.worker)
}

/// Parks `worker`, the idle thread of hardware queue `queue` of `loop<number>`, for the device's
/// next binding; or stops it on the release queue when the cache is off, full or closed.
pub(crate) fn park(number: u32, queue: u32, worker: KthreadWorker) {
    let linger = crate::worker_linger_ms();
    let reaper = {
        let mut parked = PARKED.lock();
        let room = linger > 0 && parked.workers.len() < MAX_PARKED;
        let Some(reaper) = parked.reaper.as_ref().filter(|_| room).cloned() else {
            drop(parked);
            crate::drop_later(worker);
            return;
        };
        let entry = ParkedWorker {
            number,
            queue,
            worker,
            since: now_ns(),
        };
        // On failure the entry, and with it the thread, is dropped (stopped) here.
        if parked.workers.push(entry, GFP_KERNEL).is_err() {
            return;
        }
        reaper
    };
    arm(reaper, i64::from(linger) * 1_000_000);
}
