// SPDX-License-Identifier: GPL-2.0

//! The counters of a loop device, for diagnosis: one debugfs file each in
//! `/sys/kernel/debug/rust_loop/loopN/` (docs/counters.md; `tests/scripts/sysfs-names.sh` checks
//! that its tables list exactly these). The request path counts in the [`QueueStats`]
//! of the request's hardware queue ([`PerQueue`]: cache lines of its own, relaxed increments, no
//! line another queue writes); the control path counts in the device's [`DevStats`]; a read sums
//! the queues. The `counters!` lists below are their one declaration.
//!
//! Among them are the ways a write ends that the crash tests require (docs/testing.md "Crash
//! consistency"). A flush counts only on its own queue (begun, ended, what it made durable); the
//! reconfiguring ioctl works out which flushes it overlapped ([`FlushWatch`]), off the I/O path.

use core::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;

/// A relaxed statistics counter.
pub(crate) trait Count {
    /// Adds one.
    fn inc(&self);
    /// Adds `n`.
    fn add(&self, n: u64);
    /// Takes one away (a gauge).
    fn dec(&self);
    /// The value.
    fn get(&self) -> u64;
}

impl Count for AtomicU64 {
    fn inc(&self) {
        self.fetch_add(1, Ordering::Relaxed);
    }

    fn add(&self, n: u64) {
        self.fetch_add(n, Ordering::Relaxed);
    }

    fn dec(&self) {
        self.fetch_sub(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

/// Declares a struct of counters and its [`QueueStats::NAMES`]-like table from one list: the
/// struct's doc and name, then each counter's doc and name (also its debugfs file).
macro_rules! counters {
    ($(#[doc = $sdoc:literal])+ $s:ident; $($(#[doc = $doc:literal])+ $name:ident: AtomicU64,)*) => {
        $(#[doc = $sdoc])+
        #[derive(Default)]
        pub(crate) struct $s {
            $($(#[doc = $doc])+ pub(crate) $name: AtomicU64,)*
        }

        impl $s {
            /// Every counter's name (its debugfs file), in declaration order.
            pub(crate) const NAMES: &'static [&'static CStr] =
                &[$(kernel::c_str!(stringify!($name)),)*];

            /// The counter with index `i` of [`Self::NAMES`].
            pub(crate) fn get(&self, i: usize) -> Option<u64> {
                [$(&self.$name),*].get(i).map(|c| c.get())
            }
        }
    };
}

counters! {
    /// The counters of one hardware queue, written by the request path.
    QueueStats;
    /// Requests completed by the NOWAIT path.
    nowait_completions: AtomicU64,
    /// NOWAIT attempts that fell back to the worker (refused with `-EAGAIN`, or `-EOPNOTSUPP`
    /// from a block device below without `REQ_NOWAIT`).
    nowait_eagain: AtomicU64,
    /// Commands run by the worker.
    worker_submissions: AtomicU64,
    /// Commands run by a per-cgroup worker ([`super::cgroup_workers`]), counted in
    /// `worker_submissions` too.
    cgroup_worker_submissions: AtomicU64,
    /// Commands given to the worker of the next hardware queue, their own queue's having
    /// some waiting (`dispatch::spread_worker`).
    worker_spread: AtomicU64,
    /// Requests completed on the stack that finished them.
    completions_here: AtomicU64,
    /// Requests completed through `blk_mq_complete_request`.
    completions_deferred: AtomicU64,
    /// Requests ended by the batch of the worker that finished them
    /// ([`super::sys::Backlog`]).
    completions_batched: AtomicU64,
    /// Flushes begun (`vfs_fsync` of the backing file).
    flushes: AtomicU64,
    /// Flushes begun while the next hardware queue (wrapping around) had requests in flight:
    /// a flush orders nothing across hardware queues.
    flushes_racing: AtomicU64,
    /// Discards done (a hole punched in the backing file).
    discards: AtomicU64,
    /// Write-zeroes done (`REQ_NOUNMAP` or not).
    write_zeroes: AtomicU64,
    /// Flushes that made durable a discard done before them on their hardware queue.
    flushes_after_discard: AtomicU64,
    /// Flushes that made durable a write-zeroes done before them on their hardware queue.
    flushes_after_write_zeroes: AtomicU64,
    /// Bytes read from the backing file.
    read_bytes: AtomicU64,
    /// Bytes written to the backing file.
    write_bytes: AtomicU64,
    /// NOWAIT skipped: `current->journal_info` was set.
    nowait_skip_journal: AtomicU64,
    /// NOWAIT submissions made inside the submitter's `submit_bio`, whose backing bios were sent
    /// at once instead of waiting on its `bio_list` ([`super::sys::UndeferredBios`]).
    nowait_undeferred: AtomicU64,
    /// NOWAIT skipped: not enough kernel stack left.
    nowait_skip_stack: AtomicU64,
    /// NOWAIT skipped: rq-qos policies on the queue.
    nowait_skip_rqqos: AtomicU64,
    /// NOWAIT skipped: dispatched outside the issuer's blkcg.
    nowait_skip_cgroup: AtomicU64,
    /// NOWAIT skipped: loop on loop, dispatched from a plug flush.
    nowait_skip_nested: AtomicU64,
    /// NOWAIT skipped: a write while blocking writes were queued in the worker.
    nowait_skip_writes: AtomicU64,
    /// NOWAIT skipped: a write that would first have to update the file's mtime/ctime.
    nowait_skip_cmtime: AtomicU64,
    /// NOWAIT skipped: a read that would first update the file's atime.
    nowait_skip_atime: AtomicU64,
    /// NOWAIT skipped: the block device below the backing file takes no `REQ_NOWAIT` bio.
    nowait_skip_bdev: AtomicU64,
    /// NOWAIT skipped: the submitter, or the submitters together, keep a deep queue on the
    /// hardware queue (see `dispatch::QueueLoad`), or the device's
    /// `nowait_max_depth` is 0.
    nowait_skip_depth: AtomicU64,
    /// Requests handed to the worker to find out whether their task keeps submitting meanwhile.
    nowait_probes: AtomicU64,
    /// `REQ_NOUNMAP` write-zeroes done with `FALLOC_FL_WRITE_ZEROES`.
    write_zeroes_offloaded: AtomicU64,
    /// Direct-I/O mode reads and writes done buffered for want of alignment.
    dio_fallbacks: AtomicU64,
    /// Commands queued to a worker and not yet started by it (a gauge).
    worker_queued: AtomicU64,
    /// Direct-I/O kiocbs submitted to the backing file and not yet completed (a gauge).
    backing_inflight: AtomicU64,
}

counters! {
    /// The counters of the device's control path (ioctls, opens).
    DevStats;
    /// Flushes in progress at some moment of a `LOOP_SET_STATUS` ([`FlushWatch`]).
    flushes_racing_set_status: AtomicU64,
    /// `LOOP_CHANGE_FD`s that found requests of the device in flight (a read-only device: no
    /// flush comes to it).
    change_fd_racing_io: AtomicU64,
    /// Flushes in progress at some moment of a `LOOP_CLR_FD`.
    flushes_racing_clr_fd: AtomicU64,
    /// Partition rescans dropped as redundant.
    partscan_skipped: AtomicU64,
}

/// A discard done since the last flush of the queue began ([`PerQueue::unflushed`]).
const UNFLUSHED_DISCARD: u32 = 1;
/// A write-zeroes done since the last flush of the queue began.
const UNFLUSHED_WRITE_ZEROES: u32 = 2;

/// The write steering's state for one hardware queue: the figures `dispatch::WriteSteering`
/// decides from (its methods are there).
#[derive(Default)]
pub(crate) struct WriteSteering {
    /// Writes of the queue handed to a worker and not yet submitted by it.
    pub(crate) pending: AtomicU32,
    /// NOWAIT writes of the queue refused with `-EAGAIN` in a row (reset by one that goes
    /// through).
    pub(crate) eagain_streak: AtomicU32,
    /// `ktime_get()` until which the queue's writes go straight to the worker (0: not
    /// steering).
    pub(crate) until: AtomicI64,
}

/// What one hardware queue counts, in cache lines of its own.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct PerQueue {
    /// The counters.
    pub(crate) stats: QueueStats,
    /// The write steering of the queue's requests.
    pub(crate) steering: WriteSteering,
    /// Flushes ended (`stats.flushes` less this: those in progress).
    flushes_ended: AtomicU64,
    /// `UNFLUSHED_*` bits: discards and write-zeroes done since the queue's last flush began.
    unflushed: AtomicU32,
}

impl PerQueue {
    /// A discard was done on the backing file.
    pub(crate) fn discarded(&self) {
        self.mark_unflushed(UNFLUSHED_DISCARD);
    }

    /// A write-zeroes was done on the backing file.
    pub(crate) fn zeroed(&self) {
        self.mark_unflushed(UNFLUSHED_WRITE_ZEROES);
    }

    fn mark_unflushed(&self, bit: u32) {
        if self.unflushed.load(Ordering::Relaxed) & bit == 0 {
            self.unflushed.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// A flush begins (its `vfs_fsync`): counted, and what it makes durable taken over.
    pub(crate) fn flush_begins(&self) -> FlushStart {
        self.stats.flushes.inc();
        let unflushed = match self.unflushed.load(Ordering::Relaxed) {
            0 => 0,
            _ => self.unflushed.swap(0, Ordering::Relaxed),
        };
        FlushStart { unflushed }
    }

    /// The flush that began with `start` ended, with success when `ok`: counts what it made
    /// durable (a failed one leaves that to the next).
    pub(crate) fn flush_ended(&self, start: FlushStart, ok: bool) {
        self.flushes_ended.inc();
        if start.unflushed == 0 {
            return;
        }
        if !ok {
            self.unflushed.fetch_or(start.unflushed, Ordering::Relaxed);
            return;
        }
        if start.unflushed & UNFLUSHED_DISCARD != 0 {
            self.stats.flushes_after_discard.inc();
        }
        if start.unflushed & UNFLUSHED_WRITE_ZEROES != 0 {
            self.stats.flushes_after_write_zeroes.inc();
        }
    }

    /// Flushes begun and flushes ended, in that order of reading (an ended flush read after
    /// its beginning: never more ended than begun).
    fn flush_counts(&self) -> (u64, u64) {
        let ended = self.flushes_ended.get();
        (self.stats.flushes.get(), ended)
    }
}

/// The [`PerQueue`]s of a device, at least one: hardware queue `k` counts in entry `k` modulo
/// their number.
pub(crate) struct PerQueues {
    first: PerQueue,
    rest: KVec<PerQueue>,
}

impl PerQueues {
    /// `n` entries (at least one).
    pub(crate) fn new(n: u32) -> Result<Self> {
        let mut rest = KVec::new();
        for _ in 1..n {
            rest.push(PerQueue::default(), GFP_KERNEL)?;
        }
        Ok(Self {
            first: PerQueue::default(),
            rest,
        })
    }

    /// The entry of hardware queue `k`.
    pub(crate) fn of(&self, k: usize) -> &PerQueue {
        let i = match k {
            0 => return &self.first,
            k if k <= self.rest.len() => k,
            k => k % (self.rest.len() + 1),
        };
        i.checked_sub(1)
            .and_then(|i| self.rest.get(i))
            .unwrap_or(&self.first)
    }

    /// Every entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &PerQueue> {
        Iterator::chain(core::iter::once(&self.first), self.rest.iter())
    }
}

/// What [`PerQueue::flush_begins`] took over, for [`PerQueue::flush_ended`].
pub(crate) struct FlushStart {
    unflushed: u32,
}

/// The value of counter `tag` of [`QueueStats::NAMES`] then [`DevStats::NAMES`]: a queue's
/// summed over `queues`.
pub(crate) fn counter(queues: &PerQueues, dev: &DevStats, tag: usize) -> Option<u64> {
    match tag.checked_sub(QueueStats::NAMES.len()) {
        None => queues
            .iter()
            .try_fold(0u64, |sum, q| q.stats.get(tag).map(|v| sum.wrapping_add(v))),
        Some(i) => dev.get(i),
    }
}

/// A reconfiguring ioctl in progress: when dropped, adds to `counter` the flushes of `queues`
/// that were in progress at some moment of it (those in progress when it began, and those
/// begun since). Reads every queue twice, in the ioctl; the flushes only count on their own
/// queue.
pub(crate) struct FlushWatch<'a> {
    queues: &'a PerQueues,
    counter: &'a AtomicU64,
    /// Flushes begun, summed over the queues, when the ioctl began.
    begun: u64,
    /// Flushes in progress then.
    in_progress: u64,
}

impl<'a> FlushWatch<'a> {
    /// Starts watching the flushes of `queues` for `counter`.
    pub(crate) fn new(queues: &'a PerQueues, counter: &'a AtomicU64) -> Self {
        let (mut begun, mut in_progress) = (0u64, 0u64);
        for q in queues.iter() {
            let (b, e) = q.flush_counts();
            begun = begun.wrapping_add(b);
            in_progress = in_progress.wrapping_add(b.wrapping_sub(e));
        }
        Self {
            queues,
            counter,
            begun,
            in_progress,
        }
    }
}

impl Drop for FlushWatch<'_> {
    fn drop(&mut self) {
        let now = self
            .queues
            .iter()
            .fold(0u64, |sum, q| sum.wrapping_add(q.flush_counts().0));
        let racing = self.in_progress.wrapping_add(now.wrapping_sub(self.begun));
        if racing > 0 {
            self.counter.add(racing);
        }
    }
}

#[kernel::macros::kunit_tests(rust_loop_stats)]
mod tests {
    use super::*;

    #[test]
    fn flushes_overlapping_an_ioctl_are_counted() -> Result {
        let queues = PerQueues::new(2)?;
        let counter = AtomicU64::new(0);
        // One in progress on queue 0 when the ioctl begins, one begun on queue 1 during it.
        let a = queues.of(0).flush_begins();
        let watch = FlushWatch::new(&queues, &counter);
        queues.of(0).flush_ended(a, true);
        let b = queues.of(1).flush_begins();
        drop(watch);
        queues.of(1).flush_ended(b, true);
        // None.
        drop(FlushWatch::new(&queues, &counter));
        assert_eq!(counter.get(), 2);
        Ok(())
    }

    #[test]
    fn a_failed_flush_leaves_the_discard_unflushed() {
        let q = PerQueue::default();
        q.discarded();
        let start = q.flush_begins();
        q.flush_ended(start, false);
        assert_eq!(q.stats.flushes_after_discard.get(), 0);
        let start = q.flush_begins();
        q.flush_ended(start, true);
        assert_eq!(q.stats.flushes_after_discard.get(), 1);
        assert_eq!(q.stats.flushes_after_write_zeroes.get(), 0);
    }

    #[test]
    fn a_counter_is_summed_over_the_queues() -> Result {
        let queues = PerQueues::new(2)?;
        let dev = DevStats::default();
        queues.of(0).stats.read_bytes.add(3);
        queues.of(1).stats.read_bytes.add(4);
        // Queue 3 wraps around to entry 1.
        queues.of(3).stats.read_bytes.add(1);
        dev.partscan_skipped.inc();
        let tag =
            |names: &[&CStr], n: &str| names.iter().position(|s| s.to_bytes() == n.as_bytes());
        let read = tag(QueueStats::NAMES, "read_bytes").unwrap_or(usize::MAX);
        assert_eq!(counter(&queues, &dev, read), Some(8));
        assert_eq!(queues.of(1).stats.read_bytes.get(), 5);
        let skipped = tag(DevStats::NAMES, "partscan_skipped").unwrap_or(usize::MAX);
        assert_eq!(
            counter(&queues, &dev, QueueStats::NAMES.len() + skipped),
            Some(1)
        );
        assert_eq!(counter(&queues, &dev, usize::MAX), None);
        Ok(())
    }
}
