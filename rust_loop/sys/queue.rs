// SPDX-License-Identifier: GPL-2.0

//! A disk's request queue: limits updates, freezing, flags.
//!
//! C header: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use kernel::{bindings, error::to_result, prelude::*, types::Opaque};

use super::TaskFlags;

/// `BLK_FEAT_WRITE_CACHE`: the device has a volatile write cache (flushes are meaningful).
pub(crate) const BLK_FEAT_WRITE_CACHE: u32 = super::layout::c::BLK_FEAT_WRITE_CACHE as u32;

/// A request queue of a disk this driver created.
///
/// # Invariants
///
/// The queue is valid for as long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct Queue(Opaque<bindings::request_queue>);

impl Queue {
    /// Borrows a raw queue.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::request_queue) -> &'a Self {
        // SAFETY: Transparent wrapper; validity is the caller's guarantee.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut bindings::request_queue {
        self.0.get()
    }

    /// Freezes the queue: waits for every request in flight to end and holds new ones back
    /// until the returned guard is dropped.
    pub(crate) fn freeze(&self) -> QueueFreeze<'_> {
        // SAFETY: The queue is valid; the guard unfreezes it exactly once.
        unsafe { bindings::blk_mq_freeze_queue_nomemsave(self.as_raw()) };
        QueueFreeze {
            queue: self,
            _noio: TaskFlags::set(bindings::PF_MEMALLOC_NOIO),
        }
    }

    /// Updates the queue limits under the queue's limits lock (`queue_limits_start_update` /
    /// `queue_limits_commit_update`).
    pub(crate) fn update_limits(&self, f: impl FnOnce(&mut bindings::queue_limits)) -> Result {
        // SAFETY: The queue is valid. `queue_limits_start_update` is `mutex_lock(&q->limits_lock)`
        // plus a copy of the limits; `queue_limits_commit_update` releases the lock.
        unsafe {
            let q = self.as_raw();
            bindings::mutex_lock(&raw mut (*q).limits_lock);
            let mut lim = (*q).limits;
            f(&mut lim);
            to_result(bindings::queue_limits_commit_update(q, &mut lim))
        }
    }

    /// Updates the queue limits and commits them with the queue frozen, then runs `frozen`
    /// while it still is (the `queue_limits_start_update`, `blk_mq_freeze_queue`,
    /// `queue_limits_commit_update` sequence of loop.c).
    pub(crate) fn update_limits_frozen(
        &self,
        f: impl FnOnce(&mut bindings::queue_limits),
        frozen: impl FnOnce(&QueueFreeze<'_>),
    ) -> Result {
        let q = self.as_raw();
        // SAFETY: The queue is valid; this is `queue_limits_start_update`, whose lock
        // `queue_limits_commit_update` releases below.
        let mut lim = unsafe {
            bindings::mutex_lock(&raw mut (*q).limits_lock);
            (*q).limits
        };
        f(&mut lim);
        let guard = self.freeze();
        // SAFETY: The limits lock is held (taken above); commit releases it.
        let rc = unsafe { bindings::queue_limits_commit_update(q, &mut lim) };
        frozen(&guard);
        drop(guard);
        to_result(rc)
    }

    /// Whether rq-qos policies (wbt, iolatency, iocost) are attached to the queue.
    pub(crate) fn has_rq_qos(&self) -> bool {
        // SAFETY: The queue is valid; the pointer is only compared with null.
        unsafe { !core::ptr::read_volatile(&raw const (*self.as_raw()).rq_qos).is_null() }
    }

    /// A copy of the current limits.
    pub(crate) fn limits(&self) -> bindings::queue_limits {
        // SAFETY: The queue is valid; reading a snapshot of the limits is what the C helpers do.
        unsafe { (*self.as_raw()).limits }
    }

    /// Sets or clears a `QUEUE_FLAG_*`.
    pub(crate) fn set_flag(&self, flag: u32, on: bool) {
        // SAFETY: The queue is valid; the flag helpers use atomic bit operations.
        unsafe {
            if on {
                bindings::blk_queue_flag_set(flag, self.as_raw())
            } else {
                bindings::blk_queue_flag_clear(flag, self.as_raw())
            }
        }
    }
}

/// A frozen queue; unfreezes on drop.
pub(crate) struct QueueFreeze<'a> {
    queue: &'a Queue,
    /// `memalloc_noio_save()` for the time of the freeze, as `blk_mq_freeze_queue`.
    _noio: TaskFlags,
}

impl Drop for QueueFreeze<'_> {
    fn drop(&mut self) {
        // SAFETY: The queue was frozen by `Queue::freeze`, which created this guard.
        unsafe { bindings::blk_mq_unfreeze_queue_nomemrestore(self.queue.as_raw()) };
    }
}
