// SPDX-License-Identifier: GPL-2.0

//! A bound device's hardware queues: each one's worker thread, request counter and load
//! ([`super::super::dispatch::LoadTracker`]), in a [`DataPathCell`] that binding and unbinding replace;
//! the request path reads them through `LoopDevice::in_flight`.

use super::*;

/// A hardware queue's worker thread, and its requests as the submission policy counts them.
pub(crate) struct HwQueue {
    /// Runs the commands of this hardware queue that `queue_rq` does not complete itself.
    pub(crate) worker: KthreadWorker,
    /// The requests started here and the pattern of those in flight
    /// ([`super::super::dispatch::SubmissionPolicy::route`]).
    pub(crate) load: LoadTracker,
}

/// The device's hardware queues: empty while the device is unbound; one entry per hardware
/// queue while it is bound (started by `configure`, stopped by `unbind`: an idle device costs no
/// thread, as with loop.c, whose workqueue exists only while bound). Replaced with the device
/// mutex held.
pub(super) struct HwQueues(pub(super) DataPathCell<KVec<HwQueue>>);

impl HwQueues {
    /// Starts `count` (at least one) workers; queue K's request counter starts at
    /// `requests[K]` (0 past its end). Takes the threads that unbinding parked
    /// ([`super::super::worker_cache`]) where there are any. May sleep.
    pub(super) fn start(count: u32, requests: &[u64]) -> Result<KVec<HwQueue>> {
        let count = count.max(1);
        let mut queues = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for q in 0..count as usize {
            let queue = HwQueue {
                worker: super::super::worker_cache::take_or_start()?,
                load: LoadTracker::new(requests.get(q).copied().unwrap_or(0)),
            };
            queues.push(queue, GFP_KERNEL)?;
        }
        Ok(queues)
    }

    /// Parks the workers of `queues` for the next binding ([`super::super::worker_cache`]), which
    /// stops them if nobody takes them in time.
    pub(super) fn park(queues: KVec<HwQueue>) {
        for HwQueue { worker, .. } in queues {
            super::super::worker_cache::park(worker);
        }
    }

    pub(super) fn replace(
        &self,
        _cfg: &Config,
        idle: &DataPathIdle<'_>,
        new: KVec<HwQueue>,
    ) -> KVec<HwQueue> {
        self.0.replace(idle, new)
    }

    /// The hardware queues, read under the device mutex (`_cfg` is its guarded data).
    pub(super) fn all<'a>(&'a self, _cfg: &'a Config) -> &'a [HwQueue] {
        // SAFETY: The device mutex, which writers hold, is held for `'a`.
        unsafe { self.0.get() }
    }

    /// Whether any hardware queue has requests in flight, read under the device mutex.
    pub(super) fn any_busy(&self, cfg: &Config) -> bool {
        self.all(cfg).iter().any(|q| q.load.inflight() > 0)
    }
}

/// The queue of a request of `queues` (`hw_queue` wraps around the queues there are).
pub(super) fn pick(queues: &[HwQueue], hw_queue: u32) -> Option<&HwQueue> {
    let k = hw_queue as usize;
    queues
        .get(k)
        .or_else(|| queues.get(k.checked_rem(queues.len())?))
}

/// Whether the hardware queue after `hw_queue` (wrapping around), if it is another, has
/// requests in flight: one look at one neighbour, whatever the number of queues.
pub(super) fn next_busy(queues: &[HwQueue], hw_queue: u32) -> bool {
    let n = queues.len();
    n > 1
        && queues
            .get((hw_queue as usize + 1) % n)
            .is_some_and(|q| q.load.inflight() > 0)
}

/// The request path's and sysfs' views of the hardware queues.
impl LoopDevice {
    /// The hardware queue `rq` was dispatched on (present while the device is bound).
    pub(crate) fn hw_queue_of<'r>(&'r self, rq: &'r Request<LoopDisk>) -> Option<&'r HwQueue> {
        pick(self.in_flight(rq)?.1, rq.hw_queue())
    }

    /// The counters of hardware queue `hw_queue`.
    pub(crate) fn queue_counts(&self, hw_queue: u32) -> &PerQueue {
        self.per_queue.of(hw_queue as usize)
    }

    /// Whether the hardware queue after `rq`'s has requests in flight (for a flush: it races
    /// them).
    pub(crate) fn next_queue_busy(&self, rq: &Request<LoopDisk>) -> bool {
        self.in_flight(rq)
            .is_some_and(|(_, queues)| next_busy(queues, rq.hw_queue()))
    }

    /// The worker that runs `rq` for the root cgroup: that of its hardware queue, or a
    /// sibling's when that one has requests waiting
    /// ([`super::super::dispatch::spread_worker`]).
    #[inline]
    pub(crate) fn hw_queue_worker<'r>(
        &'r self,
        rq: &'r Request<LoopDisk>,
    ) -> Option<&'r KthreadWorker> {
        let (io, queues) = self.in_flight(rq)?;
        let hw_queue = rq.hw_queue();
        let may_spread = || {
            io.is_some_and(|io| io.direct_io)
                && online_cpus() >= super::super::dispatch::SPREAD_MIN_CPUS
        };
        super::super::dispatch::spread_worker(
            &self.queue_counts(hw_queue).stats,
            queues,
            hw_queue as usize,
            |q| &q.worker,
            may_spread,
        )
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
        f(&mut queues.iter().map(|q| q.load.started()))
    }

    /// Calls `f` with the process IDs of the hardware queues' worker threads, in queue order
    /// (none while the device is unbound).
    pub(crate) fn worker_pids<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = i32>) -> R) -> R {
        let cfg = self.cfg.lock();
        f(&mut self.hw_queues.all(&cfg).iter().map(|q| q.worker.pid()))
    }
}
