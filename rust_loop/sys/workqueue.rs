// SPDX-License-Identifier: GPL-2.0

//! A workqueue of the module's own (`alloc_workqueue`), drained and destroyed on drop.
//!
//! The kernel crate wraps the system workqueues ([`kernel::workqueue::system_unbound`] and
//! friends), which a module cannot drain at unload; this owns one that it can.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use core::{ops::Deref, ptr::NonNull};
use kernel::{
    bindings,
    prelude::*,
    workqueue::{DelayedWork, Queue},
};

/// A workqueue allocated by the module. Dropping it runs every item still queued, then frees
/// it (`destroy_workqueue`), so code queued on it cannot outlive its owner.
///
/// # Invariants
///
/// `ptr` was returned by `alloc_workqueue` and is destroyed only on drop.
pub(crate) struct OwnedQueue {
    ptr: NonNull<bindings::workqueue_struct>,
}

// SAFETY: A workqueue is used through thread-safe C APIs (`queue_work_on`,
// `destroy_workqueue`).
unsafe impl Send for OwnedQueue {}
// SAFETY: As above.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates an unbound workqueue (`WQ_UNBOUND`: its items run on any CPU, as many at once
    /// as the kernel's default allows) named `name`.
    pub(crate) fn new_unbound(name: &CStr) -> Result<Self> {
        // SAFETY: The format is "%s" with one C string argument that lives across the call.
        let ptr = unsafe {
            bindings::alloc_workqueue_noprof(
                c"%s".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND,
                0,
                name.as_char_ptr(),
            )
        };
        // INVARIANT: `ptr` came from `alloc_workqueue` (null is refused).
        Ok(Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
        })
    }
}

impl Deref for OwnedQueue {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        // SAFETY: The workqueue stays valid until `self` is dropped (type invariant), which
        // the returned borrow cannot outlive.
        unsafe { Queue::from_raw(self.ptr.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: The workqueue is valid (type invariant) and destroyed exactly once; nothing
        // can queue on it any more, as that takes a borrow of `self`.
        unsafe { bindings::destroy_workqueue(self.ptr.as_ptr()) }
    }
}

/// Runs `work` now if it is queued with a delay, and waits until it has run
/// (`flush_delayed_work`); returns at once if it is not queued. The kernel crate can queue a
/// delayed item but neither flush nor cancel one, which a module must do before the queue or
/// the item's code goes away.
pub(crate) fn flush_delayed_work<T: ?Sized, const ID: u64>(work: &DelayedWork<T, ID>) {
    // SAFETY: `work` is a valid, aligned `DelayedWork`, so `raw_as_work` yields the
    // `work_struct` of its `delayed_work`.
    let work = unsafe { DelayedWork::raw_as_work(work) }.cast::<bindings::work_struct>();
    // SAFETY: `work` is the `work` field of a `struct delayed_work` (that of `DelayedWork`), so
    // its container is within the same object.
    let dwork = unsafe { kernel::container_of!(work, bindings::delayed_work, work) };
    // SAFETY: `dwork` is the `struct delayed_work` around that `work_struct`, initialised by
    // `DelayedWork::new` (which a `&DelayedWork` implies); flushing may sleep, as may callers
    // of this function.
    unsafe { bindings::flush_delayed_work(dwork) };
}
