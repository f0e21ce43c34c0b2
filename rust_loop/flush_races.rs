// SPDX-License-Identifier: GPL-2.0

//! What a flush overlapped, for the counters that show which ways a write ends were taken
//! (README "Counters"; the crash tests of docs/testing.md "Crash consistency" require each):
//! a reconfiguring ioctl (`LOOP_SET_STATUS`, `LOOP_CLR_FD`) in progress while the flush ran on
//! the backing file, and the discards and write-zeroes a flush made durable. `LOOP_CHANGE_FD`
//! takes only a read-only device, which advertises no volatile write cache (as loop.c's), so
//! the block layer sends it no flush: what it races is the device's reads
//! ([`FlushRaces::change_fd_begins`]). Statistics only: nothing here changes what the driver
//! does.

use super::stats::DevStats;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A reconfiguring ioctl that a flush may race.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Reconfig {
    /// `LOOP_SET_STATUS`/`LOOP_SET_STATUS64` (the queue frozen while the status changes).
    SetStatus = 0,
    /// `LOOP_CHANGE_FD` (the queue frozen while the backing file is swapped). No flush races
    /// it (a read-only device gets none); it is tracked all the same.
    ChangeFd = 1,
    /// `LOOP_CLR_FD` (the device marked to unbind at its last close).
    ClrFd = 2,
}

const KINDS: [Reconfig; 3] = [Reconfig::SetStatus, Reconfig::ChangeFd, Reconfig::ClrFd];

/// A discard done since the last flush began ([`FlushRaces::unflushed`]).
const UNFLUSHED_DISCARD: u32 = 1;
/// A write-zeroes done since the last flush began.
const UNFLUSHED_WRITE_ZEROES: u32 = 2;

/// Which reconfiguring ioctls are in progress, and what the next flush makes durable.
#[derive(Default)]
pub(crate) struct FlushRaces {
    /// Per [`Reconfig`]: ioctls of that kind begun.
    begun: [AtomicU32; 3],
    /// Per [`Reconfig`]: ioctls of that kind ended.
    // INVARIANT: `ended[k] <= begun[k]` (wrapping): a [`Span`] adds to `ended` only after it
    // added to `begun`; they differ while an ioctl of kind `k` is in progress.
    ended: [AtomicU32; 3],
    /// `UNFLUSHED_*` bits: discards and write-zeroes done since the last flush began.
    unflushed: AtomicU32,
}

/// A reconfiguring ioctl in progress, from [`FlushRaces::enter`] until dropped.
pub(crate) struct Span<'a> {
    ended: &'a AtomicU32,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        self.ended.fetch_add(1, Ordering::SeqCst);
    }
}

/// What [`FlushRaces::flush_begins`] saw, for [`FlushRaces::flush_ended`].
pub(crate) struct FlushStart {
    /// Per [`Reconfig`]: `begun` when the flush began.
    begun: [u32; 3],
    /// Per [`Reconfig`]: an ioctl of that kind was in progress when the flush began.
    busy: [bool; 3],
    /// The `UNFLUSHED_*` bits the flush took over.
    unflushed: u32,
}

impl FlushRaces {
    /// An ioctl of kind `kind` begins; it ends when the returned span is dropped.
    pub(crate) fn enter(&self, kind: Reconfig) -> Span<'_> {
        let k = kind as usize;
        self.begun[k].fetch_add(1, Ordering::SeqCst);
        Span {
            ended: &self.ended[k],
        }
    }

    /// A discard was done on the backing file.
    pub(crate) fn discarded(&self) {
        self.unflushed
            .fetch_or(UNFLUSHED_DISCARD, Ordering::Relaxed);
    }

    /// A write-zeroes was done on the backing file.
    pub(crate) fn zeroed(&self) {
        self.unflushed
            .fetch_or(UNFLUSHED_WRITE_ZEROES, Ordering::Relaxed);
    }

    /// A flush begins (its `vfs_fsync` of the backing file).
    pub(crate) fn flush_begins(&self) -> FlushStart {
        let mut start = FlushStart {
            begun: [0; 3],
            busy: [false; 3],
            unflushed: self.unflushed.swap(0, Ordering::Relaxed),
        };
        for k in 0..KINDS.len() {
            // `ended` first: an ioctl that ends between the two loads still counts as busy.
            let ended = self.ended[k].load(Ordering::SeqCst);
            start.begun[k] = self.begun[k].load(Ordering::SeqCst);
            start.busy[k] = start.begun[k] != ended;
        }
        start
    }

    /// The flush that began with `start` ended, with success when `ok`: counts in `stats` each
    /// kind of ioctl that was in progress at some moment of it, and what it made durable.
    pub(crate) fn flush_ended(&self, start: FlushStart, ok: bool, stats: &DevStats) {
        for (k, kind) in KINDS.iter().enumerate() {
            if start.busy[k] || self.begun[k].load(Ordering::SeqCst) != start.begun[k] {
                if let Some(counter) = Self::racing_counter(stats, *kind) {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if !ok {
            // Not durable after all: the next flush makes them so.
            self.unflushed.fetch_or(start.unflushed, Ordering::Relaxed);
            return;
        }
        if start.unflushed & UNFLUSHED_DISCARD != 0 {
            stats.flushes_after_discard.fetch_add(1, Ordering::Relaxed);
        }
        if start.unflushed & UNFLUSHED_WRITE_ZEROES != 0 {
            stats
                .flushes_after_write_zeroes
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A `LOOP_CHANGE_FD` found requests of the device in flight (`busy`) when it began or
    /// when it froze the queue (which waits for them): counted in `stats`.
    pub(crate) fn change_fd_racing_io(busy: bool, stats: &DevStats) {
        if busy {
            stats.change_fd_racing_io.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn racing_counter(stats: &DevStats, kind: Reconfig) -> Option<&AtomicU64> {
        match kind {
            Reconfig::SetStatus => Some(&stats.flushes_racing_set_status),
            // Only on a read-only device, to which no flush comes.
            Reconfig::ChangeFd => None,
            Reconfig::ClrFd => Some(&stats.flushes_racing_clr_fd),
        }
    }
}

#[kernel::macros::kunit_tests(rust_loop_flush_races)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_counted_by_kind() {
        let races = FlushRaces::default();
        let stats = DevStats::default();
        // An ioctl that begins and ends during the flush.
        let start = races.flush_begins();
        drop(races.enter(Reconfig::ClrFd));
        races.flush_ended(start, true, &stats);
        // One in progress when the flush begins, ending after it.
        let span = races.enter(Reconfig::SetStatus);
        let start = races.flush_begins();
        races.flush_ended(start, true, &stats);
        drop(span);
        // None.
        let start = races.flush_begins();
        races.flush_ended(start, true, &stats);
        assert_eq!(stats.flushes_racing_clr_fd.load(Ordering::Relaxed), 1);
        assert_eq!(stats.flushes_racing_set_status.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_failed_flush_leaves_the_discard_unflushed() {
        let races = FlushRaces::default();
        let stats = DevStats::default();
        races.discarded();
        let start = races.flush_begins();
        races.flush_ended(start, false, &stats);
        assert_eq!(stats.flushes_after_discard.load(Ordering::Relaxed), 0);
        let start = races.flush_begins();
        races.flush_ended(start, true, &stats);
        assert_eq!(stats.flushes_after_discard.load(Ordering::Relaxed), 1);
        assert_eq!(stats.flushes_after_write_zeroes.load(Ordering::Relaxed), 0);
    }
}
