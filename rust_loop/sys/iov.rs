// SPDX-License-Identifier: GPL-2.0

//! An `iov_iter` over pages a request keeps alive: a bio in place, or (in `kiocb.rs`) a table
//! of segments gathered from the bios of a merged request.
//!
//! C header: [`include/linux/uio.h`](srctree/include/linux/uio.h).

use super::{Bio, Dir};
use core::marker::PhantomData;
use kernel::bindings;

/// An `ITER_BVEC` iterator over segments whose pages live for `'a`.
///
/// # Invariants
///
/// `raw` was set up by `iov_iter_bvec` over a bvec table and pages valid for `'a`, and covers
/// no more bytes than the table.
pub(crate) struct IovIter<'a> {
    raw: bindings::iov_iter,
    _pages: PhantomData<&'a bindings::bio_vec>,
}

impl<'a> IovIter<'a> {
    /// The data of one bio, walking its bvec table in place (no copy, as loop.c does).
    pub(crate) fn over_bio(bio: Bio<'a>, dir: Dir) -> Self {
        // SAFETY: The bio lives for `'a`.
        unsafe { Self::over_bio_unbounded(bio, dir) }
    }

    /// As [`Self::over_bio`], for a bio that the caller knows to live for `'a`.
    ///
    /// # Safety
    ///
    /// The bio and its pages must be valid for `'a`.
    pub(super) unsafe fn over_bio_unbounded(bio: Bio<'_>, dir: Dir) -> Self {
        let (table, offset) = bio.bvec_table();
        let nr = bio.bvecs().count();
        // SAFETY: `table` points at the bio's current bvec; `nr` entries from there cover its
        // `size` bytes starting `offset` bytes into the first one; valid for `'a` (caller).
        let mut iter = unsafe { Self::from_raw_parts(table, nr, bio.size() as usize, dir) };
        iter.raw.iov_offset = offset;
        iter
    }

    /// `iov_iter_bvec` over `nr` entries at `table`, `bytes` long.
    ///
    /// # Safety
    ///
    /// The `nr` entries at `table` and their pages must be valid for `'a` and hold at least
    /// `bytes` bytes.
    pub(super) unsafe fn from_raw_parts(
        table: *const bindings::bio_vec,
        nr: usize,
        bytes: usize,
        dir: Dir,
    ) -> Self {
        // SAFETY: All-zero is a valid `iov_iter` to initialise.
        let mut raw: bindings::iov_iter = unsafe { core::mem::zeroed() };
        // SAFETY: Guaranteed by the caller.
        unsafe { bindings::iov_iter_bvec(&mut raw, dir.iter_dir(), table, nr, bytes) };
        // INVARIANT: set up by `iov_iter_bvec` over the caller's table.
        Self {
            raw,
            _pages: PhantomData,
        }
    }

    /// Skips `n` bytes (at most what is left).
    pub(crate) fn advance(&mut self, n: usize) {
        // SAFETY: The iterator covers valid segments (type invariant); `iov_iter_advance`
        // stops at the end.
        unsafe { bindings::iov_iter_advance(&mut self.raw, n) }
    }

    /// Writes zeroes over the next `n` bytes (at most what is left); returns how many.
    pub(crate) fn zero(&mut self, n: usize) -> usize {
        // SAFETY: The iterator covers valid pages (type invariant); `iov_iter_zero` stops at
        // the end.
        unsafe { bindings::iov_iter_zero(n, &mut self.raw) }
    }

    /// The raw iterator, for `read_iter`/`write_iter`.
    pub(super) fn as_raw(&mut self) -> *mut bindings::iov_iter {
        &mut self.raw
    }
}
