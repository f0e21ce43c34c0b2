// SPDX-License-Identifier: GPL-2.0

//! A `kthread_worker` (one kernel thread running queued `kthread_work` items in order) and the
//! `kthread_work` item embedded in each command.
//!
//! C header: [`include/linux/kthread.h`](srctree/include/linux/kthread.h).

use super::{
    request::{pdu_of, request_of_pdu},
    Disk, DiskOps, OwnedRequest,
};
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

    /// The process ID of the worker's thread.
    pub(crate) fn pid(&self) -> i32 {
        // SAFETY: The worker is running (type invariant), so its task is alive until
        // `kthread_destroy_worker` in `drop`.
        unsafe { rust_loop_kthread_worker_pid(self.ptr.as_ptr().cast()) }
    }

    /// Hands `rq` to a worker thread, which runs [`RequestWork::run`] for it: on the worker
    /// that `pick` finds in the request's PDU, else on `default`. The worker that `pick`
    /// returns must stay alive while the request is queued (a claim in the PDU, dropped by
    /// `run`, does that).
    ///
    /// A request may be queued on a different worker each time (a device's workers change
    /// with its hardware queues), never on two at once: this consumes its ownership.
    pub(crate) fn queue_request<T: RequestWork>(
        rq: OwnedRequest<T>,
        default: &KthreadWorker,
        pick: impl for<'a> FnOnce(&'a T::Pdu) -> Option<&'a KthreadWorker>,
    ) {
        let worker = pick(rq.pdu()).unwrap_or(default).ptr;
        let raw = rq.into_raw();
        // SAFETY: `raw` is a request of a `Disk<T>`, whose PDU holds a `KthreadWork` at
        // `T::WORK_OFFSET` (the contract of `RequestWork`).
        let work = unsafe { pdu_of(raw.as_ptr()).cast::<u8>().add(T::WORK_OFFSET) }
            .cast::<bindings::kthread_work>();
        // A finished item keeps pointing at the worker that ran it, which `kthread_queue_work`
        // insists be this one, and which may have been destroyed since: forget it. Only the
        // queueing, flush and cancel functions read the field, and this item is never flushed
        // or cancelled.
        // SAFETY: The item is not queued (we own the request), so no worker lock covers it.
        unsafe { (*work).worker = core::ptr::null_mut() };
        // SAFETY: `worker` is running: `default` is borrowed, and the one `pick` returned is
        // kept alive by the request's PDU, which `run` releases only after the item started;
        // a worker is destroyed only after a flush, which takes the lock this call releases
        // last. The item was set up for `T` by `KthreadWork::init_request`; the worker's
        // function takes the request's ownership back.
        unsafe { bindings::kthread_queue_work(worker.as_ptr(), work) };
    }
}

/// A disk whose requests run on [`KthreadWorker`]s: each request's PDU embeds a
/// [`KthreadWork`], set up by [`KthreadWork::init_request`].
///
/// # Safety
///
/// Every `Self::Pdu` must hold, `WORK_OFFSET` bytes from its start, a [`KthreadWork`]
/// initialised by `KthreadWork::init_request::<Self>` when the PDU was.
pub(crate) unsafe trait RequestWork: DiskOps {
    /// Offset of the [`KthreadWork`] in `Self::Pdu`.
    const WORK_OFFSET: usize;

    /// Runs a request queued by [`KthreadWorker::queue_request`], on the worker's thread.
    fn run(data: &Self::Data, rq: OwnedRequest<Self>);
}

/// The `kthread_work` function of the requests of a disk of `T`.
///
/// # Safety
///
/// Only a worker calls this, for an item set up by `KthreadWork::init_request::<T>` and
/// queued by [`KthreadWorker::queue_request`], which gave up the request's ownership to it.
unsafe extern "C" fn request_work_fn<T: RequestWork>(work: *mut bindings::kthread_work) {
    // SAFETY: `work` is `T::WORK_OFFSET` bytes into the PDU of a request of a `Disk<T>`
    // (`RequestWork`'s contract); the PDU follows its request.
    let rq = unsafe {
        let pdu = work
            .cast::<u8>()
            .sub(T::WORK_OFFSET)
            .cast::<core::ffi::c_void>();
        request_of_pdu(pdu)
    };
    // SAFETY: `queue_request` handed the ownership of the request to this item.
    let rq = unsafe { OwnedRequest::<T>::from_raw(rq) };
    // SAFETY: The request belongs to the queue of a `Disk<T>`, whose data outlives its
    // requests in flight.
    let data = unsafe { Disk::<T>::data_of_request(&rq) };
    T::run(data, rq)
}

impl Drop for KthreadWorker {
    fn drop(&mut self) {
        // SAFETY: The worker is running (type invariant); it is destroyed exactly once, after
        // running whatever was still queued.
        unsafe { bindings::kthread_destroy_worker(self.ptr.as_ptr()) }
    }
}

extern "C" {
    /// `worker` is a `struct kthread_worker *` (opaque here: bindgen's struct reaches
    /// `task_struct`, which is not FFI-safe).
    fn rust_loop_kthread_worker_pid(worker: *mut core::ffi::c_void) -> i32;
}

/// A `struct kthread_work`, embedded in a request's PDU ([`RequestWork`]).
#[repr(transparent)]
pub(crate) struct KthreadWork(Opaque<bindings::kthread_work>);

impl KthreadWork {
    /// Initialises the work item of a request's PDU in place (`kthread_init_work`), to run
    /// [`RequestWork::run`] for `T`.
    ///
    /// # Safety
    ///
    /// `slot` must be valid for writes, `T::WORK_OFFSET` bytes into the PDU of a request of a
    /// `Disk<T>` being initialised, and not queued.
    pub(crate) unsafe fn init_request<T: RequestWork>(slot: *mut Self) {
        let work = slot.cast::<bindings::kthread_work>();
        // SAFETY: `kthread_init_work`: zero the item, make its list node empty, set `func`.
        unsafe {
            core::ptr::write_bytes(work, 0, 1);
            let node = &raw mut (*work).node;
            (*node).next = node;
            (*node).prev = node;
            (*work).func = Some(request_work_fn::<T>);
        }
    }
}
