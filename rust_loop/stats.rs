// SPDX-License-Identifier: GPL-2.0

//! Per-device counters, each a file in `/sys/block/loopN/rust_loop/` (README "Counters";
//! `tests/scripts/sysfs-names.sh` checks that the README's table lists exactly these). The
//! `counters!` list below is their one declaration: the struct and the sysfs table come from it.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;

/// Declares [`DevStats`] and its [`DevStats::COUNTERS`] table from one list: each counter's
/// doc, name (also its sysfs file) and atomic type.
macro_rules! counters {
    ($($(#[doc = $doc:literal])+ $name:ident: $ty:ty,)*) => {
        /// The counters of one loop device (relaxed atomics: they are statistics).
        #[derive(Default)]
        pub(crate) struct DevStats {
            $($(#[doc = $doc])+ pub(crate) $name: $ty,)*
        }

        impl DevStats {
            /// Every counter, by name (the sysfs file in `rust_loop/`) with a reader.
            pub(crate) const COUNTERS: &'static [(&'static CStr, fn(&DevStats) -> u64)] = &[
                $((kernel::c_str!(stringify!($name)), |s| {
                    u64::from(s.$name.load(Ordering::Relaxed))
                }),)*
            ];
        }
    };
}

counters! {
    /// Requests completed by the NOWAIT path.
    nowait_completions: AtomicU64,
    /// NOWAIT attempts that fell back to the worker (refused with `-EAGAIN`, or `-EOPNOTSUPP`
    /// from a block device below without `REQ_NOWAIT`).
    nowait_eagain: AtomicU64,
    /// Commands run by the worker.
    worker_submissions: AtomicU64,
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
    /// Partition rescans dropped as redundant.
    partscan_skipped: AtomicU64,
    /// `REQ_NOUNMAP` write-zeroes done with `FALLOC_FL_WRITE_ZEROES`.
    write_zeroes_offloaded: AtomicU64,
    /// Direct-I/O mode reads and writes done buffered for want of alignment.
    dio_fallbacks: AtomicU64,
    /// Commands queued to a worker and not yet started by it.
    worker_queued: AtomicU32,
    /// Direct-I/O kiocbs submitted to the backing file and not yet completed.
    backing_inflight: AtomicU32,
}
