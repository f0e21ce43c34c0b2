// SPDX-License-Identifier: GPL-2.0

//! The submission policy: whether `queue_rq` submits a direct-I/O read or write itself, with
//! `IOCB_NOWAIT` ([`SubmissionPolicy::route`]), or hands it to the worker. Inline submission saves the
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
//!     first submission creates it; lockdep on the debug kernel);
//! 12. a block device below the backing file that takes no `REQ_NOWAIT` bio (dm-crypt,
//!     dm-thin, dm-flakey, dm-log-writes, ...: the block layer fails such a bio with
//!     `-EOPNOTSUPP`) (`nowait_skip_bdev`; `dio/t_dio_nowait_device_without_nowait`).
//!
//! The submission itself (`io::try_nowait`) adds the last two guards: `PF_MEMALLOC_NOIO`
//! and the task's deferred-bio list taken for its duration (`nowait_undeferred`). A NOWAIT
//! submission refused with `-EAGAIN`, or with `-EOPNOTSUPP` (the device below swapped for one
//! without `REQ_NOWAIT` after guard 12 looked), goes to the worker ([`SubmissionPolicy::nowait_end`]).

use super::{
    backing::IoState,
    stats::{Count, PerQueue, QueueStats, WriteSteering},
    sys::{now_ns, DiskOps, KthreadWorker, Queue, ReqOp, Request},
};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Upper bound of [`LoadTracker::pipeline_credit`]: how many shallow arrivals in a row (the worker
/// drained the queue before the task refilled it) a pipelining task outlasts.
const PIPELINE_CREDIT_MAX: u32 = 8;

/// Requests one task must have started in a row on a hardware queue before the worker takes
/// its requests for the task's own depth. Tasks that share the CPUs submit in shorter runs (12
/// fio jobs at QD16 on two CPUs: at most the completions a job reaped in its time slice); they
/// go to the worker only when the hardware queue as a whole is deep ([`SHARED_QUEUE_DEPTH`]).
const PIPELINE_MIN_STREAK: u32 = 32;

/// Requests in flight on a hardware queue from which every request goes to the worker, whichever
/// task started it (never below [`SubmissionPolicy::max_depth`]). Many tasks that keep deep
/// queues do better with the worker submitting for all of them than each submitting its own
/// (BENCHMARKS.md has the measurement), while a few tasks that wait for each request never have
/// this many in flight and keep the NOWAIT path.
pub(crate) const SHARED_QUEUE_DEPTH: u32 = 16;

/// One in this many requests in a row of one task goes to the worker, to find out whether the
/// task keeps submitting while it is in flight (see [`QueueLoad::probe`]). A task that waits
/// for each request pays the worker's latency once per interval.
const PROBE_INTERVAL: u32 = 256;

/// Online CPUs from which [`spread_worker`] gives a deep queue a second worker. On two, the
/// submitter and its queue's worker have them both: a second worker gets no CPU of its own, only
/// wake-ups (measured on 2 vCPUs: 0.2 -> 1.0 context switches per I/O, 1.6x loop.c's overhead in
/// direct-I/O random writes at QD32).
pub(crate) const SPREAD_MIN_CPUS: u32 = 4;

/// The worker that runs a request of hardware queue `k` (of `queues`, wrapping around) on the
/// root cgroup: that queue's own, unless requests already wait for it while none wait for the
/// next queue's, which then takes this one, when `may_spread` (direct I/O, at least
/// [`SPREAD_MIN_CPUS`] online: checked only then). A single task that keeps a deep queue on one
/// hardware queue so has two workers submitting for it, on two CPUs, rather than one worker
/// whose thread is the ceiling of its I/O rate (loop.c's, with one worker per cgroup;
/// BENCHMARKS.md "Many cores"). Requests of a queue whose worker keeps up stay with it; with
/// one hardware queue nothing changes. The order in which requests reach the backing file is
/// not kept across workers, as blk-mq does not keep it across hardware queues. Buffered I/O
/// stays with its queue's worker: two threads reading one file in turn would hide its
/// sequential reads from readahead. Counted in `worker_spread` when the next queue's worker
/// takes it.
#[inline]
pub(crate) fn spread_worker<'a, Q>(
    stats: &QueueStats,
    queues: &'a [Q],
    k: usize,
    worker: impl Fn(&'a Q) -> &'a KthreadWorker,
    may_spread: impl FnOnce() -> bool,
) -> Option<&'a KthreadWorker> {
    let n = queues.len();
    let own = worker(queues.get(k.checked_rem(n)?)?);
    if n > 1 && own.has_queued() {
        let next = worker(queues.get((k + 1) % n)?);
        if !next.has_queued() && may_spread() {
            stats.worker_spread.inc();
            return Some(next);
        }
    }
    Some(own)
}

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
    /// [`SubmissionPolicy::max_depth`] is 0): the worker should run it.
    pub(crate) pipeline: bool,
    /// The worker should run it to find out whether its task keeps submitting meanwhile.
    pub(crate) probe: bool,
}

/// The pattern of the requests of one hardware queue: how many are in flight, and whether one
/// task keeps starting them.
pub(crate) struct LoadTracker {
    /// Requests started on this hardware queue, since the device's first binding.
    started: AtomicU64,
    /// Requests of this hardware queue started by `queue_rq` and not yet ended.
    inflight: AtomicU32,
    /// The task that started the last request (an identity, never dereferenced).
    last_submitter: AtomicUsize,
    /// Requests started in a row by that task, before the last one.
    streak: AtomicU32,
    /// Evidence that the task keeps a deep queue, 0 to [`PIPELINE_CREDIT_MAX`]: raised by
    /// its requests that find [`SubmissionPolicy::max_depth`] requests in flight, lowered by
    /// those that find fewer, cleared by a request of another task.
    pipeline_credit: AtomicU32,
}

impl LoadTracker {
    /// Nothing in flight, no submitter seen; `started` requests counted before (in earlier
    /// bindings).
    pub(crate) fn new(started: u64) -> Self {
        Self {
            started: AtomicU64::new(started),
            inflight: AtomicU32::new(0),
            last_submitter: AtomicUsize::new(0),
            streak: AtomicU32::new(0),
            pipeline_credit: AtomicU32::new(0),
        }
    }

    /// Counts a request started by the current task and tells how it should run;
    /// [`SubmissionPolicy::ended`] calls [`LoadTracker::request_ended`] for it.
    fn request_started(&self, max_depth: u32) -> QueueLoad {
        self.started.fetch_add(1, Ordering::Relaxed);
        let depth = self.inflight.fetch_add(1, Ordering::Relaxed);
        let shared_deep = max_depth == 0 || depth >= max_depth.max(SHARED_QUEUE_DEPTH);
        let me = super::sys::current_task_id();
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

    /// Requests of this hardware queue started by `queue_rq` and not yet ended.
    pub(crate) fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Requests started on this hardware queue, since the device's first binding.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Counts the end of a request counted by [`LoadTracker::request_started`].
    fn request_ended(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a request runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Route {
    /// `queue_rq` submits it itself, as direct I/O with `IOCB_NOWAIT`.
    Inline,
    /// The worker submits it as direct I/O, blocking.
    WorkerDirect,
    /// The worker runs it on the backing file's page cache (buffered reads and writes, flush,
    /// discard, write-zeroes).
    WorkerBuffered,
}

/// How a NOWAIT submission ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NowaitEnd {
    /// Refused with `-EAGAIN`: the worker submits it again, blocking.
    Retry,
    /// Done (with its result, an error included): the request completes.
    Done,
}

/// The submission policy of one device: its state (the write steering, the `nowait_max_depth`
/// knob, the stack margin) and its decisions. [`SubmissionPolicy::route`] and
/// [`SubmissionPolicy::worker_route`] decide where a request runs; the hooks record what
/// happened to it: [`SubmissionPolicy::nowait_end`] (a NOWAIT submission refused or accepted),
/// [`SubmissionPolicy::queued`] and [`SubmissionPolicy::taken`] (the worker's queue),
/// [`SubmissionPolicy::ended`] (the hardware queue's load). Every counter of a decision, and
/// the write steering, are in the [`PerQueue`] of the request's hardware queue.
pub(crate) struct SubmissionPolicy {
    /// Kernel stack bytes that must remain for `queue_rq` to submit direct I/O itself.
    min_stack: usize,
    /// `nowait_max_depth` ([`SubmissionPolicy::max_depth`]).
    max_depth: AtomicU32,
}

impl SubmissionPolicy {
    /// A policy with `min_stack` bytes of stack margin and `max_depth` as `nowait_max_depth`.
    pub(crate) fn new(min_stack: usize, max_depth: u32) -> Self {
        Self {
            min_stack,
            max_depth: AtomicU32::new(max_depth),
        }
    }

    /// The queue depth from which on a single submitter's direct I/O goes to the worker. When
    /// the task that starts a request also started the 32 before it on its hardware queue and
    /// at least this many requests are in flight there, or at least this many and
    /// [`SHARED_QUEUE_DEPTH`] are in flight whichever tasks started them (see [`QueueLoad`]),
    /// `queue_rq` hands the request to the queue's worker, which submits it on another CPU while
    /// the submitters prepare their next requests (a two-stage pipeline: the throughput of a
    /// deep queue); otherwise it submits the request itself (`IOCB_NOWAIT`: the latency of a
    /// shallow queue). 0: the worker submits every request.
    pub(crate) fn max_depth(&self) -> u32 {
        self.max_depth.load(Ordering::Relaxed)
    }

    /// Sets [`SubmissionPolicy::max_depth`]; takes effect for the next request.
    pub(crate) fn set_max_depth(&self, depth: u32) {
        self.max_depth.store(depth, Ordering::Relaxed);
    }

    /// Where `queue_rq` sends a started request: [`Route::Inline`] (only with `io`, the bound
    /// device's data path) or the worker. Counts the request on its hardware queue's `load`
    /// first, whatever the route ([`SubmissionPolicy::ended`] counts its end).
    ///
    /// `queue_rq` must not submit a request itself when: the device is not in direct-I/O mode
    /// or the file cannot do non-blocking I/O; the operation is not a read or write (flush,
    /// discard and write-zeroes always go to the worker); the request is below the file's
    /// direct-I/O alignment; it is better run by the worker on another CPU ([`QueueLoad`],
    /// checked first among the guards: a request it sends to the worker counts as
    /// `nowait_skip_depth` or `nowait_probes`, whatever else holds); the submitting task is
    /// inside a file-system transaction (`journal_info` set: the backing file system would nest
    /// its own); less than the stack margin remains (loop on a file system on another loop
    /// device recurses through `queue_rq`); the loop queue has rq-qos policies (wbt may
    /// throttle, i.e. sleep, inside the backing file's submission and deadlock against our own
    /// queue); the current task is not in the issuer's blkcg (the backing I/O would be charged
    /// to the wrong cgroup); it is a write to a regular file within a steering window
    /// ([`WriteSteering`]: allocating writes keep returning `-EAGAIN`, and trying them first
    /// only costs), or one that must first update the file's timestamps; a read that would
    /// update atime; the backing super block has no direct-I/O completion workqueue yet; or
    /// the block device below the backing file takes no `REQ_NOWAIT` bio.
    pub(crate) fn route<D: DiskOps>(
        &self,
        q: &PerQueue,
        load: Option<&LoadTracker>,
        queue: &Queue,
        io: Option<&IoState>,
        rq: &Request<D>,
    ) -> Route {
        let load = load.map_or(QueueLoad::default(), |l| {
            l.request_started(self.max_depth())
        });
        match io {
            Some(io) if self.nowait_allowed(q, load, queue, io, rq) => Route::Inline,
            _ => Route::WorkerBuffered,
        }
    }

    fn nowait_allowed<D: DiskOps>(
        &self,
        q: &PerQueue,
        load: QueueLoad,
        queue: &Queue,
        io: &IoState,
        rq: &Request<D>,
    ) -> bool {
        if !io.direct_io || !io.nowait {
            return false;
        }
        let stats = &q.stats;
        let skipped = |c: &AtomicU64| {
            c.inc();
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
        // The queue-load rule first: it needs no call into the kernel, and a request it sends
        // to the worker (most of a deep queue) need not pass the guards below.
        if load.pipeline {
            return skipped(&stats.nowait_skip_depth);
        }
        if load.probe {
            return skipped(&stats.nowait_probes);
        }
        if super::sys::in_fs_transaction() {
            return skipped(&stats.nowait_skip_journal);
        }
        if super::sys::stack_remaining() < self.min_stack {
            return skipped(&stats.nowait_skip_stack);
        }
        if queue.has_rq_qos() {
            return skipped(&stats.nowait_skip_rqqos);
        }
        if !super::sys::issued_here(rq) {
            // Dispatched from another cgroup's context (a plug flush, a requeue from kblockd):
            // the backing I/O must be charged to the issuer, which only the worker can do.
            return skipped(&stats.nowait_skip_cgroup);
        }
        if io.backing_on_loop && super::sys::plugged() {
            // Loop on a filesystem on another loop device, dispatched from the flush of the
            // submitter's plug: the backing filesystem's bios for the lower loop device would
            // be added to that same plug while it is being flushed.
            return skipped(&stats.nowait_skip_nested);
        }
        if super::sys::submitter_is_loop_worker() {
            // Loop on a filesystem on this device, dispatched by the upper device's worker,
            // possibly inside that filesystem's transaction (lockdep, debug kernel: an XFS
            // fallocate transaction, then the backing XFS's atime update in our NOWAIT read).
            return skipped(&stats.nowait_skip_nested);
        }
        if rq.op() == ReqOp::Write && io.file_is_reg {
            if q.steering.active() {
                return skipped(&stats.nowait_skip_writes);
            }
            // The first write after a timestamp tick updates mtime/ctime, which XFS (without
            // lazytime) refuses under NOWAIT: hand it to the worker rather than try in vain.
            if io.file.cmtime_update_blocks() {
                return skipped(&stats.nowait_skip_cmtime);
            }
        }
        if rq.op() == ReqOp::Read && io.file_is_reg && io.file.atime_update_blocks() {
            // `touch_atime` ignores NOWAIT: on XFS without lazytime (with it, the helper says
            // no) the update is a transaction, which must not start in a submitter that may be
            // inside its own (a user task holding an XFS transaction on a filesystem on this
            // device reads metadata through `queue_rq`).
            return skipped(&stats.nowait_skip_atime);
        }
        if !io.file.bdev_nowait() {
            // The block layer would fail the backing bios with `BLK_STS_NOTSUPP`.
            return skipped(&stats.nowait_skip_bdev);
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

    /// Where the worker runs a request `queue_rq` gave it: direct I/O for the reads and writes
    /// of a device in direct-I/O mode that meet the backing file's alignment (those that do
    /// not are counted in `dio_fallbacks`), else buffered.
    pub(crate) fn worker_route<D: DiskOps>(
        &self,
        stats: &QueueStats,
        io: &IoState,
        rq: &Request<D>,
    ) -> Route {
        if !Self::worker_dio_rw(io, rq) {
            return Route::WorkerBuffered;
        }
        if io.dio_aligned(rq) {
            Route::WorkerDirect
        } else {
            // Below the backing file's direct-I/O alignment: this one goes buffered.
            stats.dio_fallbacks.inc();
            Route::WorkerBuffered
        }
    }

    /// Whether the worker submits `rq` as direct I/O ([`Route::WorkerDirect`]), without
    /// counting anything: it then waits for none of its backing I/O.
    pub(crate) fn worker_direct<D: DiskOps>(io: &IoState, rq: &Request<D>) -> bool {
        Self::worker_dio_rw(io, rq) && io.dio_aligned(rq)
    }

    /// A read or write of a device in direct-I/O mode (a write only if it may write).
    fn worker_dio_rw<D: DiskOps>(io: &IoState, rq: &Request<D>) -> bool {
        io.direct_io
            && match rq.op() {
                ReqOp::Read => true,
                ReqOp::Write => !io.read_only,
                _ => false,
            }
    }

    /// The end of a NOWAIT submission, refused (`ret` `-EAGAIN`, or `-EOPNOTSUPP`: a block
    /// device below that takes no `REQ_NOWAIT` bio, as io_uring also retries) or completed
    /// (`ret` its result): a refusal goes to the worker, and refused writes in a row start a
    /// steering window ([`WriteSteering`]).
    pub(crate) fn nowait_end<D: DiskOps>(
        &self,
        q: &PerQueue,
        rq: &Request<D>,
        ret: isize,
    ) -> NowaitEnd {
        let is_write = rq.op() == ReqOp::Write;
        if ret == EAGAIN || ret == EOPNOTSUPP {
            q.stats.nowait_eagain.inc();
            if is_write {
                q.steering.refused();
            }
            return NowaitEnd::Retry;
        }
        q.stats.nowait_completions.inc();
        if is_write {
            q.steering.accepted();
        }
        NowaitEnd::Done
    }

    /// A request of operation `op` of the hardware queue `q` queued to a worker.
    pub(crate) fn queued(&self, q: &PerQueue, op: ReqOp) {
        if op == ReqOp::Write {
            q.steering.queued();
        }
    }

    /// A request of operation `op` of the hardware queue `q` that the worker has submitted (or
    /// failed) after [`SubmissionPolicy::queued`]: a write in a blocking submission still counts
    /// as queued.
    pub(crate) fn taken(&self, q: &PerQueue, op: ReqOp) {
        if op == ReqOp::Write {
            q.steering.taken();
        }
    }

    /// A request ends that [`SubmissionPolicy::route`] counted on `load`.
    pub(crate) fn ended(&self, load: Option<&LoadTracker>) {
        if let Some(load) = load {
            load.request_ended();
        }
    }
}

/// `-EAGAIN`, as a kiocb's result.
const EAGAIN: isize = -(kernel::bindings::EAGAIN as isize);
/// `-EOPNOTSUPP`, as a kiocb's result.
const EOPNOTSUPP: isize = -(kernel::bindings::EOPNOTSUPP as isize);

/// Steers a hardware queue's writes away from the NOWAIT path while the backing file keeps
/// refusing them; the state is the queue's own ([`PerQueue`]): no line all queues write.
impl WriteSteering {
    /// Whether the queue's writes currently go straight to the worker: for [`WRITE_STEER_NS`]
    /// after [`WRITE_STEER_STREAK`] of its NOWAIT writes were refused in a row, while a worker
    /// has writes of it.
    fn active(&self) -> bool {
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
    fn refused(&self) {
        let streak = self.eagain_streak.fetch_add(1, Ordering::Relaxed) + 1;
        if streak >= WRITE_STEER_STREAK {
            self.eagain_streak.store(0, Ordering::Relaxed);
            self.until
                .store(now_ns() + WRITE_STEER_NS, Ordering::Relaxed);
        }
    }

    /// Counts a NOWAIT write that the backing file accepted (a store only after a refusal).
    fn accepted(&self) {
        if self.eagain_streak.load(Ordering::Relaxed) != 0 {
            self.eagain_streak.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a write queued to the worker.
    fn queued(&self) {
        self.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a write the worker has submitted (or failed) that [`Self::queued`] counted.
    fn taken(&self) {
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
        let t = LoadTracker::new(0);
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
        let t = LoadTracker::new(0);
        for depth in 0..40 {
            let load = t.request_started(4);
            assert_eq!(load.pipeline, depth >= SHARED_QUEUE_DEPTH);
        }
        let t = LoadTracker::new(0);
        for depth in 0..40 {
            let load = t.request_started(24);
            assert_eq!(load.pipeline, depth >= 24);
        }
    }

    /// Refused writes open a steering window on their own hardware queue only; it closes once
    /// no write of the queue waits for a worker.
    #[test]
    fn steering_is_per_queue() {
        let (a, b) = (PerQueue::default(), PerQueue::default());
        for _ in 0..WRITE_STEER_STREAK {
            a.steering.refused();
        }
        assert_ne!(a.steering.until.load(Ordering::Relaxed), 0);
        assert_eq!(b.steering.until.load(Ordering::Relaxed), 0);
        a.steering.queued();
        b.steering.queued();
        assert!(!b.steering.active());
        a.steering.taken();
        assert!(!a.steering.active());
        assert_eq!(a.steering.until.load(Ordering::Relaxed), 0);
    }

    /// `nowait_max_depth` 0: the worker takes every request.
    #[test]
    fn max_depth_zero_sends_all_to_worker() {
        let t = LoadTracker::new(0);
        for _ in 0..10 {
            assert!(t.request_started(0).pipeline);
            t.request_ended();
        }
    }
}
