// SPDX-License-Identifier: GPL-2.0

//! [`LoopCmd`]: the per-request data, and what a command does on the backing file.
//!
//! Path of one request: `queue_rq` starts it and queues its work item on the device's
//! `kthread_worker`; the worker runs [`LoopCmd::run`] (read/write/flush/discard/write-zeroes on the
//! backing file), stores the result and calls `blk_mq_complete_request`; `complete` then ends the
//! request, zero-filling whatever a short read did not cover. A command is only ever in one of
//! these places at a time.

use crate::{
    backing::{BackingFile, Dir, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE},
    blk::{BlkStatus, Bio, ReqOp, Request},
    device::LoopDevice,
    worker::KthreadWork,
};
use core::sync::atomic::{AtomicIsize, Ordering};
use kernel::bindings;

const EIO: isize = -(bindings::EIO as isize);
const EOPNOTSUPP: isize = -(bindings::EOPNOTSUPP as isize);

/// The per-request data (blk-mq PDU) of a loop device.
#[repr(C)]
pub(crate) struct LoopCmd {
    /// Runs the command on the device's worker thread.
    work: KthreadWork,
    /// Result of the command: bytes transferred (reads and writes), 0, or a negative errno.
    ret: AtomicIsize,
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
        }
    }

    /// The command of a request.
    pub(crate) fn of(rq: &Request) -> &LoopCmd {
        // SAFETY: Every request of a loop device's tag set carries a `LoopCmd` PDU, initialised
        // in `init_request`.
        unsafe { &*rq.pdu::<LoopCmd>() }
    }

    /// The work item that runs this command on the device's worker.
    pub(crate) fn work(&self) -> &KthreadWork {
        &self.work
    }

    fn set_result(&self, ret: isize) {
        self.ret.store(ret, Ordering::Relaxed);
    }

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
        let _task_flags = TaskIoFlags::enter();
        let ret = match dev.io_backing() {
            Some(io) => Self::execute(dev, io, rq),
            None => EIO,
        };
        self.set_result(ret);
        rq.complete();
    }

    fn execute(dev: &LoopDevice, io: &crate::device::IoState, rq: &Request) -> isize {
        let file = &io.file;
        let pos = rq.pos() + io.offset;
        match rq.op() {
            ReqOp::Read => Self::rw(file, rq, pos, Dir::Read),
            ReqOp::Write if io.read_only => EIO,
            ReqOp::Write => Self::rw(file, rq, pos, Dir::Write),
            ReqOp::Flush => match file.fsync() {
                0 => 0,
                _ => EIO,
            },
            ReqOp::Discard => Self::fallocate(dev, file, rq, pos, FALLOC_FL_PUNCH_HOLE),
            ReqOp::WriteZeroes => {
                let mode =
                    if rq.no_unmap() { FALLOC_FL_ZERO_RANGE } else { FALLOC_FL_PUNCH_HOLE };
                Self::fallocate(dev, file, rq, pos, mode)
            }
            ReqOp::Other => EIO,
        }
    }

    /// Buffered read or write of the whole request, bio by bio, through `vfs_iter_*`. Returns
    /// the bytes transferred: a read may stop short (end of file), a write may not.
    fn rw(file: &BackingFile, rq: &Request, mut pos: u64, dir: Dir) -> isize {
        let mut done: isize = 0;
        for bio in rq.bios() {
            let size = bio.size() as isize;
            let mut iter = bio_iter(bio, dir);
            let ret = file.rw_iter(dir, &mut iter, pos);
            if ret < 0 {
                return if done > 0 && dir == Dir::Read { done } else { ret };
            }
            done += ret;
            pos += ret as u64;
            if ret < size {
                return if dir == Dir::Write { EIO } else { done };
            }
        }
        done
    }

    fn fallocate(dev: &LoopDevice, file: &BackingFile, rq: &Request, pos: u64, mode: i32) -> isize {
        if !dev.discard_enabled() {
            return EOPNOTSUPP;
        }
        let ret = file.fallocate(mode | FALLOC_FL_KEEP_SIZE, pos, rq.bytes() as u64) as isize;
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
    pub(crate) fn end(rq: &Request) {
        let cmd = Self::of(rq);
        let ret = cmd.ret.load(Ordering::Relaxed);
        // As loop.c: every failure is an I/O error, except an unsupported discard/write-zeroes.
        let status = if ret == EOPNOTSUPP {
            BlkStatus::NOTSUPP
        } else if ret < 0 {
            BlkStatus::IOERR
        } else {
            if rq.op() == ReqOp::Read && (ret as u64) < rq.bytes() as u64 {
                // Past the end of the backing file: the rest reads as zeroes.
                zero_fill_from(rq, ret as usize);
            }
            BlkStatus::OK
        };
        rq.end(status);
    }
}

/// An `iov_iter` over one bio's data, in place (no copy of the bvec table).
fn bio_iter(bio: Bio<'_>, dir: Dir) -> bindings::iov_iter {
    let (table, offset) = bio.bvec_table();
    let nr = bio.bvecs().count();
    // SAFETY: All-zero is a valid `iov_iter` to initialise.
    let mut iter: bindings::iov_iter = unsafe { core::mem::zeroed() };
    // SAFETY: `table` points at the bio's current bvec; `nr` entries from there cover its
    // `size` bytes starting `offset` bytes into the first one (as loop.c does).
    unsafe {
        bindings::iov_iter_bvec(&mut iter, dir.iter_dir(), table, nr as _, bio.size() as usize)
    };
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

/// The worker's task flags while it runs a command: `PF_LOCAL_THROTTLE` (do not throttle the
/// loop worker on the dirty pages it is cleaning) and `PF_MEMALLOC_NOIO` (no recursion into I/O).
struct TaskIoFlags {
    old: u32,
}

impl TaskIoFlags {
    fn enter() -> Self {
        // SAFETY: The current task changes only its own flags.
        let old = unsafe {
            let cur = bindings::get_current();
            let old = (*cur).flags;
            (*cur).flags |= bindings::PF_LOCAL_THROTTLE | bindings::PF_MEMALLOC_NOIO;
            old
        };
        Self { old }
    }
}

impl Drop for TaskIoFlags {
    fn drop(&mut self) {
        let mask = bindings::PF_LOCAL_THROTTLE | bindings::PF_MEMALLOC_NOIO;
        // SAFETY: As in `enter`.
        unsafe {
            let cur = bindings::get_current();
            (*cur).flags = ((*cur).flags & !mask) | (self.old & mask);
        }
    }
}
