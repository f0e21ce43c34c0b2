// SPDX-License-Identifier: GPL-2.0

//! A request handed to the driver by blk-mq: operation, position, length, its bios and their
//! segments, and how it ends.
//!
//! C header: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h).

use super::{Dir, DiskOps, IovIter, KthreadWork, RequestKiocb};
use core::{marker::PhantomData, mem::ManuallyDrop, ops::Deref, ptr::NonNull};
use kernel::{bindings, types::Opaque};

/// Bytes per sector, the unit of request positions.
pub(crate) const SECTOR_SHIFT: u32 = super::layout::c::SECTOR_SHIFT as u32;
/// One sector in bytes.
pub(crate) const SECTOR_SIZE: u32 = 1 << SECTOR_SHIFT;

// `include/linux/blk_types.h`: typed macros that bindgen does not export.
const REQ_OP_MASK: u32 = (1 << bindings::REQ_OP_BITS) - 1;
/// `REQ_NOUNMAP`: write-zeroes must not deallocate.
pub(crate) const REQ_NOUNMAP: u32 = super::layout::c::REQ_NOUNMAP as u32;

/// Completion status of a request (`blk_status_t`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BlkStatus(u8);

impl BlkStatus {
    /// Success.
    pub(crate) const OK: Self = Self(super::layout::c::BLK_STS_OK as u8);
    /// `BLK_STS_IOERR`.
    pub(crate) const IOERR: Self = Self(super::layout::c::BLK_STS_IOERR as u8);

    /// The status of a command that failed with the negative errno `err`, as the block layer
    /// maps it (`errno_to_blk_status`): `-EINVAL` is `BLK_STS_INVAL`, `-ENOSPC`
    /// `BLK_STS_NOSPC`, `-EOPNOTSUPP` `BLK_STS_NOTSUPP`, ..., anything else `BLK_STS_IOERR`.
    /// The caller sees the errno again (`blk_status_to_errno`).
    pub(crate) fn from_errno(err: isize) -> Self {
        let err = i32::try_from(err).unwrap_or(-(bindings::EIO as i32));
        // SAFETY: `errno_to_blk_status` only looks its argument up in a constant table.
        Self(unsafe { bindings::errno_to_blk_status(err) })
    }

    /// The `blk_status_t` value.
    pub(crate) const fn as_raw(self) -> u8 {
        self.0
    }
}

/// The operation of a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReqOp {
    /// Read data.
    Read,
    /// Write data.
    Write,
    /// Flush the volatile write cache.
    Flush,
    /// Discard (deallocate) a range.
    Discard,
    /// Write zeroes to a range.
    WriteZeroes,
    /// Any other operation (not advertised by rust_loop).
    Other,
}

/// A request of a disk of `T` (a [`DiskOps`] implementation), borrowed from the
/// [`OwnedRequest`] that the driver holds for it.
///
/// # Invariants
///
/// The wrapped `struct request` belongs to the queue of a [`super::Disk<T>`] (its PDU an
/// initialised [`RequestPdu<T>`]) and is owned by the driver (started, not yet ended) for as
/// long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct Request<T: DiskOps>(Opaque<bindings::request>, PhantomData<T>);

impl<T: DiskOps> Request<T> {
    /// The raw `struct request`.
    pub(crate) fn as_raw(&self) -> *mut bindings::request {
        self.0.get()
    }

    fn cmd_flags(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid; `cmd_flags` is stable while owned.
        unsafe { (*self.as_raw()).cmd_flags }
    }

    /// The request's operation.
    pub(crate) fn op(&self) -> ReqOp {
        match self.cmd_flags() & REQ_OP_MASK {
            bindings::req_op_REQ_OP_READ => ReqOp::Read,
            bindings::req_op_REQ_OP_WRITE => ReqOp::Write,
            bindings::req_op_REQ_OP_FLUSH => ReqOp::Flush,
            bindings::req_op_REQ_OP_DISCARD => ReqOp::Discard,
            bindings::req_op_REQ_OP_WRITE_ZEROES => ReqOp::WriteZeroes,
            _ => ReqOp::Other,
        }
    }

    /// Whether a write-zeroes request must keep the blocks allocated (`REQ_NOUNMAP`).
    pub(crate) fn no_unmap(&self) -> bool {
        self.cmd_flags() & REQ_NOUNMAP != 0
    }

    /// Byte position of the request on the device.
    pub(crate) fn pos(&self) -> u64 {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).__sector << SECTOR_SHIFT }
    }

    /// Remaining bytes of the request.
    pub(crate) fn bytes(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).__data_len }
    }

    /// Whether the request carries more than one bio (it was merged).
    pub(crate) fn is_multi_bio(&self) -> bool {
        // SAFETY: By the type invariant the request is valid.
        unsafe { (*self.as_raw()).bio != (*self.as_raw()).biotail }
    }

    /// The request's I/O priority (`req_get_ioprio`: that of its first bio).
    pub(crate) fn ioprio(&self) -> u16 {
        self.bios().next().map_or(0, |b| {
            // SAFETY: The bio is valid for the request's lifetime.
            unsafe { (*b.as_raw()).bi_ioprio }
        })
    }

    /// The request's bios, in order.
    pub(crate) fn bios(&self) -> Bios<'_> {
        // SAFETY: By the type invariant the request is valid.
        let next = unsafe { (*self.as_raw()).bio };
        Bios {
            next,
            _rq: PhantomData,
        }
    }

    /// Index of the hardware queue the request was dispatched on.
    #[inline]
    pub(crate) fn hw_queue(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid; a request handed to the driver
        // was dispatched, so `mq_hctx` points to its hardware context, which outlives it.
        unsafe { (*(*self.as_raw()).mq_hctx).queue_num }
    }

    /// The driver's per-command data of the request.
    fn pdu_ptr(&self) -> *mut T::Pdu {
        // SAFETY: By the type invariant the request is valid, of a `Disk<T>`.
        unsafe { &raw mut (*RequestPdu::<T>::of(self.as_raw())).cmd }
    }
}

/// What the tag set of a [`super::Disk<T>`] places after each request (its `cmd_size`
/// bytes): the work item and the kiocb this layer runs the request with
/// ([`super::RequestWork`], [`super::RequestAio`]), then the driver's own per-command data,
/// `T::Pdu`. Only this layer reaches the first two, by their fields, so the driver's data
/// carries no layout contract.
#[repr(C)]
pub(super) struct RequestPdu<T: DiskOps> {
    /// Runs the request on a worker thread.
    pub(super) work: KthreadWork,
    /// Submits the request's pages to a backing file.
    pub(super) kiocb: RequestKiocb,
    /// The driver's data.
    pub(super) cmd: T::Pdu,
}

impl<T: DiskOps> RequestPdu<T> {
    /// The PDU of `rq`.
    ///
    /// # Safety
    ///
    /// `rq` must be a request of the tag set of a `Disk<T>`.
    pub(super) unsafe fn of(rq: *mut bindings::request) -> *mut Self {
        // SAFETY: The tag set's PDUs are `RequestPdu<T>`s (`cmd_size`), after their requests.
        unsafe { pdu_of(rq) }.cast()
    }

    /// Initialises the PDU of `rq`, a new request, in place.
    ///
    /// # Safety
    ///
    /// `rq` must be a new request of the tag set of a `Disk<T>`, not in use; its PDU is
    /// uninitialised.
    pub(super) unsafe fn init(rq: *mut bindings::request) {
        // SAFETY: The caller's contract: the PDU is ours to write, and nothing is queued.
        unsafe {
            let this = Self::of(rq);
            KthreadWork::init_request(&raw mut (*this).work, rq);
            (&raw mut (*this).kiocb).write(RequestKiocb::new());
            (&raw mut (*this).cmd).write(T::new_pdu());
        }
    }

    /// Drops the PDU of `rq` that [`Self::init`] made.
    ///
    /// # Safety
    ///
    /// `rq` must be a request of the tag set of a `Disk<T>` whose PDU [`Self::init`]
    /// initialised, unused from now on.
    pub(super) unsafe fn drop_in_place(rq: *mut bindings::request) {
        // SAFETY: The caller's contract.
        unsafe { core::ptr::drop_in_place(Self::of(rq)) }
    }
}

/// A request that the driver owns: handed to it by `queue_rq`, or back to it by the `complete`
/// callback, a worker ([`super::RequestWork`]) or the end of a direct I/O
/// ([`super::RequestAio`]). Ending it, or handing it on, consumes it: nothing can touch a
/// request the driver gave away. Only the owner reaches the PDU, mutably.
///
/// # Invariants
///
/// `ptr` is a request of the queue of a [`super::Disk<T>`] (its PDU an initialised
/// [`RequestPdu<T>`]), owned by the driver (started, not yet ended), and this is the only
/// `OwnedRequest` for it: nothing else accesses its PDU while it exists.
#[must_use = "a request must be ended or handed on"]
pub(crate) struct OwnedRequest<T: DiskOps> {
    ptr: NonNull<bindings::request>,
    _disk: PhantomData<T>,
}

impl<T: DiskOps> OwnedRequest<T> {
    /// Takes ownership of a raw request.
    ///
    /// # Safety
    ///
    /// `ptr` must be a request of the queue of a `Disk<T>`, owned by the driver, and the
    /// caller gives up every other access to it and its PDU while the value exists.
    pub(super) unsafe fn from_raw(ptr: NonNull<bindings::request>) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self {
            ptr,
            _disk: PhantomData,
        }
    }

    /// Gives up the value, not the request: the caller keeps the ownership it stood for (in
    /// a work item or kiocb that [`OwnedRequest::from_raw`] takes it back from).
    pub(super) fn into_raw(self) -> NonNull<bindings::request> {
        ManuallyDrop::new(self).ptr
    }

    /// The request's per-command data.
    pub(crate) fn pdu(&self) -> &T::Pdu {
        // SAFETY: The PDU is initialised and only the owner accesses it (type invariant).
        unsafe { &*self.pdu_ptr() }
    }

    /// The request's per-command data, mutably: the owner is its only user.
    pub(crate) fn pdu_mut(&mut self) -> &mut T::Pdu {
        // SAFETY: The PDU is initialised and only the owner accesses it (type invariant);
        // `&mut self` makes this the only reference.
        unsafe { &mut *self.pdu_ptr() }
    }

    /// Marks the request as started (`blk_mq_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver.
        unsafe { bindings::blk_mq_start_request(self.as_raw()) }
    }

    /// Hands the request to the `complete` callback through `blk_mq_complete_request`,
    /// possibly later or on another CPU (for a single hardware queue: the BLOCK softirq, which
    /// from task context means a ksoftirqd wakeup).
    pub(crate) fn complete(self) {
        let rq = self.into_raw();
        // SAFETY: By the type invariant the request is valid and owned by the driver, which
        // gives it up here (`self` is consumed) until `complete` hands it back.
        unsafe { bindings::blk_mq_complete_request(rq.as_ptr()) }
    }

    /// Whether [`OwnedRequest::complete_here`] may run now: in task context, with at least
    /// [`COMPLETE_HERE_MIN_STACK`] bytes of kernel stack left for the completion (the `end_io`
    /// chain of the request's bios). The proof it returns is for this context, at once.
    pub(crate) fn may_complete_here() -> Option<CompleteHere> {
        // SAFETY: Reads the current context and stack position.
        unsafe { rust_loop_may_complete_here(COMPLETE_HERE_MIN_STACK as core::ffi::c_ulong) }
            .then_some(CompleteHere(PhantomData))
    }

    /// Runs the `complete` callback before returning (`blk_mq_complete_request_direct`), where
    /// [`OwnedRequest::may_complete_here`] allowed it, with no lock held that the callback or
    /// the bios' `end_io` take.
    pub(crate) fn complete_here(self, _here: CompleteHere) {
        let rq = self.into_raw();
        // SAFETY: By the type invariant the request is valid and owned by the driver, which
        // gives it up (`self` is consumed) to the queue's own `complete` callback; the context
        // can run it (`_here`).
        unsafe { rust_loop_complete_request_direct(rq.as_ptr().cast()) }
    }

    /// Ends the request with `status`, giving it back to blk-mq.
    pub(crate) fn end(self, status: BlkStatus) {
        let rq = self.into_raw();
        // SAFETY: By the type invariant the request is valid and owned by the driver; `self`
        // is consumed, so nothing uses it afterwards.
        unsafe { bindings::blk_mq_end_request(rq.as_ptr(), status.0) }
    }

    /// Zeroes the request's data from byte `skip` to its end (what a short read left).
    pub(crate) fn zero_data_from(&mut self, mut skip: usize) {
        for bio in self.bios() {
            let size = bio.size() as usize;
            if skip >= size {
                skip -= size;
                continue;
            }
            let mut iter = IovIter::over_bio(bio, Dir::Read);
            iter.advance(skip);
            iter.zero(size - skip);
            skip = 0;
        }
    }
}

/// A request dropped without an end (a driver bug: every path must end it or hand it on) is
/// ended with an I/O error, so that its submitter does not wait for ever, with a warning.
impl<T: DiskOps> Drop for OwnedRequest<T> {
    fn drop(&mut self) {
        kernel::pr_warn!("request dropped without an end: ended with an I/O error\n");
        // SAFETY: By the type invariant the request is valid and owned by the driver; it is
        // dropped, so nothing uses it afterwards.
        unsafe { bindings::blk_mq_end_request(self.ptr.as_ptr(), BlkStatus::IOERR.0) }
    }
}

/// Proof that the current context may run a request's completion on its own stack (see
/// [`OwnedRequest::may_complete_here`]); it cannot leave the thread.
pub(crate) struct CompleteHere(PhantomData<*mut ()>);

impl<T: DiskOps> Deref for OwnedRequest<T> {
    type Target = Request<T>;

    fn deref(&self) -> &Request<T> {
        // SAFETY: `Request` is a transparent wrapper of the request, which is valid and owned
        // while `self` exists (type invariant) and belongs to a `Disk<T>`.
        unsafe { &*self.ptr.as_ptr().cast() }
    }
}

/// Iterator over the bios of a request.
pub(crate) struct Bios<'a> {
    next: *mut bindings::bio,
    _rq: PhantomData<&'a bindings::request>,
}

impl<'a> Iterator for Bios<'a> {
    type Item = Bio<'a>;

    fn next(&mut self) -> Option<Bio<'a>> {
        let bio = NonNull::new(self.next)?;
        // SAFETY: The bios of an owned request are valid and linked by `bi_next`.
        self.next = unsafe { (*bio.as_ptr()).bi_next };
        Some(Bio {
            ptr: bio,
            _rq: PhantomData,
        })
    }
}

/// A bio of an owned request.
#[derive(Clone, Copy)]
pub(crate) struct Bio<'a> {
    ptr: NonNull<bindings::bio>,
    _rq: PhantomData<&'a bindings::request>,
}

impl<'a> Bio<'a> {
    /// The raw `struct bio`.
    pub(crate) fn as_raw(&self) -> *mut bindings::bio {
        self.ptr.as_ptr()
    }

    fn iter(&self) -> bindings::bvec_iter {
        // SAFETY: The bio is valid for `'a`; `bvec_iter` is `Copy` (read unaligned: it is packed).
        unsafe { core::ptr::addr_of!((*self.as_raw()).bi_iter).read_unaligned() }
    }

    /// Bytes of data in the bio.
    pub(crate) fn size(&self) -> u32 {
        self.iter().bi_size
    }

    /// The bio's multi-page segments (`bio_for_each_bvec`).
    pub(crate) fn bvecs(&self) -> BvecIter<'a> {
        // SAFETY: The bio is valid for `'a`.
        let table = unsafe { (*self.as_raw()).bi_io_vec };
        BvecIter {
            table,
            iter: self.iter(),
            _bio: PhantomData,
        }
    }

    /// The bio's bvec table starting at its current position, with the offset into the first
    /// entry: what `iov_iter_bvec` needs to walk the bio in place.
    pub(super) fn bvec_table(&self) -> (*const bindings::bio_vec, usize) {
        let it = self.iter();
        // SAFETY: `bi_idx` indexes the bio's own bvec table.
        let first = unsafe { (*self.as_raw()).bi_io_vec.add(it.bi_idx as usize) };
        (first, super::compat::bvec_iter_offset(&it) as usize)
    }
}

/// Iterator over the multi-page bio_vecs of one bio (`for_each_mp_bvec`).
pub(crate) struct BvecIter<'a> {
    table: *const bindings::bio_vec,
    iter: bindings::bvec_iter,
    _bio: PhantomData<Bio<'a>>,
}

impl Iterator for BvecIter<'_> {
    type Item = bindings::bio_vec;

    fn next(&mut self) -> Option<bindings::bio_vec> {
        if self.iter.bi_size == 0 {
            return None;
        }
        // SAFETY: While `bi_size` is non-zero, `bi_idx` indexes a valid entry of the bio's table.
        let bv = unsafe { *self.table.add(self.iter.bi_idx as usize) };
        let done = super::compat::bvec_iter_offset(&self.iter);
        let len = (bv.bv_len - done).min(self.iter.bi_size);
        // `bvec_iter_advance_single`.
        self.iter.bi_size -= len;
        if done + len == bv.bv_len {
            self.iter.bi_idx += 1;
            super::compat::set_bvec_iter_offset(&mut self.iter, 0);
        } else {
            super::compat::set_bvec_iter_offset(&mut self.iter, done + len);
        }
        Some(bindings::bio_vec {
            bv_page: bv.bv_page,
            bv_len: len,
            bv_offset: bv.bv_offset + done,
        })
    }
}

/// The PDU of a request (`blk_mq_rq_to_pdu`, inline: the helper call costs more than the
/// addition; `layout.rs` checks `struct request`'s size against C's at build time).
///
/// # Safety
///
/// `rq` must be a valid request of a blk-mq queue.
pub(super) unsafe fn pdu_of(rq: *mut bindings::request) -> *mut core::ffi::c_void {
    // SAFETY: The PDU follows the request in the same allocation (`rq + 1`).
    unsafe { rq.add(1) }.cast()
}

/// The request of a PDU (`blk_mq_rq_from_pdu`, inline as [`pdu_of`]).
///
/// # Safety
///
/// `pdu` must be the PDU of a valid request.
pub(super) unsafe fn request_of_pdu(pdu: *mut core::ffi::c_void) -> NonNull<bindings::request> {
    // SAFETY: The request precedes its PDU in the same allocation, and is not null.
    unsafe { NonNull::new_unchecked(pdu.cast::<bindings::request>().sub(1)) }
}

/// Whether the current context is a task (not an interrupt, softirq or NMI).
pub(super) fn in_task() -> bool {
    // SAFETY: Reads the current context; a minimum stack of 0 always holds.
    unsafe { rust_loop_may_complete_here(0) }
}

/// Ends a request through its queue's `complete` callback, on the current stack
/// ([`OwnedRequest::complete_here`] for a request held by raw pointer).
///
/// # Safety
///
/// `rq` must be a valid request of a blk-mq queue, owned by the driver, which gives it up;
/// the caller must be in task context with the stack that `complete_here` asks for.
pub(super) unsafe fn complete_direct(rq: *mut bindings::request) {
    // SAFETY: Forwarded from the caller.
    unsafe { rust_loop_complete_request_direct(rq.cast()) }
}

/// Kernel stack bytes that must be left for [`OwnedRequest::complete_here`] to run the completion
/// (the request's bios' `end_io` chain) on the current stack rather than from the BLOCK
/// softirq.
pub(crate) const COMPLETE_HERE_MIN_STACK: usize = 4096;

extern "C" {
    // rust_loop/helpers.c. `void *`: `struct request` contains zero-sized C members.
    fn rust_loop_may_complete_here(min_stack: core::ffi::c_ulong) -> bool;
    fn rust_loop_complete_request_direct(rq: *mut core::ffi::c_void);
}
