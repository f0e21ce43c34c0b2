// SPDX-License-Identifier: GPL-2.0

//! A request handed to the driver by blk-mq: operation, position, length, its bios and their
//! segments, and how it ends.
//!
//! C header: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h).

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{bindings, types::Opaque};

/// Bytes per sector, the unit of request positions.
pub(crate) const SECTOR_SHIFT: u32 = 9;
/// One sector in bytes.
pub(crate) const SECTOR_SIZE: u32 = 1 << SECTOR_SHIFT;

// `include/linux/blk_types.h`: typed macros that bindgen does not export.
const REQ_OP_MASK: u32 = (1 << bindings::REQ_OP_BITS) - 1;
/// `REQ_NOUNMAP`: write-zeroes must not deallocate.
pub(crate) const REQ_NOUNMAP: u32 = 1 << bindings::req_flag_bits___REQ_NOUNMAP;

/// Completion status of a request (`blk_status_t`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BlkStatus(u8);

impl BlkStatus {
    /// Success.
    pub(crate) const OK: Self = Self(0);
    /// `BLK_STS_NOTSUPP`.
    pub(crate) const NOTSUPP: Self = Self(1);
    /// `BLK_STS_IOERR`.
    pub(crate) const IOERR: Self = Self(10);

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

/// A request handed to the driver by blk-mq.
///
/// # Invariants
///
/// The wrapped `struct request` is valid and owned by the driver (started, not yet ended) for as
/// long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct Request(Opaque<bindings::request>);

impl Request {
    /// Borrows a raw request.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a request that the driver owns for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::request) -> &'a Self {
        // SAFETY: `Request` is a transparent wrapper; the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast() }
    }

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
    pub(crate) fn hw_queue(&self) -> u32 {
        // SAFETY: By the type invariant the request is valid; a dispatched request has a
        // hardware context.
        unsafe { rust_loop_rq_hw_queue(self.as_raw().cast()) }
    }

    /// The per-command data of the request.
    pub(crate) fn pdu<T>(&self) -> *mut T {
        // SAFETY: By the type invariant the request is valid; the PDU follows it in memory.
        unsafe { bindings::blk_mq_rq_to_pdu(self.as_raw()).cast() }
    }

    /// Marks the request as started (`blk_mq_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver.
        unsafe { bindings::blk_mq_start_request(self.as_raw()) }
    }

    /// Hands the request to the `complete` callback through `blk_mq_complete_request`,
    /// possibly later or on another CPU (for a single hardware queue: the BLOCK softirq, which
    /// from task context means a ksoftirqd wakeup). The request must not be touched by the
    /// caller afterwards.
    pub(crate) fn complete(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver.
        unsafe { bindings::blk_mq_complete_request(self.as_raw()) }
    }

    /// Whether [`Request::complete_here`] may be called now: in task context, with at least
    /// [`COMPLETE_HERE_MIN_STACK`] bytes of kernel stack left for the completion (the `end_io`
    /// chain of the request's bios).
    pub(crate) fn may_complete_here() -> bool {
        // SAFETY: Reads the current context and stack position.
        unsafe { rust_loop_may_complete_here(COMPLETE_HERE_MIN_STACK as core::ffi::c_ulong) }
    }

    /// Runs the `complete` callback before returning (`blk_mq_complete_request_direct`). Only
    /// when [`Request::may_complete_here`] said so, and with no lock held that the callback
    /// or the bios' `end_io` take. The request must not be touched by the caller afterwards.
    pub(crate) fn complete_here(&self) {
        // SAFETY: By the type invariant the request is valid and owned by the driver; the
        // callback is the queue's own.
        unsafe { rust_loop_complete_request_direct(self.as_raw().cast()) }
    }

    /// Ends the request with `status`.
    pub(crate) fn end(&self, status: BlkStatus) {
        // SAFETY: By the type invariant the request is valid and owned by the driver; ending it
        // gives it back to blk-mq and the caller does not use it afterwards.
        unsafe { bindings::blk_mq_end_request(self.as_raw(), status.0) }
    }
}

/// Iterator over the bios of a request.
pub(crate) struct Bios<'a> {
    next: *mut bindings::bio,
    _rq: PhantomData<&'a Request>,
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
    _rq: PhantomData<&'a Request>,
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
    pub(crate) fn bvec_table(&self) -> (*const bindings::bio_vec, usize) {
        let it = self.iter();
        // SAFETY: `bi_idx` indexes the bio's own bvec table.
        let first = unsafe { (*self.as_raw()).bi_io_vec.add(it.bi_idx as usize) };
        (first, it.bi_offset as usize)
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
        let done = self.iter.bi_offset;
        let len = (bv.bv_len - done).min(self.iter.bi_size);
        // `bvec_iter_advance_single`.
        self.iter.bi_size -= len;
        if done + len == bv.bv_len {
            self.iter.bi_idx += 1;
            self.iter.bi_offset = 0;
        } else {
            self.iter.bi_offset = done + len;
        }
        Some(bindings::bio_vec {
            bv_page: bv.bv_page,
            bv_len: len,
            bv_offset: bv.bv_offset + done,
        })
    }
}

/// Kernel stack bytes that must be left for [`Request::complete_here`] to run the completion
/// (the request's bios' `end_io` chain) on the current stack rather than from the BLOCK
/// softirq.
pub(crate) const COMPLETE_HERE_MIN_STACK: usize = 4096;

extern "C" {
    // rust_loop/helpers.c. `void *`: `struct request` contains zero-sized C members.
    fn rust_loop_rq_hw_queue(rq: *mut core::ffi::c_void) -> core::ffi::c_uint;
    fn rust_loop_may_complete_here(min_stack: core::ffi::c_ulong) -> bool;
    fn rust_loop_complete_request_direct(rq: *mut core::ffi::c_void);
}
