// SPDX-License-Identifier: GPL-2.0

//! A `kthread_worker` (one kernel thread running queued `kthread_work` items in order), the
//! `kthread_work` item embedded in each command, and the [`Reaper`] that stops workers off the
//! path of whoever drops them.
//!
//! C header: [`include/linux/kthread.h`](srctree/include/linux/kthread.h).

use core::ptr::NonNull;
use kernel::{
    bindings,
    error::from_err_ptr,
    impl_has_work, new_work,
    prelude::*,
    types::Opaque,
    workqueue::{Queue, Work, WorkItem},
};

kernel::sync::global_lock! {
    // SAFETY: Initialised by `Reaper::start` (module init) before any worker exists.
    /// The [`Reaper`]'s workqueue (`struct workqueue_struct *`, 0 when there is none).
    unsafe(uninit) static REAPER_QUEUE: Mutex<usize> = 0;
}

/// Stops dropped [`KthreadWorker`]s in the background: `kthread_destroy_worker` waits for the
/// thread to exit, some 30 ms under TCG, which `LOOP_CLR_FD`, the last close and the
/// submitter that reaps an idle per-cgroup worker need not wait for. Dropping the `Reaper`
/// (module exit) waits for every stop it was given.
pub(crate) struct Reaper(());

impl Reaper {
    /// Creates the reaper's workqueue. Called once, at module init, before any worker exists.
    pub(crate) fn start() -> Result<Self> {
        // SAFETY: Called once, before any use of the lock.
        unsafe { REAPER_QUEUE.init() };
        // SAFETY: A constant name without format arguments; the flags are valid.
        let wq = unsafe {
            bindings::alloc_workqueue_noprof(
                c"rust_loop_reaper".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND,
                0,
            )
        };
        if wq.is_null() {
            return Err(ENOMEM);
        }
        *REAPER_QUEUE.lock() = wq as usize;
        Ok(Self(()))
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // From here on workers are destroyed where they are dropped.
        let wq = core::mem::replace(&mut *REAPER_QUEUE.lock(), 0);
        if wq != 0 {
            // SAFETY: Created in `start`; no longer reachable through the lock. Destroying it
            // first runs every queued stop.
            unsafe { bindings::destroy_workqueue(wq as *mut bindings::workqueue_struct) };
        }
    }
}

/// A dropped worker waiting for the [`Reaper`] to stop it.
#[pin_data]
struct ReapWork {
    #[pin]
    work: Work<ReapWork>,
    /// The `struct kthread_worker *`, flushed and no longer used by anyone else.
    worker: usize,
}

impl_has_work! {
    impl HasWork<Self> for ReapWork { self.work }
}

impl WorkItem for ReapWork {
    type Pointer = Pin<KBox<Self>>;

    fn run(this: Pin<KBox<Self>>) {
        // SAFETY: The worker was handed over by `KthreadWorker::drop`, which gave up every
        // other use of it; it is destroyed exactly once, here.
        unsafe { bindings::kthread_destroy_worker(this.worker as *mut bindings::kthread_worker) }
    }
}

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
        let ptr = self.ptr.as_ptr();
        // Whatever was queued runs to its end before `drop` returns, as with a synchronous
        // destroy: the items' code and the structures they touch last (a per-cgroup worker's
        // use count) may go away once it has.
        // SAFETY: The worker is running (type invariant).
        unsafe { bindings::kthread_flush_worker(ptr) };
        let reap = KBox::pin_init(
            pin_init!(ReapWork {
                work <- new_work!("rust_loop::ReapWork"),
                worker: ptr as usize,
            }),
            GFP_KERNEL,
        );
        if let Ok(reap) = reap {
            let wq = REAPER_QUEUE.lock();
            if *wq != 0 {
                // SAFETY: The queue exists while the lock holds a non-zero pointer: `Reaper`'s
                // drop clears it under the lock before destroying the queue.
                let queue = unsafe { Queue::from_raw(*wq as *const bindings::workqueue_struct) };
                queue.enqueue(reap);
                return;
            }
        }
        // No reaper (module exit) or no memory: stop it here.
        // SAFETY: The worker is running (type invariant); it is destroyed exactly once.
        unsafe { bindings::kthread_destroy_worker(ptr) }
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
