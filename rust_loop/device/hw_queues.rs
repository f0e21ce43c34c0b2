// SPDX-License-Identifier: GPL-2.0

//! A bound device's hardware queues: each one's worker thread, request counter and load
//! ([`super::super::dispatch::LoadTracker`]), in a [`DataPathCell`] that binding and unbinding replace.

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

    /// The queue of a request in flight (`hw_queue` wraps around the queues there are).
    ///
    /// # Safety
    ///
    /// The caller must be handling a request of the device that `queue_rq` found bound, or
    /// hold the device mutex.
    pub(super) unsafe fn get(&self, hw_queue: u32) -> Option<&HwQueue> {
        // SAFETY: Forwarded from the caller.
        let queues: &[HwQueue] = unsafe { self.0.get() };
        match queues.len() {
            0 => None,
            n => queues.get(hw_queue as usize % n),
        }
    }

    /// Whether a hardware queue other than `hw_queue` (wrapping around) has requests in
    /// flight.
    ///
    /// # Safety
    ///
    /// As [`Self::get`].
    pub(super) unsafe fn others_busy(&self, hw_queue: u32) -> bool {
        // SAFETY: Forwarded from the caller.
        let queues: &[HwQueue] = unsafe { self.0.get() };
        match queues.len() {
            0 | 1 => false,
            n => {
                let own = hw_queue as usize % n;
                queues
                    .iter()
                    .enumerate()
                    .any(|(i, q)| i != own && q.load.inflight() > 0)
            }
        }
    }

    /// The worker for a request in flight of hardware queue `hw_queue`
    /// ([`super::super::dispatch::spread_worker`]).
    ///
    /// # Safety
    ///
    /// As [`Self::get`].
    pub(super) unsafe fn worker_for<'a>(
        &'a self,
        stats: &DevStats,
        hw_queue: u32,
        may_spread: impl FnOnce() -> bool,
    ) -> Option<&'a KthreadWorker> {
        // SAFETY: Forwarded from the caller.
        let queues: &[HwQueue] = unsafe { self.0.get() };
        super::super::dispatch::spread_worker(
            stats,
            queues,
            hw_queue as usize,
            |q| &q.worker,
            may_spread,
        )
    }
}
