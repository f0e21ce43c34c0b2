// SPDX-License-Identifier: GPL-2.0

//! A `kthread_worker` (one kernel thread running queued `kthread_work` items in order) and the
//! `kthread_work` item embedded in each command.
//!
//! C header: [`include/linux/kthread.h`](srctree/include/linux/kthread.h).

use core::ptr::NonNull;
use kernel::{bindings, error::from_err_ptr, prelude::*, types::Opaque};

/// A kernel thread that runs [`KthreadWork`] items one after another.
///
/// # Invariants
///
/// `ptr` is a running worker created by `kthread_create_worker_on_node`, destroyed on drop.
pub(crate) struct KthreadWorker {
    ptr: NonNull<bindings::kthread_worker>,
}

// SAFETY: `kthread_queue_work` and `kthread_flush_worker` may be called from any thread.
unsafe impl Send for KthreadWorker {}
// SAFETY: As above.
unsafe impl Sync for KthreadWorker {}

impl KthreadWorker {
    /// Creates and starts a worker thread named `name`.
    pub(crate) fn new(name: &CStr) -> Result<Self> {
        // SAFETY: The format is "%s" with one C string argument that lives across the call.
        let ptr = from_err_ptr(unsafe {
            bindings::kthread_create_worker_on_node(
                0,
                bindings::NUMA_NO_NODE,
                c"%s".as_char_ptr(),
                name.as_char_ptr(),
            )
        })?;
        // SAFETY: The worker was just created; its task must be woken once to start.
        unsafe { bindings::wake_up_process((*ptr).task) };
        // INVARIANT: the worker was created and started (`from_err_ptr` rules out null).
        Ok(Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
        })
    }

    /// Queues `work`; it runs on this worker's thread. Returns false if it was already queued.
    ///
    /// An item may be queued on a different worker each time (the device's workers change with
    /// its hardware queues), but it must not be queued anywhere else at the same time.
    pub(crate) fn queue(&self, work: &KthreadWork) -> bool {
        let raw = work.0.get();
        // A finished item keeps pointing at the worker that ran it, which `kthread_queue_work`
        // insists be this one, and which may have been destroyed since: forget it. Only the
        // queueing, flush and cancel functions read the field, and this item is never flushed
        // or cancelled while queued elsewhere.
        // SAFETY: The item is not queued (see above), so no worker lock covers the field.
        unsafe { (*raw).worker = core::ptr::null_mut() };
        // SAFETY: The worker is running (type invariant); `work` was initialised.
        unsafe { bindings::kthread_queue_work(self.ptr.as_ptr(), raw) }
    }
}

impl Drop for KthreadWorker {
    fn drop(&mut self) {
        // SAFETY: The worker is running (type invariant); it is destroyed exactly once, after
        // running whatever was still queued.
        unsafe { bindings::kthread_destroy_worker(self.ptr.as_ptr()) }
    }
}

/// A `struct kthread_work`, embedded in a larger structure (here: the command PDU).
#[repr(transparent)]
pub(crate) struct KthreadWork(Opaque<bindings::kthread_work>);

impl KthreadWork {
    /// Initialises the work item in place to run `func` (`kthread_init_work`).
    ///
    /// # Safety
    ///
    /// `slot` must be valid for writes and must not be queued.
    pub(crate) unsafe fn init(
        slot: *mut Self,
        func: unsafe extern "C" fn(*mut bindings::kthread_work),
    ) {
        let work = slot.cast::<bindings::kthread_work>();
        // SAFETY: `kthread_init_work`: zero the item, make its list node empty, set `func`.
        unsafe {
            core::ptr::write_bytes(work, 0, 1);
            let node = &raw mut (*work).node;
            (*node).next = node;
            (*node).prev = node;
            (*work).func = Some(func);
        }
    }
}
