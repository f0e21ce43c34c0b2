// SPDX-License-Identifier: GPL-2.0

//! A workqueue of the module's own (`alloc_workqueue`), drained and destroyed on drop.
//!
//! The kernel crate wraps the system workqueues ([`kernel::workqueue::system_unbound`] and
//! friends), which a module cannot drain at unload; this owns one that it can.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use core::{ops::Deref, ptr::NonNull};
use kernel::{bindings, prelude::*, workqueue::Queue};

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
