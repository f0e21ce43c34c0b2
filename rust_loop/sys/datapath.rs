// SPDX-License-Identifier: GPL-2.0

//! [`DataPathCell`]: a value that a queue's requests read without a lock, replaced only while
//! no request reads it ([`DataPathIdle`]): what a block driver's `queue_rq` needs of its
//! device's configuration (loop.c reads `lo->lo_backing_file` the same way, under the same
//! rule).

use super::QueueFreeze;
use core::{cell::UnsafeCell, marker::PhantomData};

/// A witness that no request reads a device's [`DataPathCell`]s while it lives: the queue is
/// frozen ([`DataPathIdle::frozen`]), or the driver vouches that no request is in flight and
/// none can start reading the cells ([`DataPathIdle::assume`]).
pub(crate) struct DataPathIdle<'a>(PhantomData<&'a ()>);

impl<'a> DataPathIdle<'a> {
    /// The queue is frozen: no request is in flight.
    pub(crate) fn frozen(_frozen: &'a QueueFreeze<'_>) -> Self {
        Self(PhantomData)
    }

    /// No request reads the cells while `_guard` (the driver's lock over reconfiguration) is
    /// borrowed.
    ///
    /// # Safety
    ///
    /// Every request that may read the device's cells must have ended, and no new one may
    /// read them until `_guard` is released (for example: requests read them only after they
    /// found the device bound, it is not, and none that found it bound is in flight).
    pub(crate) unsafe fn assume<G>(_guard: &'a G) -> Self {
        Self(PhantomData)
    }
}

/// A value read by a queue's requests in flight without a lock.
///
/// # Invariants
///
/// The value is written only while no request reads it ([`DataPathIdle`]), and read only by
/// requests in flight or by holders of the lock that writers hold too, so reads and writes
/// never overlap.
pub(crate) struct DataPathCell<T>(UnsafeCell<T>);

// SAFETY: The value moves with the cell; `T: Send` is all that needs.
unsafe impl<T: Send> Send for DataPathCell<T> {}
// SAFETY: Shared access reads `T` from several threads (`T: Sync`) and replaces it from another
// one (`T: Send`), never both at once (type invariant).
unsafe impl<T: Send + Sync> Sync for DataPathCell<T> {}

impl<T> DataPathCell<T> {
    /// A cell holding `value`.
    pub(crate) const fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// Replaces the value while no request reads it; returns the old one.
    pub(crate) fn replace(&self, _idle: &DataPathIdle<'_>, value: T) -> T {
        // SAFETY: No request reads the cell (witnessed by `_idle`), and writers are serialised
        // by the lock `_idle` borrows or by the freeze.
        unsafe { core::mem::replace(&mut *self.0.get(), value) }
    }

    /// The value, read by a request in flight or under the writers' lock.
    ///
    /// # Safety
    ///
    /// For as long as the reference lives, the caller must be handling a request that may read
    /// the cell (one that found the device bound), or hold the lock writers hold.
    pub(crate) unsafe fn get(&self) -> &T {
        // SAFETY: No writer meanwhile (the caller's contract and the type invariant).
        unsafe { &*self.0.get() }
    }
}
