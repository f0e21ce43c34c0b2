// SPDX-License-Identifier: GPL-2.0

//! The request path of a loop device, top to bottom as loop.c's `loop_queue_rq` →
//! `lo_rw_aio` → `lo_rw_aio_complete`: [`LoopDisk`]'s `queue_rq`, the NOWAIT submission, the
//! end of a direct I/O, the worker, what a command does on the backing file, and the end of the
//! request. [`LoopCmd`] is the per-request data.
//!
//! Buffered mode: `queue_rq` starts the request and queues it on a `kthread_worker`
//! ([`queue_to_worker`]); the worker runs [`LoopDisk::run`] (read/write/flush/discard/
//! write-zeroes on the backing file), stores the result and completes the request; `complete`
//! then ends it ([`end`]), zero-filling whatever a short read did not cover.
//!
//! Direct-I/O mode: reads and writes become an `IOCB_DIRECT` kiocb on the backing file, built
//! over the request's own pages ([`OwnedRequest::submit_dio`]). `queue_rq` first submits it
//! itself with `IOCB_NOWAIT` ([`try_nowait`]) when the submission policy says so
//! ([`super::dispatch`]); `-EAGAIN`, returned at once or to [`LoopDisk::aio_done`], hands the
//! command to the worker, which submits it again without `IOCB_NOWAIT`. The request is an
//! [`OwnedRequest`] that moves between these places: it is only ever in one of them.

use super::{
    backing::IoState,
    cgroup_workers::CgroupWorkerUse,
    device::{LoopDevice, LoopDisk, State},
    dispatch::{LoadTracker, NowaitEnd, Route, SubmissionPolicy},
    stats::{Count, PerQueue},
    sys::{
        BackingFile, BlkStatus, BlockDevice, Dir, DiskOps, IoCgroups, IovIter, KthreadWorker,
        OwnedRequest, ReqOp, Request, RequestAio, RequestWork, FALLOC_FL_KEEP_SIZE,
        FALLOC_FL_PUNCH_HOLE, FALLOC_FL_WRITE_ZEROES, FALLOC_FL_ZERO_RANGE,
    },
};
use core::sync::atomic::Ordering;
use kernel::{bindings, prelude::*};

/// A request of a loop device, owned by the driver.
pub(crate) type LoopRq = OwnedRequest<LoopDisk>;

const EIO: isize = -(bindings::EIO as isize);
const EAGAIN: isize = -(bindings::EAGAIN as isize);
const EOPNOTSUPP: isize = -(bindings::EOPNOTSUPP as isize);

/// The per-request data (blk-mq PDU) of a loop device. Only the request's owner touches it
/// ([`OwnedRequest::pdu_mut`]).
pub(crate) struct LoopCmd {
    /// Result of the command: bytes transferred (reads and writes), 0, or a negative errno.
    ret: isize,
    /// The direct I/O in flight was submitted with `IOCB_NOWAIT` (from `queue_rq`).
    nowait: bool,
    /// The issuer's cgroups, from `queue_to_worker` until the worker runs the command.
    cgroups: Option<IoCgroups>,
    /// The worker of the issuer's blkcg, if the command runs on one; its claim keeps that
    /// worker alive until the command ends (its completion may wait in the worker's batch,
    /// [`OwnedRequest::complete_in_batch`]).
    cgroup_worker: Option<CgroupWorkerUse>,
}

/// The counters of the hardware queue of `rq`, a request `queue_rq` has taken.
fn counts<'d>(dev: &'d LoopDevice, rq: &LoopRq) -> &'d PerQueue {
    dev.queue_counts(rq.hw_queue())
}

/// The load of the hardware queue of `rq`, a request `queue_rq` has taken (none while the
/// device is unbound).
fn load<'d>(dev: &'d LoopDevice, rq: &'d LoopRq) -> Option<&'d LoadTracker> {
    dev.hw_queue_of(rq).map(|q| &q.load)
}

impl DiskOps for LoopDisk {
    type Module = crate::LoopModule;
    type Data = LoopDevice;
    type Pdu = LoopCmd;

    fn new_pdu() -> LoopCmd {
        LoopCmd {
            ret: 0,
            nowait: false,
            cgroups: None,
            cgroup_worker: None,
        }
    }

    fn queue_rq(dev: &LoopDevice, rq: LoopRq) {
        rq.start();
        // Fault injection (a static key: a no-op until a test arms it): dropped without an end,
        // which ends it with an I/O error.
        if super::sys::fault_injection_armed()
            && dev
                .inject_drop_requests
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        {
            drop(rq);
            return;
        }
        if dev.state() != State::Bound {
            rq.end(BlkStatus::IOERR);
            return;
        }
        let counts = counts(dev, &rq);
        let route = dev.policy.route(
            counts,
            load(dev, &rq),
            dev.disk.queue(),
            dev.io_backing(&rq),
            &rq,
        );
        let rq = match route {
            Route::Inline => match try_nowait(dev, counts, rq) {
                Ok(()) => return,
                Err(rq) => rq,
            },
            _ => rq,
        };
        // `BLK_MQ_F_BLOCKING`: `queue_rq` may sleep.
        queue_to_worker(dev, rq, true);
    }

    fn complete(dev: &LoopDevice, rq: LoopRq) {
        end(dev, rq)
    }

    fn open(dev: &LoopDevice, _mode: u32) -> Result {
        dev.opened()
    }

    fn release(dev: &LoopDevice) {
        dev.released()
    }

    fn ioctl(dev: &LoopDevice, bdev: &BlockDevice, mode: u32, cmd: u32, arg: usize) -> Result<i32> {
        super::ioctl::dispatch(dev, bdev, mode, cmd, arg).map(|()| 0)
    }

    fn compat_ioctl(
        dev: &LoopDevice,
        bdev: &BlockDevice,
        mode: u32,
        cmd: u32,
        arg: usize,
    ) -> Result<i32> {
        super::ioctl::dispatch_compat(dev, bdev, mode, cmd, arg).map(|()| 0)
    }
}

/// Tries the `IOCB_NOWAIT` submission from `queue_rq`; `Err` gives the request back for the
/// caller to queue to the worker.
pub(crate) fn try_nowait(dev: &LoopDevice, counts: &PerQueue, rq: LoopRq) -> Result<(), LoopRq> {
    // As on the worker: the backing file system's allocations must not recurse into I/O.
    // `queue_rq` of a BLOCKING tag set runs inside the set's SRCU read section, which a
    // queue freeze + quiesce waits for (lockdep: srcu -> fs_reclaim -> q_usage_counter).
    let _noio = super::sys::TaskFlags::set(bindings::PF_MEMALLOC_NOIO);
    // The backing file's bios go out before `queue_rq` returns, never onto the list of a
    // submitter that may then sleep waiting for one of our tags (the deadlock of
    // docs/testing.md "Deadlocks").
    let undeferred = super::sys::UndeferredBios::new();
    if undeferred.was_deferring() {
        counts.stats.nowait_undeferred.inc();
    }
    submit_dio(counts, rq, true).inspect_err(|rq| {
        dev.policy.nowait_end(counts, rq, EAGAIN);
    })
}

/// Submits the request as one direct-I/O kiocb over its pages, to the backing file
/// ([`LoopDisk::dio_target`]); `Err` (`nowait` only) gives it back, refused at once.
fn submit_dio(counts: &PerQueue, mut rq: LoopRq, nowait: bool) -> Result<(), LoopRq> {
    let dir = if rq.op() == ReqOp::Write {
        Dir::Write
    } else {
        Dir::Read
    };
    rq.pdu_mut().nowait = nowait;
    counts.stats.backing_inflight.inc();
    let submitted = if nowait {
        rq.submit_dio_nowait(dir)
    } else {
        rq.submit_dio(dir);
        Ok(())
    };
    // Refused: not in flight. Its `nowait` flag is set again by the next submission.
    submitted.inspect_err(|_| {
        counts.stats.backing_inflight.dec();
    })
}

impl RequestAio for LoopDisk {
    /// The bound backing file, at the request's position plus the binding's offset.
    fn dio_target<'r>(
        dev: &'r LoopDevice,
        rq: &'r LoopRq,
    ) -> Result<(&'r BackingFile, u64), isize> {
        let io = dev.io_backing(rq).ok_or(EIO)?;
        let pos = rq.pos().checked_add(io.offset).ok_or(EIO)?;
        Ok((&io.file, pos))
    }

    /// The end of a direct I/O: completes the request, or hands it to the worker after a
    /// late `-EAGAIN` of a `IOCB_NOWAIT` submission.
    fn aio_done(dev: &LoopDevice, mut rq: LoopRq, ret: isize) {
        let counts = counts(dev, &rq);
        counts.stats.backing_inflight.dec();
        let cmd = rq.pdu_mut();
        cmd.ret = ret;
        let nowait = core::mem::replace(&mut cmd.nowait, false);
        if nowait && dev.policy.nowait_end(counts, &rq, ret) == NowaitEnd::Retry {
            // Possibly in interrupt context (`ki_complete`): no sleeping.
            queue_to_worker(dev, rq, false);
            return;
        }
        finish(counts, rq);
    }
}

/// Queues the command to run in its issuer's cgroups: on the worker of the issuer's blkcg
/// (started if needed when `may_sleep`), or on the worker of its hardware queue for the
/// root cgroup.
pub(crate) fn queue_to_worker(dev: &LoopDevice, mut rq: LoopRq, may_sleep: bool) {
    let op = rq.op();
    let counts = counts(dev, &rq);
    dev.policy.queued(counts, op);
    // None for the root cgroup: the workers' own.
    let cgroups = IoCgroups::of(&rq);
    // Starting a thread waits for kthreadd: not from memory reclaim, which may be waiting
    // for this very device.
    let claim = cgroups.as_ref().and_then(|cgroups| {
        dev.cgroup_workers
            .get(cgroups, may_sleep && !super::sys::in_reclaim())
    });
    let cmd = rq.pdu_mut();
    cmd.cgroups = cgroups;
    cmd.cgroup_worker = claim;
    counts.stats.worker_queued.inc();
    if let Err(mut rq) = rq.queue_to_worker() {
        // No hardware queue (not while a request is in flight): undone, and failed.
        counts.stats.worker_queued.dec();
        dev.policy.taken(counts, op);
        drop(rq.pdu_mut().cgroups.take());
        fail(counts, rq, EIO);
    }
}

impl RequestWork for LoopDisk {
    /// The worker of the issuer's blkcg when the command holds a claim on one, else that of
    /// its hardware queue or of a sibling queue ([`super::dispatch::spread_worker`]).
    #[inline]
    fn worker<'r>(dev: &'r LoopDevice, rq: &'r LoopRq) -> Option<&'r KthreadWorker> {
        match &rq.pdu().cgroup_worker {
            Some(claim) => Some(&claim.worker),
            None => dev.hw_queue_worker(rq),
        }
    }

    /// A direct-I/O read or write ([`Route::WorkerDirect`]): its completion arrives through
    /// `aio_done`.
    fn submits_only(dev: &LoopDevice, rq: &LoopRq) -> bool {
        dev.io_backing(rq)
            .is_some_and(|io| SubmissionPolicy::worker_direct(io, rq))
    }

    /// Runs the command on the worker thread and hands the request to completion.
    fn run(dev: &LoopDevice, mut rq: LoopRq) {
        // The claim on a cgroup worker (possibly the current thread's) stays in the command
        // until it ends (`end`): its completion may wait in that worker's batch.
        // Do not throttle the worker on the dirty pages it is cleaning, and do not recurse
        // into I/O from its allocations.
        let _task_flags =
            super::sys::TaskFlags::set(bindings::PF_LOCAL_THROTTLE | bindings::PF_MEMALLOC_NOIO);
        // Charge the I/O and the page cache to the issuer, as if it had done them itself.
        let _cgroups = rq.pdu_mut().cgroups.take().map(IoCgroups::enter);
        let counts = counts(dev, &rq);
        counts.stats.worker_submissions.inc();
        if rq.pdu().cgroup_worker.is_some() {
            counts.stats.cgroup_worker_submissions.inc();
        }
        counts.stats.worker_queued.dec();
        let op = rq.op();
        let Some(io) = dev.io_backing(&rq) else {
            dev.policy.taken(counts, op);
            fail(counts, rq, EIO);
            return;
        };
        match dev.policy.worker_route(&counts.stats, io, &rq) {
            Route::WorkerDirect => {
                // Blocking submission; its completion (or error) arrives through `aio_done`.
                if let Err(rq) = submit_dio(counts, rq, false) {
                    fail(counts, rq, EAGAIN);
                }
            }
            _ => {
                let ret = execute(dev, counts, io, &rq);
                rq.pdu_mut().ret = ret;
                finish(counts, rq);
            }
        }
        // Pairs with `queue_to_worker`.
        dev.policy.taken(counts, op);
    }
}

fn execute(dev: &LoopDevice, counts: &PerQueue, io: &IoState, rq: &LoopRq) -> isize {
    let file = &io.file;
    // A flush has no position (its sector is all ones): only data and range operations
    // compute one.
    let pos = || rq.pos().checked_add(io.offset);
    match rq.op() {
        ReqOp::Read => pos().map_or(EIO, |pos| rw(dev, io, rq, pos, Dir::Read)),
        ReqOp::Write if io.read_only => EIO,
        ReqOp::Write => pos().map_or(EIO, |pos| rw(dev, io, rq, pos, Dir::Write)),
        ReqOp::Flush => {
            let start = counts.flush_begins();
            if dev.next_queue_busy(rq) {
                counts.stats.flushes_racing.inc();
            }
            let ret = match file.fsync() {
                0 => 0,
                _ => EIO,
            };
            counts.flush_ended(start, ret == 0);
            ret
        }
        ReqOp::Discard => {
            counts.stats.discards.inc();
            let ret = pos().map_or(EIO, |pos| {
                fallocate(dev, file, rq, pos, FALLOC_FL_PUNCH_HOLE)
            });
            if ret == 0 {
                counts.discarded();
            }
            ret
        }
        ReqOp::WriteZeroes => {
            counts.stats.write_zeroes.inc();
            let ret = match pos() {
                None => EIO,
                Some(pos) if rq.no_unmap() => zero_allocated(dev, counts, file, rq, pos),
                Some(pos) => fallocate(dev, file, rq, pos, FALLOC_FL_PUNCH_HOLE),
            };
            if ret == 0 {
                counts.zeroed();
            }
            ret
        }
        ReqOp::Other => EIO,
    }
}

/// Buffered read or write of the whole request, bio by bio. Returns the bytes transferred:
/// a read may stop short (end of file), a write may not; or the errno of a bio that failed
/// (also after earlier bios were done: the rest of a read that failed is not end of file, and
/// must not read as zeroes). In the `dontcache` cache mode ([`LoopDevice::dontcache`]) the
/// backing file's page cache does not keep the data.
fn rw(dev: &LoopDevice, io: &IoState, rq: &Request<LoopDisk>, mut pos: u64, dir: Dir) -> isize {
    let file = &io.file;
    let dontcache = io.dontcache && dev.dontcache();
    let mut done: isize = 0;
    for bio in rq.bios() {
        let size = bio.size() as isize;
        let mut iter = IovIter::over_bio(bio, dir);
        let mut left = size;
        while left > 0 {
            let ret = file.rw_sync(dir, &mut iter, pos, rq.ioprio(), dontcache);
            if ret < 0 {
                return ret;
            }
            done += ret;
            pos += ret as u64;
            left -= ret;
            // A write may not stop short. A short read is end of file only if reading on from
            // there gives nothing: the page cache also stops short when a later page fails (a
            // backing block device's partial last block, an I/O error), and that must fail
            // (the next read's error), not read as zeroes.
            if left > 0 && (dir == Dir::Write || ret == 0) {
                return if dir == Dir::Write { EIO } else { done };
            }
        }
    }
    done
}

/// A write-zeroes that must keep the range allocated (`REQ_NOUNMAP`): written, zeroed
/// blocks (`FALLOC_FL_WRITE_ZEROES`, so later writes need no unwritten-extent conversion)
/// where the backing file system offers them, else unwritten ones (`FALLOC_FL_ZERO_RANGE`,
/// loop.c's way). Never past the end of the file: `FALLOC_FL_WRITE_ZEROES` would extend it.
/// Only for regular files: on a block device `FALLOC_FL_WRITE_ZEROES` is a write-zeroes that
/// may unmap (`blkdev_fallocate`), which would drop `REQ_NOUNMAP` on the way down a chain;
/// `FALLOC_FL_ZERO_RANGE` passes it on.
fn zero_allocated(
    dev: &LoopDevice,
    counts: &PerQueue,
    file: &BackingFile,
    rq: &Request<LoopDisk>,
    pos: u64,
) -> isize {
    let len = u64::from(rq.bytes());
    if file.is_reg()
        && dev.discard_enabled()
        && dev.write_zeroes_enabled()
        && pos.checked_add(len).is_some_and(|end| end <= file.size())
    {
        match file.fallocate(FALLOC_FL_WRITE_ZEROES, pos, len) as isize {
            0 => {
                counts.stats.write_zeroes_offloaded.inc();
                return 0;
            }
            EOPNOTSUPP => dev.disable_write_zeroes(),
            _ => return EIO,
        }
    }
    fallocate(dev, file, rq, pos, FALLOC_FL_ZERO_RANGE)
}

fn fallocate(
    dev: &LoopDevice,
    file: &BackingFile,
    rq: &Request<LoopDisk>,
    pos: u64,
    mode: i32,
) -> isize {
    if !dev.discard_enabled() {
        return EOPNOTSUPP;
    }
    let ret = file.fallocate(mode | FALLOC_FL_KEEP_SIZE, pos, u64::from(rq.bytes())) as isize;
    match ret {
        0 => 0,
        EOPNOTSUPP => {
            // The backing file cannot do it: stop advertising discard/write-zeroes, once.
            dev.disable_fallocate(mode);
            EOPNOTSUPP
        }
        _ => EIO,
    }
}

/// Completes the request with the error `ret`.
fn fail(counts: &PerQueue, mut rq: LoopRq, ret: isize) {
    rq.pdu_mut().ret = ret;
    finish(counts, rq);
}

/// Hands a finished command's request to completion: on the worker that ran it, in the
/// batch of completions it ends after the requests queued meanwhile (a worker submitting a
/// backlog ends it, and wakes its submitters, once per backlog); else on this stack when in
/// task context (`queue_rq`, a task-context `ki_complete`), else through
/// `blk_mq_complete_request`. The counters are updated first: once the request completes,
/// the device may go away (its last request is what a teardown waits for). A batched one
/// completes later on this same thread, so counting it afterwards is safe.
fn finish(counts: &PerQueue, rq: LoopRq) {
    let rq = match rq.complete_in_batch() {
        Ok(()) => {
            counts.stats.completions_batched.inc();
            return;
        }
        Err(rq) => rq,
    };
    match LoopRq::may_complete_here() {
        Some(here) => {
            counts.stats.completions_here.inc();
            rq.complete_here(here);
        }
        None => {
            counts.stats.completions_deferred.inc();
            rq.complete();
        }
    }
}

/// Ends a completed request (the `complete` callback).
pub(crate) fn end(dev: &LoopDevice, mut rq: LoopRq) {
    let mut ret = rq.pdu().ret;
    let bytes = rq.bytes() as isize;
    if ret >= 0 {
        let stats = &counts(dev, &rq).stats;
        match rq.op() {
            ReqOp::Read => stats.read_bytes.add(ret as u64),
            ReqOp::Write => stats.write_bytes.add(ret as u64),
            _ => {}
        }
        // A short write is an error.
        if rq.op() == ReqOp::Write && ret < bytes {
            ret = EIO;
        }
    }
    // As loop.c's `lo_complete_rq`: the errno of a failed read or write reaches the caller
    // (`errno_to_blk_status`: `EINVAL` from a backing device that refuses a misaligned direct
    // I/O, `ENOSPC` from a full file system or past a backing device's end, ...); the other
    // commands fail with `EIO` or `EOPNOTSUPP` (`execute`, as loop.c's `loop_handle_cmd`).
    let status = if ret < 0 {
        BlkStatus::from_errno(ret)
    } else {
        if rq.op() == ReqOp::Read && ret < bytes {
            // Past the end of the backing file: the rest reads as zeroes.
            rq.zero_data_from(ret as usize);
        }
        BlkStatus::OK
    };
    dev.policy.ended(load(dev, &rq));
    // Before the request ends (the device, whose list holds the worker, may go once its last
    // request has ended). If this runs in that worker's batch, reaping the worker waits for
    // the batch to return.
    drop(rq.pdu_mut().cgroup_worker.take());
    rq.end(status);
}
