// SPDX-License-Identifier: GPL-2.0

//! An asynchronous direct-I/O `kiocb` embedded in a request's PDU: one submission of the
//! request's pages to a backing file with `IOCB_DIRECT`, completed through `ki_complete`.
//!
//! C header: [`include/linux/fs.h`](srctree/include/linux/fs.h).

use super::{
    file::kiocb_end_write,
    request::{request_of_pdu, RequestPdu},
    BackingFile, Dir, Disk, DiskOps, IovIter, OwnedRequest, IOCB_NOWAIT,
};
use core::{
    cell::UnsafeCell,
    ptr::NonNull,
    sync::atomic::{AtomicIsize, AtomicU32, Ordering},
};
use kernel::{bindings, prelude::*, types::Opaque};

const EAGAIN: isize = -(bindings::EAGAIN as isize);
const EOPNOTSUPP: isize = -(bindings::EOPNOTSUPP as isize);
const EIOCBQUEUED: isize = -(bindings::EIOCBQUEUED as isize);

/// A disk whose requests are submitted to a backing file as asynchronous direct I/O (with the
/// kiocb of their PDU, [`super::request::RequestPdu`]).
pub(crate) trait RequestAio: DiskOps {
    /// The file and byte position that a direct I/O of `rq` goes to
    /// ([`OwnedRequest::submit_dio`]), or the negative errno it fails with. Borrowed from the
    /// request or from its disk's data, the file stays open while the request is in flight.
    fn dio_target<'r>(
        data: &'r Self::Data,
        rq: &'r OwnedRequest<Self>,
    ) -> Result<(&'r BackingFile, u64), isize>;

    /// The backing file is done with a submission that [`OwnedRequest::submit_dio`] (or
    /// [`OwnedRequest::submit_dio_nowait`]) accepted: `ret` is the bytes transferred or a
    /// negative errno (`-EAGAIN` from a `IOCB_NOWAIT` submission that the file gave up on
    /// later; [`Self::dio_target`]'s errno). Called once per accepted submission, after the
    /// kiocb's resources are released, from `ki_complete` (possibly in interrupt context) or
    /// from the submitter, whichever is done last.
    fn aio_done(data: &Self::Data, rq: OwnedRequest<Self>, ret: isize);
}

/// The kiocb of a request and what one submission holds until it is done.
///
/// # Invariants
///
/// While `refs` is 0 only the request's owner touches the fields; between a submission and the
/// drop of the last of its two references, `iocb`, `bvecs` and `write_started` belong to the
/// backing file and to whoever drops the last reference, and `ret` is written only by the
/// submitter (a synchronous result) or `ki_complete`.
pub(crate) struct RequestKiocb {
    /// The kiocb; its `ki_complete` is [`aio_complete`].
    iocb: Opaque<bindings::kiocb>,
    /// References on a submission in flight: the submitter's and `ki_complete`'s.
    refs: AtomicU32,
    /// The result, for [`RequestAio::aio_done`].
    ret: AtomicIsize,
    /// The segment table of a merged (multi-bio) request.
    bvecs: UnsafeCell<Option<KVec<bindings::bio_vec>>>,
    /// Freeze protection was taken for a write (`kiocb_start_write`).
    write_started: UnsafeCell<bool>,
}

impl RequestKiocb {
    /// An idle kiocb, for a new PDU.
    pub(crate) fn new() -> Self {
        Self {
            // SAFETY: All-zero is a valid `kiocb`.
            iocb: Opaque::new(unsafe { core::mem::zeroed() }),
            refs: AtomicU32::new(0),
            ret: AtomicIsize::new(0),
            bvecs: UnsafeCell::new(None),
            write_started: UnsafeCell::new(false),
        }
    }

    /// The `RequestKiocb` of a request of `T`.
    ///
    /// # Safety
    ///
    /// `rq` must be a valid request of a `Disk<T>`.
    unsafe fn of<T: DiskOps>(rq: NonNull<bindings::request>) -> *const Self {
        // SAFETY: The request's PDU is a `RequestPdu<T>` (the caller's contract).
        unsafe { &raw const (*RequestPdu::<T>::of(rq.as_ptr())).kiocb }
    }

    /// Releases what a submission held: its segment table and its freeze protection.
    ///
    /// # Safety
    ///
    /// The caller must own the fields (invariant): no submission in flight, or the last
    /// reference dropped; the file of a write's kiocb must still be open.
    unsafe fn release(this: *const Self) {
        // SAFETY: Owned by the caller.
        unsafe {
            *(*this).bvecs.get() = None;
            if *(*this).write_started.get() {
                *(*this).write_started.get() = false;
                kiocb_end_write((*this).iocb.get());
            }
        }
    }
}

/// Outcome of preparing a submission.
enum Prepared<T: DiskOps> {
    /// Ready: the kiocb is set up.
    Ready(OwnedRequest<T>),
    /// Refused (`IOCB_NOWAIT` only): nothing is held; the caller may try again blocking.
    Refused(OwnedRequest<T>),
    /// Failed with an errno before anything was submitted.
    Failed(OwnedRequest<T>, isize),
}

impl<T: RequestAio> OwnedRequest<T> {
    /// Submits the request's data at the file and position that [`RequestAio::dio_target`]
    /// names, as one `IOCB_DIRECT` kiocb over the request's own pages (a merged request's
    /// segments gathered into one table). The file may block. [`RequestAio::aio_done`]
    /// follows, once.
    pub(crate) fn submit_dio(self, dir: Dir) {
        if let Err(rq) = submit(self, dir, false) {
            // A blocking submission is never refused; should one be, it fails, not hangs.
            done(rq, EAGAIN);
        }
    }

    /// As [`Self::submit_dio`] with `IOCB_NOWAIT`: the file must not block. `Err` gives the
    /// request back when the file (or its freeze protection, or the memory for a merged
    /// request's segment table) is not available without waiting, before anything was
    /// submitted, or refused with `-EOPNOTSUPP` (a block device below that takes no
    /// `REQ_NOWAIT` bio); [`RequestAio::aio_done`] is not called then. The file may also give
    /// up later: `aio_done` gets `-EAGAIN` (or `-EOPNOTSUPP`) then.
    pub(crate) fn submit_dio_nowait(self, dir: Dir) -> Result<(), Self> {
        submit(self, dir, true)
    }
}

/// Submits `rq` to the file [`RequestAio::dio_target`] names for it.
fn submit<T: RequestAio>(
    rq: OwnedRequest<T>,
    dir: Dir,
    nowait: bool,
) -> Result<(), OwnedRequest<T>> {
    // SAFETY: The request is in flight, so its disk's data is alive.
    let data = unsafe { Disk::<T>::data_of_request(&rq) };
    let (file, pos) = match T::dio_target(data, &rq) {
        Ok((file, pos)) => (core::ptr::from_ref(file), pos),
        Err(ret) => {
            done(rq, ret);
            return Ok(());
        }
    };
    // SAFETY: `dio_target` borrowed the file from the request or its disk's data, which stay
    // as they were for as long as the request is in flight and its ownership is this
    // submission's: until `aio_done`, after `BackingFile::submit` has returned.
    let file = unsafe { &*file };
    file.submit(rq, dir, pos, nowait)
}

impl BackingFile {
    fn submit<T: RequestAio>(
        &self,
        rq: OwnedRequest<T>,
        dir: Dir,
        pos: u64,
        nowait: bool,
    ) -> Result<(), OwnedRequest<T>> {
        let k = {
            let raw = NonNull::from(&*rq).cast::<bindings::request>();
            // SAFETY: `rq` is a valid request of a `Disk<T>`.
            unsafe { RequestKiocb::of::<T>(raw) }
        };
        let rq = match self.prepare(rq, k, dir, pos, nowait) {
            Prepared::Ready(rq) => rq,
            Prepared::Refused(rq) => {
                // SAFETY: Nothing was submitted: the owner releases what was taken.
                unsafe { RequestKiocb::release(k) };
                return Err(rq);
            }
            Prepared::Failed(rq, ret) => {
                // SAFETY: As above.
                unsafe { fail_unsubmitted(k, rq, ret) };
                return Ok(());
            }
        };
        // The iterator over the request's pages, built here rather than in `prepare` so that
        // it is never moved (an `iov_iter` moved through an `Option` costs a `memcpy`).
        // SAFETY: Owned (no submission in flight).
        let mut iter = match unsafe { &*(*k).bvecs.get() } {
            // SAFETY: A merged request's table stays in `bvecs`, its heap buffer unmoved, until
            // the submission is released; its pages are the request's.
            Some(table) => unsafe {
                IovIter::from_raw_parts(table.as_ptr(), table.len(), rq.bytes() as usize, dir)
            },
            None => match rq.bios().next() {
                // SAFETY: A bio's pages live until the request ends, after the submission.
                Some(bio) => unsafe { IovIter::over_bio_unbounded(bio, dir) },
                None => {
                    // SAFETY: Nothing was submitted.
                    unsafe { fail_unsubmitted(k, rq, -(bindings::EIO as isize)) };
                    return Ok(());
                }
            },
        };
        let raw = rq.into_raw();
        // INVARIANT: two references, the submitter's and `ki_complete`'s; the request's
        // ownership is theirs until the last one is dropped.
        // SAFETY: Owned (no submission in flight).
        unsafe { (*k).refs.store(2, Ordering::Relaxed) };
        // SAFETY: The kiocb targets this file; `iter` covers pages that the request keeps
        // alive until it ends, after `aio_done`; a merged request's table stays in `bvecs`
        // until the last reference is dropped.
        let ret = unsafe { self.rw_kiocb(dir, (*k).iocb.get(), &mut iter) };
        if (ret == EAGAIN || ret == EOPNOTSUPP) && nowait {
            // Refused at once (`-EOPNOTSUPP`: a device below takes no `REQ_NOWAIT` bio):
            // `ki_complete` will not run, and the request is ours again.
            // SAFETY: Neither reference was dropped and the file holds nothing: the submitter
            // owns the fields and the request.
            return Err(unsafe {
                (*k).refs.store(0, Ordering::Relaxed);
                RequestKiocb::release(k);
                OwnedRequest::from_raw(raw)
            });
        }
        if ret != EIOCBQUEUED {
            // `ki_complete` will not run: its reference goes too.
            // SAFETY: Written before the submitter's reference is dropped (no one reads it yet).
            unsafe { (*k).ret.store(ret, Ordering::Relaxed) };
            // SAFETY: `raw` is a request of a `Disk<T>` holding this reference.
            unsafe { put::<T>(raw) };
        }
        // SAFETY: As above; the submitter does not touch the request afterwards.
        unsafe { put::<T>(raw) };
        Ok(())
    }

    /// Sets up the kiocb of `rq` (flags, position, completion, freeze protection for a write)
    /// and, for a merged request, the table of its segments.
    fn prepare<T: RequestAio>(
        &self,
        rq: OwnedRequest<T>,
        k: *const RequestKiocb,
        dir: Dir,
        pos: u64,
        nowait: bool,
    ) -> Prepared<T> {
        let Ok(pos) = i64::try_from(pos) else {
            return Prepared::Failed(rq, -(bindings::EIO as isize));
        };
        if rq.is_multi_bio() {
            // A merged request: one table for all its bios (`rq_for_each_bvec`).
            let flags = if nowait { GFP_NOWAIT } else { GFP_KERNEL };
            let n = rq.bios().map(|b| b.bvecs().count()).sum();
            let mut table = match KVec::with_capacity(n, flags) {
                Ok(t) => t,
                Err(_) if nowait => return Prepared::Refused(rq),
                Err(_) => return Prepared::Failed(rq, -(bindings::ENOMEM as isize)),
            };
            for bio in rq.bios() {
                for bv in bio.bvecs() {
                    // Cannot fail: the capacity is exactly the number of segments.
                    let _ = table.push_within_capacity(bv);
                }
            }
            // SAFETY: Owned: no submission in flight.
            unsafe { *(*k).bvecs.get() = Some(table) };
        }
        // SAFETY: Owned: no submission in flight.
        let iocb = unsafe { &mut *(*k).iocb.get() };
        // SAFETY: All-zero is a valid `kiocb`.
        *iocb = unsafe { core::mem::zeroed() };
        iocb.ki_filp = self.as_raw();
        iocb.ki_pos = pos;
        iocb.ki_complete = Some(aio_complete::<T>);
        iocb.ki_flags = (bindings::IOCB_DIRECT | if nowait { IOCB_NOWAIT } else { 0 }) as i32;
        iocb.ki_ioprio = rq.ioprio();
        if dir == Dir::Write {
            if nowait {
                if !self.start_write_trylock(iocb) {
                    return Prepared::Refused(rq);
                }
            } else {
                self.start_write(iocb);
            }
            // SAFETY: Owned: no submission in flight.
            unsafe { *(*k).write_started.get() = true };
        }
        Prepared::Ready(rq)
    }
}

/// Ends a request whose submission failed before anything was submitted: releases what was
/// taken and hands it to [`RequestAio::aio_done`] with `ret`.
///
/// # Safety
///
/// `k` must be the kiocb of `rq`, with no submission in flight.
unsafe fn fail_unsubmitted<T: RequestAio>(k: *const RequestKiocb, rq: OwnedRequest<T>, ret: isize) {
    // SAFETY: Owned by the caller (no submission in flight).
    unsafe { RequestKiocb::release(k) };
    done(rq, ret);
}

/// Hands `rq`, its submission over, to [`RequestAio::aio_done`] with `ret`.
fn done<T: RequestAio>(rq: OwnedRequest<T>, ret: isize) {
    // SAFETY: The request belongs to a `Disk<T>` and is in flight for this call.
    let data = unsafe { Disk::<T>::data_of_request(&rq) };
    T::aio_done(data, rq, ret)
}

/// Drops a reference on the submission of `rq`; the last one releases what it held and hands
/// the request to [`RequestAio::aio_done`].
///
/// # Safety
///
/// `rq` must be a request of a `Disk<T>` with a submission in flight on which the caller holds
/// a reference, which it gives up.
unsafe fn put<T: RequestAio>(rq: NonNull<bindings::request>) {
    // SAFETY: Guaranteed by the caller.
    let k = unsafe { RequestKiocb::of::<T>(rq) };
    // SAFETY: The kiocb is valid while a reference is held; only atomics are touched.
    if unsafe { (*k).refs.fetch_sub(1, Ordering::AcqRel) } != 1 {
        return;
    }
    // SAFETY: The last reference: the fields and the request are ours (invariant); the file
    // is still open, the device holds it while requests are in flight.
    let ret = unsafe {
        RequestKiocb::release(k);
        (*k).ret.load(Ordering::Relaxed)
    };
    // SAFETY: The submission's ownership of the request ends with its last reference.
    done(unsafe { OwnedRequest::<T>::from_raw(rq) }, ret)
}

/// `ki_complete` of the kiocbs of the requests of `T`.
///
/// # Safety
///
/// Only the backing file calls this, once per submission that returned `-EIOCBQUEUED`: `iocb`
/// is the kiocb of a [`RequestKiocb`] in the PDU of a request of a `Disk<T>` in flight.
unsafe extern "C" fn aio_complete<T: RequestAio>(iocb: *mut bindings::kiocb, ret: isize) {
    let off =
        core::mem::offset_of!(RequestPdu<T>, kiocb) + core::mem::offset_of!(RequestKiocb, iocb);
    // SAFETY: `iocb` is `off` bytes into the request's `RequestPdu<T>` (`Opaque` is
    // transparent), which follows its request.
    let rq = unsafe {
        let pdu = iocb.cast::<u8>().sub(off).cast::<core::ffi::c_void>();
        request_of_pdu(pdu)
    };
    // SAFETY: The submission is in flight; `ret` is ours to write.
    unsafe {
        (*RequestKiocb::of::<T>(rq))
            .ret
            .store(ret, Ordering::Relaxed)
    };
    // SAFETY: This is `ki_complete`'s reference.
    unsafe { put::<T>(rq) }
}
