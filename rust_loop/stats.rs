// SPDX-License-Identifier: GPL-2.0

//! Per-device counters, readable in `/sys/block/loopN/rust_loop/`:
//!
//! - `nowait_completions`: requests completed by the `IOCB_NOWAIT` submission from `queue_rq`;
//! - `nowait_eagain`: NOWAIT attempts refused with `-EAGAIN` (at once or at completion) and
//!   handed to the worker;
//! - `worker_submissions`: commands run by the device's worker thread;
//! - `completions_here`, `completions_deferred`: requests completed on the stack that finished
//!   them (task context: the worker, `queue_rq`, a backing file's task-context `ki_complete`)
//!   and through `blk_mq_complete_request` (interrupt context, or too little stack left);
//! - `read_bytes`, `write_bytes`: data transferred to and from the backing file;
//! - `nowait_skip_journal`, `nowait_skip_stack`, `nowait_skip_rqqos`, `nowait_skip_cgroup`,
//!   `nowait_skip_nested`, `nowait_skip_writes`, `nowait_skip_cmtime`, `nowait_skip_atime`,
//!   `nowait_skip_depth`:
//!   direct-I/O reads and writes that `queue_rq` did not try with `IOCB_NOWAIT` because the
//!   submitter was inside a filesystem transaction, too little kernel stack remained, rq-qos
//!   policies were attached to the queue, the submitter was not in the issuer's blkcg, the
//!   request came from a plug flush on a loop device stacked on loop, or blocking writes were
//!   queued in the worker, or a write would first have to update the file's timestamps, or a
//!   read its atime, or their task started the 32 requests before them on the hardware queue
//!   with `nowait_max_depth` in flight (a single submitter's deep queue is handed to the
//!   worker, which submits on another CPU), or that depth and 16 were in flight whichever
//!   tasks started them (many submitters' deep queues);
//! - `nowait_max_depth` (writable): that depth (0: the worker submits every direct I/O);
//! - `nowait_probes`: requests of one task in a row handed to the worker (one in 256) to find
//!   out whether the task keeps submitting while they are in flight;
//! - `nr_hw_queues` (writable while the device is unbound): hardware queues and worker threads;
//! - `hw_queue_requests`: requests started on each hardware queue;
//! - `nowait_undeferred`: NOWAIT submissions made inside the submitter's `submit_bio`, whose
//!   backing bios were sent at once rather than deferred on its `bio_list`;
//! - `partscan_skipped`: partition rescans (`BLKRRPART`) dropped because the partition table
//!   cannot have changed since the last scan (no remove/add of the partitions);
//! - `write_zeroes_offloaded`: `REQ_NOUNMAP` write-zeroes done with `FALLOC_FL_WRITE_ZEROES`
//!   (written, zeroed blocks) rather than `FALLOC_FL_ZERO_RANGE` (unwritten ones);
//! - `dio_fallbacks`: reads and writes of a direct-I/O device that did not meet the backing
//!   file's direct-I/O alignment (a block size or offset below it) and took the buffered path;
//! - `worker_queued`, `backing_inflight` (gauges): commands queued to a worker that has not
//!   started them yet, and direct-I/O kiocbs submitted to the backing file and not yet
//!   completed (where a device's requests are, when it looks stuck).

use core::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// The counters of one loop device (relaxed atomics: they are statistics).
#[derive(Default)]
pub(crate) struct DevStats {
    /// Requests completed by the NOWAIT path.
    pub(crate) nowait_completions: AtomicU64,
    /// NOWAIT attempts that fell back to the worker.
    pub(crate) nowait_eagain: AtomicU64,
    /// Commands run by the worker.
    pub(crate) worker_submissions: AtomicU64,
    /// Requests completed on the stack that finished them.
    pub(crate) completions_here: AtomicU64,
    /// Requests completed through `blk_mq_complete_request`.
    pub(crate) completions_deferred: AtomicU64,
    /// Bytes read from the backing file.
    pub(crate) read_bytes: AtomicU64,
    /// Bytes written to the backing file.
    pub(crate) write_bytes: AtomicU64,
    /// NOWAIT skipped: `current->journal_info` was set.
    pub(crate) nowait_skip_journal: AtomicU64,
    /// NOWAIT submissions made inside the submitter's `submit_bio`, whose backing bios were sent
    /// at once instead of waiting on its `bio_list` ([`crate::blk::UndeferredBios`]).
    pub(crate) nowait_undeferred: AtomicU64,
    /// NOWAIT skipped: not enough kernel stack left.
    pub(crate) nowait_skip_stack: AtomicU64,
    /// NOWAIT skipped: rq-qos policies on the queue.
    pub(crate) nowait_skip_rqqos: AtomicU64,
    /// NOWAIT skipped: dispatched outside the issuer's blkcg.
    pub(crate) nowait_skip_cgroup: AtomicU64,
    /// NOWAIT skipped: loop on loop, dispatched from a plug flush.
    pub(crate) nowait_skip_nested: AtomicU64,
    /// NOWAIT skipped: a write while blocking writes were queued in the worker.
    pub(crate) nowait_skip_writes: AtomicU64,
    /// NOWAIT skipped: a write that would first have to update the file's mtime/ctime.
    pub(crate) nowait_skip_cmtime: AtomicU64,
    /// NOWAIT skipped: a read that would first update the file's atime.
    pub(crate) nowait_skip_atime: AtomicU64,
    /// NOWAIT skipped: the submitter, or the submitters together, keep a deep queue on the
    /// hardware queue (see [`crate::device::QueueLoad`]), or
    /// [`crate::device::LoopDevice::nowait_max_depth`] is 0.
    pub(crate) nowait_skip_depth: AtomicU64,
    /// Requests handed to the worker to find out whether their task keeps submitting meanwhile.
    pub(crate) nowait_probes: AtomicU64,
    /// Partition rescans dropped as redundant.
    pub(crate) partscan_skipped: AtomicU64,
    /// `REQ_NOUNMAP` write-zeroes done with `FALLOC_FL_WRITE_ZEROES`.
    pub(crate) write_zeroes_offloaded: AtomicU64,
    /// Direct-I/O mode reads and writes done buffered for want of alignment.
    pub(crate) dio_fallbacks: AtomicU64,
    /// Commands queued to a worker and not yet started by it.
    pub(crate) worker_queued: AtomicU32,
    /// Direct-I/O kiocbs submitted to the backing file and not yet completed.
    pub(crate) backing_inflight: AtomicU32,
    /// Writes queued to the worker and not yet submitted by it (steers writes away from NOWAIT
    /// while the backing file is allocating).
    pub(crate) worker_writes_pending: AtomicU32,
    /// NOWAIT writes refused with `-EAGAIN` in a row (reset by one that goes through).
    pub(crate) write_eagain_streak: AtomicU32,
    /// `ktime_get()` until which writes go straight to the worker (0: not steering).
    pub(crate) write_steer_until: AtomicI64,
}
