// SPDX-License-Identifier: GPL-2.0

//! [`LoopCmd`]: the per-request data, and what a command does on the backing file.
//!
//! Path of one request. Buffered mode: `queue_rq` starts it and queues its work item on the
//! device's `kthread_worker`; the worker runs [`LoopCmd::run`] (read/write/flush/discard/
//! write-zeroes on the backing file), stores the result and calls `blk_mq_complete_request`;
//! `complete` then ends the request, zero-filling whatever a short read did not cover.
//!
//! Direct-I/O mode: reads and writes become an `IOCB_DIRECT` kiocb on the backing file, built
//! over the request's own pages, completed through `ki_complete`. `queue_rq` first submits it
//! itself with `IOCB_NOWAIT` when that is safe (see [`crate::dispatch`]); `-EAGAIN`,
//! returned at once or through `ki_complete`, hands the command to the worker, which submits it
//! again without `IOCB_NOWAIT`. A command is only ever in one of these places at a time.

use crate::{
    cgroup_workers::CgroupWorkerUse,
    device::{IoState, LoopDevice},
    sys::{
        BackingFile, Bio, BlkStatus, Dir, IoCgroups, KthreadWork, ReqOp, Request,
        FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_WRITE_ZEROES, FALLOC_FL_ZERO_RANGE,
    },
};
use core::{
    cell::UnsafeCell,
    sync::atomic::{AtomicIsize, AtomicU32, Ordering},
};
use kernel::{bindings, prelude::*};

const EIO: isize = -(bindings::EIO as isize);
const EAGAIN: isize = -(bindings::EAGAIN as isize);
const EIOCBQUEUED: isize = -(bindings::EIOCBQUEUED as isize);
const EOPNOTSUPP: isize = -(bindings::EOPNOTSUPP as isize);

/// The per-request data (blk-mq PDU) of a loop device.
#[repr(C)]
pub(crate) struct LoopCmd {
    /// Runs the command on the device's worker thread.
    work: KthreadWork,
    /// Result of the command: bytes transferred (reads and writes), 0, or a negative errno.
    ret: AtomicIsize,
    /// References on a direct-I/O submission: one for the submitter, one for `ki_complete`;
    /// whoever drops the last one finishes the command.
    refs: AtomicU32,
    /// State of a direct-I/O submission.
    dio: UnsafeCell<DioState>,
    /// The issuer's cgroups, from `queue_to_worker` until the worker runs the command (written
    /// and taken only by the context that owns the command).
    cgroups: UnsafeCell<Option<IoCgroups>>,
    /// The worker of the issuer's blkcg, if the command runs on one (same ownership rule).
    cgroup_worker: UnsafeCell<Option<CgroupWorkerUse>>,
}

/// A direct-I/O submission of a command.
///
/// # Invariants
///
/// Accessed only by the context that owns the command: `queue_rq` or the worker before and
/// during submission, and whoever drops the last of [`LoopCmd::refs`] after it.
struct DioState {
    /// The kiocb handed to the backing file; its `ki_complete` is [`LoopCmd::dio_complete`].
    iocb: bindings::kiocb,
    /// The bvec table of a merged (multi-bio) request, freed at completion.
    bvecs: Option<KVec<bindings::bio_vec>>,
    /// The submission used `IOCB_NOWAIT` (from `queue_rq`).
    nowait: bool,
    /// Freeze protection was taken for a write (`kiocb_start_write`).
    write_started: bool,
}

impl LoopCmd {
    /// Initialises the PDU of a new request.
    ///
    /// # Safety
    ///
    /// `cmd` must be valid for writes and not in use.
    pub(crate) unsafe fn init(cmd: *mut Self) {
        // SAFETY: The caller guarantees `cmd` is writable; `work` is not queued.
        unsafe {
            KthreadWork::init(&raw mut (*cmd).work, Self::work_fn);
            (&raw mut (*cmd).ret).write(AtomicIsize::new(0));
            (&raw mut (*cmd).refs).write(AtomicU32::new(0));
            (&raw mut (*cmd).dio).write(UnsafeCell::new(DioState {
                // SAFETY: All-zero is a valid `kiocb`.
                iocb: core::mem::zeroed(),
                bvecs: None,
                nowait: false,
                write_started: false,
            }));
            (&raw mut (*cmd).cgroups).write(UnsafeCell::new(None));
            (&raw mut (*cmd).cgroup_worker).write(UnsafeCell::new(None));
        }
    }

    /// The command of a request.
    pub(crate) fn of(rq: &Request) -> &LoopCmd {
        // SAFETY: Every request of a loop device's tag set carries a `LoopCmd` PDU, initialised
        // in `init_request`.
        unsafe { &*rq.pdu::<LoopCmd>() }
    }

    fn set_result(&self, ret: isize) {
        self.ret.store(ret, Ordering::Relaxed);
    }

    /// The `kthread_work` function of every command, run on a worker thread.
    ///
    /// # Safety
    ///
    /// Only the kthread worker calls this, for an item set up by [`LoopCmd::init`] and queued by
    /// [`LoopCmd::queue_to_worker`]: `work` is the `work` field of the `LoopCmd` PDU of a request
    /// of a loop device's queue, which the driver owns while the item is queued and running.
    unsafe extern "C" fn work_fn(work: *mut bindings::kthread_work) {
        // SAFETY: `work` is the first field of a `LoopCmd` (`repr(C)`), which is the PDU of a
        // request that the driver owns while its work item is queued.
        let cmd = unsafe { &*work.cast::<LoopCmd>() };
        // SAFETY: The PDU follows its request; the request is owned by the driver.
        let rq = unsafe { Request::from_raw(bindings::blk_mq_rq_from_pdu(work.cast())) };
        // SAFETY: The request belongs to a loop device's queue, whose `queuedata` is the
        // device, kept alive by the disk.
        let dev = unsafe { &*(*(*rq.as_raw()).q).queuedata.cast::<LoopDevice>() };
        cmd.run(dev, rq);
    }

    /// Runs the command on the worker thread and hands the request to completion.
    fn run(&self, dev: &LoopDevice, rq: &Request) {
        // Declared first, dropped last: the claim on a cgroup worker (possibly the current
        // thread's) ends only when the command is done with it.
        // SAFETY: The worker owns the command; `queue_to_worker` stored the value before queueing.
        let _claim = unsafe { (*self.cgroup_worker.get()).take() };
        // Do not throttle the worker on the dirty pages it is cleaning, and do not recurse
        // into I/O from its allocations.
        let _task_flags =
            crate::sys::TaskFlags::set(bindings::PF_LOCAL_THROTTLE | bindings::PF_MEMALLOC_NOIO);
        // Charge the I/O and the page cache to the issuer, as if it had done them itself.
        // SAFETY: The worker owns the command; `queue_to_worker` stored the value before queueing.
        let _cgroups = unsafe { (*self.cgroups.get()).take() }.map(IoCgroups::enter);
        dev.stats.worker_submissions.fetch_add(1, Ordering::Relaxed);
        dev.stats.worker_queued.fetch_sub(1, Ordering::Relaxed);
        let Some(io) = dev.io_backing() else {
            if rq.op() == ReqOp::Write {
                dev.steering.taken();
            }
            self.set_result(EIO);
            Self::finish(dev, rq);
            return;
        };
        let is_write = rq.op() == ReqOp::Write;
        let dio_rw = io.direct_io
            && matches!(rq.op(), ReqOp::Read | ReqOp::Write)
            && !(is_write && io.read_only);
        let direct = dio_rw && io.dio_aligned(rq);
        if dio_rw && !direct {
            // Below the backing file's direct-I/O alignment: this one goes buffered.
            dev.stats.dio_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if direct {
            // Blocking submission; its completion (or error) arrives through `dio_complete`.
            let _ = self.submit_dio(dev, io, rq, false);
        } else {
            let ret = Self::execute(dev, io, rq);
            self.set_result(ret);
            Self::finish(dev, rq);
        }
        if is_write {
            // Pairs with `queue_to_worker`; `rq` may be gone, `is_write` was read before.
            dev.steering.taken();
        }
    }

    /// Tries the `IOCB_NOWAIT` submission from `queue_rq`; on `false` the caller queues the
    /// command to the worker.
    pub(crate) fn try_nowait(&self, dev: &LoopDevice, io: &IoState, rq: &Request) -> bool {
        // As on the worker: the backing file system's allocations must not recurse into I/O.
        // `queue_rq` of a BLOCKING tag set runs inside the set's SRCU read section, which a
        // queue freeze + quiesce waits for (lockdep: srcu -> fs_reclaim -> q_usage_counter).
        let _noio = crate::sys::TaskFlags::set(bindings::PF_MEMALLOC_NOIO);
        // The backing file's bios go out before `queue_rq` returns, never onto the list of a
        // submitter that may then sleep waiting for one of our tags (the deadlock of
        // docs/testing.md "Deadlocks").
        let undeferred = crate::sys::UndeferredBios::new();
        if undeferred.was_deferring() {
            dev.stats.nowait_undeferred.fetch_add(1, Ordering::Relaxed);
        }
        match self.submit_dio(dev, io, rq, true) {
            DioSubmit::Queued => true,
            DioSubmit::Again => {
                dev.stats.nowait_eagain.fetch_add(1, Ordering::Relaxed);
                if rq.op() == ReqOp::Write {
                    dev.steering.refused();
                }
                false
            }
        }
    }

    /// Queues the command to run in its issuer's cgroups: on the worker of the issuer's blkcg
    /// (started if needed when `may_sleep`), or on the worker of its hardware queue for the
    /// root cgroup.
    pub(crate) fn queue_to_worker(&self, dev: &LoopDevice, rq: &Request, may_sleep: bool) {
        let Some(queue) = dev.hw_queue_of(rq) else {
            self.set_result(EIO);
            Self::finish(dev, rq);
            return;
        };
        if rq.op() == ReqOp::Write {
            dev.steering.queued();
        }
        let cgroups = IoCgroups::of(rq);
        // Starting a thread waits for kthreadd: not from memory reclaim, which may be waiting
        // for this very device.
        let claim = dev
            .cgroup_workers
            .get(&cgroups, may_sleep && !crate::sys::in_reclaim());
        // SAFETY: The caller owns the command; the worker takes the values when it runs it.
        let claim = unsafe {
            *self.cgroups.get() = Some(cgroups);
            *self.cgroup_worker.get() = claim;
            (*self.cgroup_worker.get()).as_ref()
        };
        dev.stats.worker_queued.fetch_add(1, Ordering::Relaxed);
        match claim {
            Some(c) => c.get().worker.queue(&self.work),
            None => queue.worker.queue(&self.work),
        };
    }

    /// Submits the request as one direct-I/O kiocb over its pages.
    fn submit_dio(&self, dev: &LoopDevice, io: &IoState, rq: &Request, nowait: bool) -> DioSubmit {
        let dir = if rq.op() == ReqOp::Write {
            Dir::Write
        } else {
            Dir::Read
        };
        // SAFETY: The caller owns the command (no submission in flight).
        let st = unsafe { &mut *self.dio.get() };
        let mut iter = if rq.is_multi_bio() {
            // A merged request: one bvec table for all its bios (`rq_for_each_bvec`).
            let flags = if nowait { GFP_NOWAIT } else { GFP_KERNEL };
            let n = rq.bios().map(|b| b.bvecs().count()).sum();
            let mut table = match KVec::with_capacity(n, flags) {
                Ok(t) => t,
                Err(_) if nowait => return DioSubmit::Again,
                Err(_) => {
                    self.set_result(EIO);
                    Self::finish(dev, rq);
                    return DioSubmit::Queued;
                }
            };
            for bio in rq.bios() {
                for bv in bio.bvecs() {
                    // Cannot fail: the capacity is exactly the number of bvecs.
                    let _ = table.push_within_capacity(bv);
                }
            }
            // SAFETY: All-zero is a valid `iov_iter` to initialise.
            let mut iter: bindings::iov_iter = unsafe { core::mem::zeroed() };
            // SAFETY: `table` holds `len` bvecs covering the request's bytes; it is kept in
            // `st.bvecs` until completion.
            unsafe {
                bindings::iov_iter_bvec(
                    &mut iter,
                    dir.iter_dir(),
                    table.as_ptr(),
                    table.len(),
                    rq.bytes() as usize,
                )
            };
            st.bvecs = Some(table);
            iter
        } else {
            match rq.bios().next() {
                Some(bio) => bio_iter(bio, dir),
                None => {
                    self.set_result(EIO);
                    Self::finish(dev, rq);
                    return DioSubmit::Queued;
                }
            }
        };
        // SAFETY: All-zero is a valid `kiocb`.
        st.iocb = unsafe { core::mem::zeroed() };
        st.iocb.ki_filp = io.file.as_raw();
        st.iocb.ki_pos = match rq.pos().checked_add(io.offset) {
            Some(pos) => pos as i64,
            None => {
                st.bvecs = None;
                self.set_result(EIO);
                Self::finish(dev, rq);
                return DioSubmit::Queued;
            }
        };
        st.iocb.ki_complete = Some(Self::dio_complete);
        st.iocb.ki_flags =
            (bindings::IOCB_DIRECT | if nowait { crate::sys::IOCB_NOWAIT } else { 0 }) as i32;
        st.iocb.ki_ioprio = rq.ioprio();
        st.nowait = nowait;
        st.write_started = false;
        if dir == Dir::Write {
            if nowait {
                if !io.file.start_write_trylock(&mut st.iocb) {
                    st.bvecs = None;
                    return DioSubmit::Again;
                }
            } else {
                io.file.start_write(&mut st.iocb);
            }
            st.write_started = true;
        }
        self.refs.store(2, Ordering::Relaxed);
        dev.stats.backing_inflight.fetch_add(1, Ordering::Relaxed);
        let ret = io.file.rw_kiocb(dir, &mut st.iocb, &mut iter);
        if ret == EAGAIN && nowait {
            // Refused at once: `ki_complete` will not run. Undo and let the worker retry.
            // SAFETY: The backing file returned without queueing the kiocb, so we own it again.
            let st = unsafe { &mut *self.dio.get() };
            if st.write_started {
                io.file.end_write(&mut st.iocb);
                st.write_started = false;
            }
            st.bvecs = None;
            self.refs.store(0, Ordering::Relaxed);
            dev.stats.backing_inflight.fetch_sub(1, Ordering::Relaxed);
            return DioSubmit::Again;
        }
        self.put_ref(dev, rq);
        if ret != EIOCBQUEUED {
            self.set_result(ret);
            self.put_ref(dev, rq);
        }
        DioSubmit::Queued
    }

    /// `ki_complete` of a command's direct-I/O kiocb.
    ///
    /// # Safety
    ///
    /// Only the backing file calls this, once per submission that returned `-EIOCBQUEUED`:
    /// `iocb` is the `iocb` of the [`DioState`] of a `LoopCmd` PDU whose request, of a loop
    /// device's queue, is in flight and owned by the driver.
    unsafe extern "C" fn dio_complete(iocb: *mut bindings::kiocb, ret: isize) {
        let off = core::mem::offset_of!(LoopCmd, dio) + core::mem::offset_of!(DioState, iocb);
        // SAFETY: `iocb` is the `iocb` of a `LoopCmd`'s `DioState` (`UnsafeCell` is transparent).
        let cmd = unsafe { &*iocb.cast::<u8>().sub(off).cast::<LoopCmd>() };
        // SAFETY: The PDU follows its request, which is in flight.
        let rq = unsafe {
            Request::from_raw(bindings::blk_mq_rq_from_pdu(
                core::ptr::from_ref(cmd).cast_mut().cast(),
            ))
        };
        // SAFETY: The request belongs to a loop device's queue, whose `queuedata` is the device.
        let dev = unsafe { &*(*(*rq.as_raw()).q).queuedata.cast::<LoopDevice>() };
        cmd.set_result(ret);
        cmd.put_ref(dev, rq);
    }

    /// Drops a submission reference; the last one finishes the direct I/O: releases what it
    /// held, then completes the request, or hands it to the worker after a late `-EAGAIN`.
    fn put_ref(&self, dev: &LoopDevice, rq: &Request) {
        if self.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        dev.stats.backing_inflight.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: Both references are gone: nobody else touches the submission state.
        let st = unsafe { &mut *self.dio.get() };
        st.bvecs = None;
        if st.write_started {
            // SAFETY: Freeze protection was taken on this kiocb's file at submission.
            unsafe { crate::sys::kiocb_end_write(&mut st.iocb) };
            st.write_started = false;
        }
        let is_write = rq.op() == ReqOp::Write;
        if st.nowait && self.ret.load(Ordering::Relaxed) == EAGAIN {
            dev.stats.nowait_eagain.fetch_add(1, Ordering::Relaxed);
            if is_write {
                dev.steering.refused();
            }
            st.nowait = false;
            // Possibly in interrupt context (`ki_complete`): no sleeping.
            self.queue_to_worker(dev, rq, false);
            return;
        }
        if st.nowait {
            dev.stats.nowait_completions.fetch_add(1, Ordering::Relaxed);
            if is_write {
                dev.steering.accepted();
            }
        }
        Self::finish(dev, rq);
    }

    /// Hands a finished command's request to completion: on this stack when in task context
    /// (the worker, `queue_rq`, a task-context `ki_complete`), else through
    /// `blk_mq_complete_request`. The counters are updated first: once the request completes,
    /// the device may go away (its last request is what a teardown waits for).
    fn finish(dev: &LoopDevice, rq: &Request) {
        if Request::may_complete_here() {
            dev.stats.completions_here.fetch_add(1, Ordering::Relaxed);
            rq.complete_here();
        } else {
            dev.stats
                .completions_deferred
                .fetch_add(1, Ordering::Relaxed);
            rq.complete();
        }
    }

    fn execute(dev: &LoopDevice, io: &IoState, rq: &Request) -> isize {
        let file = &io.file;
        // A flush has no position (its sector is all ones): only data and range operations
        // compute one.
        let pos = || rq.pos().checked_add(io.offset);
        match rq.op() {
            ReqOp::Read => pos().map_or(EIO, |pos| Self::rw(dev, io, rq, pos, Dir::Read)),
            ReqOp::Write if io.read_only => EIO,
            ReqOp::Write => pos().map_or(EIO, |pos| Self::rw(dev, io, rq, pos, Dir::Write)),
            ReqOp::Flush => match file.fsync() {
                0 => 0,
                _ => EIO,
            },
            ReqOp::Discard => pos().map_or(EIO, |pos| {
                Self::fallocate(dev, file, rq, pos, FALLOC_FL_PUNCH_HOLE)
            }),
            ReqOp::WriteZeroes if rq.no_unmap() => {
                pos().map_or(EIO, |pos| Self::zero_allocated(dev, file, rq, pos))
            }
            ReqOp::WriteZeroes => pos().map_or(EIO, |pos| {
                Self::fallocate(dev, file, rq, pos, FALLOC_FL_PUNCH_HOLE)
            }),
            ReqOp::Other => EIO,
        }
    }

    /// Buffered read or write of the whole request, bio by bio. Returns the bytes transferred:
    /// a read may stop short (end of file), a write may not. In the `dontcache` cache mode
    /// ([`LoopDevice::dontcache`]) the backing file's page cache does not keep the data.
    fn rw(dev: &LoopDevice, io: &IoState, rq: &Request, mut pos: u64, dir: Dir) -> isize {
        let file = &io.file;
        let dontcache = io.dontcache && dev.dontcache();
        let mut done: isize = 0;
        for bio in rq.bios() {
            let size = bio.size() as isize;
            let mut iter = bio_iter(bio, dir);
            let ret = file.rw_sync(dir, &mut iter, pos, rq.ioprio(), dontcache);
            if ret < 0 {
                return if done > 0 && dir == Dir::Read {
                    done
                } else {
                    ret
                };
            }
            done += ret;
            pos += ret as u64;
            if ret < size {
                return if dir == Dir::Write { EIO } else { done };
            }
        }
        done
    }

    /// A write-zeroes that must keep the range allocated (`REQ_NOUNMAP`): written, zeroed
    /// blocks (`FALLOC_FL_WRITE_ZEROES`, so later writes need no unwritten-extent conversion)
    /// where the backing file system offers them, else unwritten ones (`FALLOC_FL_ZERO_RANGE`,
    /// loop.c's way). Never past the end of the file: `FALLOC_FL_WRITE_ZEROES` would extend it.
    fn zero_allocated(dev: &LoopDevice, file: &BackingFile, rq: &Request, pos: u64) -> isize {
        let len = u64::from(rq.bytes());
        if dev.discard_enabled()
            && dev.write_zeroes_enabled()
            && pos.checked_add(len).is_some_and(|end| end <= file.size())
        {
            match file.fallocate(FALLOC_FL_WRITE_ZEROES, pos, len) as isize {
                0 => {
                    dev.stats
                        .write_zeroes_offloaded
                        .fetch_add(1, Ordering::Relaxed);
                    return 0;
                }
                EOPNOTSUPP => dev.disable_write_zeroes(),
                _ => return EIO,
            }
        }
        Self::fallocate(dev, file, rq, pos, FALLOC_FL_ZERO_RANGE)
    }

    fn fallocate(dev: &LoopDevice, file: &BackingFile, rq: &Request, pos: u64, mode: i32) -> isize {
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

    /// Ends a completed request (the `complete` callback).
    pub(crate) fn end(dev: &LoopDevice, rq: &Request) {
        let cmd = Self::of(rq);
        let mut ret = cmd.ret.load(Ordering::Relaxed);
        let bytes = rq.bytes() as isize;
        if ret >= 0 {
            match rq.op() {
                ReqOp::Read => dev
                    .stats
                    .read_bytes
                    .fetch_add(ret as u64, Ordering::Relaxed),
                ReqOp::Write => dev
                    .stats
                    .write_bytes
                    .fetch_add(ret as u64, Ordering::Relaxed),
                _ => 0,
            };
            // A short write is an error.
            if rq.op() == ReqOp::Write && ret < bytes {
                ret = EIO;
            }
        }
        // As loop.c: every failure is an I/O error, except an unsupported discard/write-zeroes.
        let status = if ret == EOPNOTSUPP {
            BlkStatus::NOTSUPP
        } else if ret < 0 {
            BlkStatus::IOERR
        } else {
            if rq.op() == ReqOp::Read && (ret as u64) < u64::from(rq.bytes()) {
                // Past the end of the backing file: the rest reads as zeroes.
                zero_fill_from(rq, ret as usize);
            }
            BlkStatus::OK
        };
        if let Some(q) = dev.hw_queue_of(rq) {
            q.request_ended();
        }
        rq.end(status);
    }
}

/// Outcome of a direct-I/O submission attempt.
enum DioSubmit {
    /// Submitted (or already completed): the completion path owns the command.
    Queued,
    /// Refused with `-EAGAIN` before anything was queued: retry from the worker.
    Again,
}

/// An `iov_iter` over one bio's data, in place (no copy of the bvec table).
fn bio_iter(bio: Bio<'_>, dir: Dir) -> bindings::iov_iter {
    let (table, offset) = bio.bvec_table();
    let nr = bio.bvecs().count();
    // SAFETY: All-zero is a valid `iov_iter` to initialise.
    let mut iter: bindings::iov_iter = unsafe { core::mem::zeroed() };
    // SAFETY: `table` points at the bio's current bvec; `nr` entries from there cover its
    // `size` bytes starting `offset` bytes into the first one (as loop.c does).
    unsafe { bindings::iov_iter_bvec(&mut iter, dir.iter_dir(), table, nr, bio.size() as usize) };
    iter.iov_offset = offset;
    iter
}

/// Zeroes the request's data from byte `skip` to its end.
fn zero_fill_from(rq: &Request, mut skip: usize) {
    for bio in rq.bios() {
        let size = bio.size() as usize;
        if skip >= size {
            skip -= size;
            continue;
        }
        let mut iter = bio_iter(bio, Dir::Read);
        // SAFETY: `iter` covers the bio's pages, which the request keeps alive.
        unsafe {
            bindings::iov_iter_advance(&mut iter, skip);
            bindings::iov_iter_zero(size - skip, &mut iter);
        }
        skip = 0;
    }
}
