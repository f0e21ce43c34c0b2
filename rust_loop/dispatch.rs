// SPDX-License-Identifier: GPL-2.0

//! The submission policy: whether `queue_rq` submits a direct-I/O read or write itself, with
//! `IOCB_NOWAIT` ([`nowait_allowed`]), or hands it to the worker. Inline submission saves the
//! hand-over (the latency of a shallow queue); the worker gives a deep queue a second CPU and
//! is the only place that may block. Calling into the backing file system from `queue_rq`
//! runs in the submitter's context, so every guard below exists because that context may be
//! one the file system must not be entered from (docs/nowait-hazards.md has each hazard and
//! how it was found). In order, each with the counter of the requests it sent to the worker
//! and the test that shows it:
//!
//! 1. not direct-I/O mode, a file that cannot do `IOCB_NOWAIT`, a backing file system not in
//!    the `nowait_fs` list, an operation other than read or write, a read-only device's write;
//! 2. a request below the file's direct-I/O alignment: buffered on the worker
//!    (`dio_fallbacks`; `dio/t_dio_stays_on_below_backing_alignment`);
//! 3. the queue-load rule ([`QueueLoad`], [`LoadTracker`]): a task or tasks keeping a deep
//!    queue (`nowait_skip_depth`), or a probe of one (`nowait_probes`;
//!    `dio/t_dio_deep_queue_goes_to_worker`);
//! 4. the submitter inside a file-system transaction, `current->journal_info`
//!    (`nowait_skip_journal`; `dio/t_dio_guard_journal_info_goes_to_worker`);
//! 5. less than `nowait_min_stack` bytes of stack left (`nowait_skip_stack`;
//!    `dio/t_dio_guard_stack_margin_goes_to_worker`);
//! 6. rq-qos policies on the queue (`nowait_skip_rqqos`; `dio/t_dio_guard_rqqos_goes_to_worker`);
//! 7. the submitter not in the issuer's blkcg (`nowait_skip_cgroup`;
//!    `mq/t_cgroup_io_max_holds_dio`);
//! 8. loop on a file system on loop, from a plug flush or another loop device's worker
//!    (`nowait_skip_nested`; `dio/t_dio_stacked_loop_on_xfs_on_loop`);
//! 9. a write in a steering window after refused writes ([`WriteSteering`],
//!    `nowait_skip_writes`), or one that must first update mtime/ctime (`nowait_skip_cmtime`;
//!    `dio/t_dio_guard_cmtime_goes_to_worker`);
//! 10. a read that would update atime (`nowait_skip_atime`;
//!     `dio/t_dio_guard_atime_goes_to_worker`);
//! 11. a backing super block without its direct-I/O completion workqueue yet (the worker's
//!     first submission creates it; lockdep on the debug kernel).
//!
//! The submission itself (`io::try_nowait`) adds the last two guards: `PF_MEMALLOC_NOIO`
//! and the task's deferred-bio list taken for its duration (`nowait_undeferred`).

use crate::{
    device::{IoState, LoopDevice, LoopDisk},
    sys::{now_ns, ReqOp, Request},
};
use core::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};

/// Upper bound of [`LoadTracker::pipeline_credit`]: how many shallow arrivals in a row (the worker
/// drained the queue before the task refilled it) a pipelining task outlasts.
const PIPELINE_CREDIT_MAX: u32 = 8;

/// Requests one task must have started in a row on a hardware queue before the worker takes
/// its requests for the task's own depth. Tasks that share the CPUs submit in shorter runs (12
/// fio jobs at QD16 on two CPUs: at most the completions a job reaped in its time slice); they
/// go to the worker only when the hardware queue as a whole is deep ([`SHARED_QUEUE_DEPTH`]).
const PIPELINE_MIN_STREAK: u32 = 32;

/// Requests in flight on a hardware queue from which every request goes to the worker, whichever
/// task started it (never below [`LoopDevice::nowait_max_depth`]). Many tasks that keep deep
/// queues do better with the worker submitting for all of them than each submitting its own
/// (BENCHMARKS.md has the measurement), while a few tasks that wait for each request never have
/// this many in flight and keep the NOWAIT path.
pub(crate) const SHARED_QUEUE_DEPTH: u32 = 16;

/// One in this many requests in a row of one task goes to the worker, to find out whether the
/// task keeps submitting while it is in flight (see [`QueueLoad::probe`]). A task that waits
/// for each request pays the worker's latency once per interval.
const PROBE_INTERVAL: u32 = 256;

/// How `queue_rq` should run a request, from the pattern of the requests of its hardware queue.
///
/// A single task that keeps a deep queue gains a second stage on another CPU from the worker:
/// it goes on preparing requests while the worker submits them (as the C loop driver does for
/// every request). Its requests find others in flight; the worker takes them while they do.
/// On a backing device that completes in the submitter's context (`null_blk`, a RAM disk)
/// nothing is in flight when the next request starts, however deep the task's queue: a probe
/// request goes to the worker to find out. A task that waits for each request (`psync`, `dd`)
/// starts nothing meanwhile and keeps the NOWAIT path; one that goes on submitting finds the
/// probe in flight and stays with the worker while it keeps it busy. Requests of several tasks
/// in turn stay in `queue_rq` ([`PIPELINE_MIN_STREAK`]) until the hardware queue holds
/// [`SHARED_QUEUE_DEPTH`] in flight.
/// The default: `queue_rq` submits the request itself.
#[derive(Clone, Copy, Default)]
pub(crate) struct QueueLoad {
    /// The request's task keeps a deep queue, or its hardware queue does (or
    /// [`LoopDevice::nowait_max_depth`] is 0): the worker should run it.
    pub(crate) pipeline: bool,
    /// The worker should run it to find out whether its task keeps submitting meanwhile.
    pub(crate) probe: bool,
}

/// The pattern of the requests of one hardware queue: how many are in flight, and whether one
/// task keeps starting them.
pub(crate) struct LoadTracker {
    /// Requests of this hardware queue started by `queue_rq` and not yet ended.
    inflight: AtomicU32,
    /// The task that started the last request (an identity, never dereferenced).
    last_submitter: AtomicUsize,
    /// Requests started in a row by that task, before the last one.
    streak: AtomicU32,
    /// Evidence that the task keeps a deep queue, 0 to [`PIPELINE_CREDIT_MAX`]: raised by
    /// its requests that find [`LoopDevice::nowait_max_depth`] requests in flight, lowered by
    /// those that find fewer, cleared by a request of another task.
    pipeline_credit: AtomicU32,
}

impl LoadTracker {
    /// Nothing in flight, no submitter seen.
    pub(crate) fn new() -> Self {
        Self {
            inflight: AtomicU32::new(0),
            last_submitter: AtomicUsize::new(0),
            streak: AtomicU32::new(0),
            pipeline_credit: AtomicU32::new(0),
        }
    }

    /// Counts a request started by the current task and tells how it should run;
    /// `io::end` calls [`LoadTracker::request_ended`] for it.
    pub(crate) fn request_started(&self, max_depth: u32) -> QueueLoad {
        let depth = self.inflight.fetch_add(1, Ordering::Relaxed);
        let shared_deep = max_depth == 0 || depth >= max_depth.max(SHARED_QUEUE_DEPTH);
        let me = crate::sys::current_task_id();
        if self.last_submitter.swap(me, Ordering::Relaxed) != me {
            self.streak.store(0, Ordering::Relaxed);
            self.pipeline_credit.store(0, Ordering::Relaxed);
            return QueueLoad {
                pipeline: shared_deep,
                probe: false,
            };
        }
        let streak = self.streak.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // Racing tasks may lose an update: this is a heuristic, not an account.
        let credit = self.pipeline_credit.load(Ordering::Relaxed);
        let credit = if depth >= max_depth {
            (credit + 2).min(PIPELINE_CREDIT_MAX)
        } else {
            credit.saturating_sub(1)
        };
        self.pipeline_credit.store(credit, Ordering::Relaxed);
        QueueLoad {
            pipeline: shared_deep || (credit > 0 && streak >= PIPELINE_MIN_STREAK),
            probe: credit == 0 && streak % PROBE_INTERVAL == 0,
        }
    }

    /// Counts the end of a request counted by [`LoadTracker::request_started`].
    pub(crate) fn request_ended(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether `queue_rq` may submit this command itself with `IOCB_NOWAIT`. It must not when:
/// the device is not in direct-I/O mode or the file cannot do non-blocking I/O; the
/// operation is not a read or write (flush, discard and write-zeroes always go to the
/// worker); the submitting task is inside a filesystem transaction (`journal_info` set —
/// the backing filesystem would nest its own); less than `nowait_min_stack` (module parameter) bytes of
/// kernel stack remain (loop on a filesystem on another loop device recurses through
/// `queue_rq`); the loop queue has rq-qos policies (wbt may throttle, i.e. sleep, inside the
/// backing file's submission and deadlock against our own queue); the current task is not
/// in the issuer's blkcg (the backing I/O would be charged to the wrong cgroup); or it is a
/// write to a regular file within a steering window ([`WriteSteering`]:
/// allocating writes keep returning `-EAGAIN`, and trying them first only costs); or it is
/// better run by the worker on another CPU ([`QueueLoad`], checked first: a request it sends
/// to the worker counts as `nowait_skip_depth` or `nowait_probes`, whatever else holds).
pub(crate) fn nowait_allowed(
    dev: &LoopDevice,
    io: &IoState,
    rq: &Request<LoopDisk>,
    load: QueueLoad,
) -> bool {
    if !io.direct_io || !io.nowait {
        return false;
    }
    let skipped = |c: &core::sync::atomic::AtomicU64| {
        c.fetch_add(1, Ordering::Relaxed);
        false
    };
    match rq.op() {
        ReqOp::Read => {}
        ReqOp::Write if !io.read_only => {}
        _ => return false,
    }
    if !io.dio_aligned(rq) {
        // The worker does it buffered (counted there).
        return false;
    }
    // The queue-load rule first: it needs no call into the kernel, and a request it sends to
    // the worker (most of a deep queue) need not pass the guards below.
    if !stays_inline(dev, load) {
        return false;
    }
    if crate::sys::in_fs_transaction() {
        return skipped(&dev.stats.nowait_skip_journal);
    }
    if crate::sys::stack_remaining() < crate::nowait_min_stack() {
        return skipped(&dev.stats.nowait_skip_stack);
    }
    if dev.has_rq_qos() {
        return skipped(&dev.stats.nowait_skip_rqqos);
    }
    if !crate::sys::issued_here(rq) {
        // Dispatched from another cgroup's context (a plug flush, a requeue from kblockd):
        // the backing I/O must be charged to the issuer, which only the worker can do.
        return skipped(&dev.stats.nowait_skip_cgroup);
    }
    if io.backing_on_loop && crate::sys::plugged() {
        // Loop on a filesystem on another loop device, dispatched from the flush of the
        // submitter's plug: the backing filesystem's bios for the lower loop device would
        // be added to that same plug while it is being flushed.
        return skipped(&dev.stats.nowait_skip_nested);
    }
    if crate::sys::submitter_is_loop_worker() {
        // Loop on a filesystem on this device, dispatched by the upper device's worker,
        // possibly inside that filesystem's transaction (lockdep, debug kernel: an XFS
        // fallocate transaction, then the backing XFS's atime update in our NOWAIT read).
        return skipped(&dev.stats.nowait_skip_nested);
    }
    if rq.op() == ReqOp::Write && io.file_is_reg {
        if dev.steering.active() {
            return skipped(&dev.stats.nowait_skip_writes);
        }
        // The first write after a timestamp tick updates mtime/ctime, which XFS (without
        // lazytime) refuses under NOWAIT: hand it to the worker rather than try in vain.
        if io.file.cmtime_update_blocks() {
            return skipped(&dev.stats.nowait_skip_cmtime);
        }
    }
    if rq.op() == ReqOp::Read && io.file_is_reg && io.file.atime_update_blocks() {
        // `touch_atime` ignores NOWAIT: on XFS without lazytime (with it, the helper says
        // no) the update is a transaction, which must not start in a submitter that may be
        // inside its own (a user task holding an XFS transaction on a filesystem on this
        // device reads metadata through `queue_rq`).
        return skipped(&dev.stats.nowait_skip_atime);
    }
    if io.file_is_reg && !io.file.has_dio_completion_wq() {
        // The super block's first asynchronous direct I/O creates its completion
        // workqueue (`wq_pool_mutex`, reclaim): not inside `queue_rq`'s SRCU read section,
        // which a queue freeze + quiesce waits for (lockdep: srcu -> wq_pool_mutex ->
        // fs_reclaim -> q_usage_counter). The worker's submission creates it.
        return false;
    }
    true
}

/// Whether a direct-I/O request is left to `queue_rq` (true) rather than handed to the
/// worker for the pattern of its hardware queue ([`QueueLoad`]).
fn stays_inline(dev: &LoopDevice, load: QueueLoad) -> bool {
    if load.pipeline {
        dev.stats.nowait_skip_depth.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    if load.probe {
        dev.stats.nowait_probes.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    true
}

/// Steers writes away from the NOWAIT path while the backing file keeps refusing them.
pub(crate) struct WriteSteering {
    /// Writes queued to the worker and not yet submitted by it.
    pending: AtomicU32,
    /// NOWAIT writes refused with `-EAGAIN` in a row (reset by one that goes through).
    eagain_streak: AtomicU32,
    /// `ktime_get()` until which writes go straight to the worker (0: not steering).
    until: AtomicI64,
}

impl WriteSteering {
    /// Not steering.
    pub(crate) fn new() -> Self {
        Self {
            pending: AtomicU32::new(0),
            eagain_streak: AtomicU32::new(0),
            until: AtomicI64::new(0),
        }
    }

    /// Whether writes currently go straight to the worker: for [`WRITE_STEER_NS`] after
    /// [`WRITE_STEER_STREAK`] NOWAIT writes were refused in a row, while the worker has writes.
    pub(crate) fn active(&self) -> bool {
        let until = self.until.load(Ordering::Relaxed);
        if until == 0 {
            return false;
        }
        if now_ns() < until && self.pending.load(Ordering::Relaxed) > 0 {
            return true;
        }
        self.until.store(0, Ordering::Relaxed);
        false
    }

    /// Counts a NOWAIT write refused with `-EAGAIN`; enough in a row start a steering window.
    pub(crate) fn refused(&self) {
        let streak = self.eagain_streak.fetch_add(1, Ordering::Relaxed) + 1;
        if streak >= WRITE_STEER_STREAK {
            self.eagain_streak.store(0, Ordering::Relaxed);
            self.until
                .store(now_ns() + WRITE_STEER_NS, Ordering::Relaxed);
        }
    }

    /// Counts a NOWAIT write that the backing file accepted.
    pub(crate) fn accepted(&self) {
        self.eagain_streak.store(0, Ordering::Relaxed);
    }

    /// Counts a write queued to the worker.
    pub(crate) fn queued(&self) {
        self.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a write the worker has submitted (or failed) that [`Self::queued`] counted.
    pub(crate) fn taken(&self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// NOWAIT writes refused in a row that start a window of [`WRITE_STEER_NS`] in which writes go
/// straight to the worker (while it has writes queued). Allocating writes to a sparse file are
/// refused one after another, and trying each first only costs; a burst of refusals that ends
/// (every write in flight when the file's timestamps need their per-tick update) must not steer
/// writes for longer than that.
const WRITE_STEER_STREAK: u32 = 8;
/// Length of a steering window.
const WRITE_STEER_NS: i64 = 500_000;

#[kernel::macros::kunit_tests(rust_loop_dispatch)]
mod tests {
    use super::*;

    /// A task that waits for each request (one in flight at a time) stays on the NOWAIT path,
    /// but for one probe in [`PROBE_INTERVAL`] requests in a row.
    #[test]
    fn waiting_task_stays_inline_but_for_probes() {
        let t = LoadTracker::new();
        let (mut pipeline, mut probes) = (0, 0);
        for _ in 0..(2 * PROBE_INTERVAL + 10) {
            let load = t.request_started(8);
            pipeline += u32::from(load.pipeline);
            probes += u32::from(load.probe);
            t.request_ended();
        }
        assert_eq!(pipeline, 0);
        assert_eq!(probes, 2);
    }

    /// A task that keeps requests in flight goes to the worker once the hardware queue holds
    /// [`SHARED_QUEUE_DEPTH`] (or `max_depth`, if larger), and stays there.
    #[test]
    fn deep_queue_goes_to_worker() {
        let t = LoadTracker::new();
        for depth in 0..40 {
            let load = t.request_started(4);
            assert_eq!(load.pipeline, depth >= SHARED_QUEUE_DEPTH);
        }
        let t = LoadTracker::new();
        for depth in 0..40 {
            let load = t.request_started(24);
            assert_eq!(load.pipeline, depth >= 24);
        }
    }

    /// `nowait_max_depth` 0: the worker takes every request.
    #[test]
    fn max_depth_zero_sends_all_to_worker() {
        let t = LoadTracker::new();
        for _ in 0..10 {
            assert!(t.request_started(0).pipeline);
            t.request_ended();
        }
    }
}
