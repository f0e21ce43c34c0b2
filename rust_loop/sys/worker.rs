// SPDX-License-Identifier: GPL-2.0

//! A `kthread_worker` (one kernel thread running queued `kthread_work` items in order) and the
//! `kthread_work` item embedded in each command, and the [`Backlog`] a worker carries from one
//! command to the next (the plug of its submissions, the batch of its completions).
//!
//! C header: [`include/linux/kthread.h`](srctree/include/linux/kthread.h).

use super::{request::RequestPdu, Disk, DiskOps, OwnedRequest};
use core::{cell::UnsafeCell, ptr::NonNull};
use kernel::{bindings, error::from_err_ptr, prelude::*, task::Task, types::Opaque};

/// A kernel thread that runs [`KthreadWork`] items one after another.
///
/// # Invariants
///
/// `ptr` is a running worker created by `kthread_create_worker_on_node`, destroyed on drop;
/// `batch` is its [`Backlog`], set up for it, and stays at its address (boxed, never
/// moved out) until the worker has been destroyed.
pub(crate) struct KthreadWorker {
    ptr: NonNull<bindings::kthread_worker>,
    batch: KBox<Backlog>,
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
        let ptr = NonNull::new(ptr).ok_or(ENOMEM)?;
        // SAFETY: The worker was just created: its `task` is set.
        let task = unsafe { (*ptr.as_ptr()).task };
        // SAFETY: The worker's task must be woken once to start (before anything can stop it:
        // `kthread_destroy_worker` waits for the thread to run a flush item). Nothing is queued
        // to it before this function returns.
        unsafe { bindings::wake_up_process(task) };
        let batch = match KBox::new(
            Backlog {
                work: Opaque::uninit(),
                worker: ptr,
                task,
                head: UnsafeCell::new(core::ptr::null_mut()),
                tail: UnsafeCell::new(core::ptr::null_mut()),
                in_run: UnsafeCell::new(false),
                plug: Opaque::uninit(),
                plugged: UnsafeCell::new(0),
            },
            GFP_KERNEL,
        ) {
            Ok(batch) => batch,
            Err(e) => {
                // SAFETY: Created and started above, nothing queued: stopped and freed once.
                unsafe { bindings::kthread_destroy_worker(ptr.as_ptr()) };
                return Err(e.into());
            }
        };
        // SAFETY: The item is not queued yet; the box does not move from here on.
        unsafe { init_work(batch.work.get(), Some(batch_work_fn)) };
        // INVARIANT: the worker was created and started; the batch is set up for it, boxed,
        // before any item can be queued.
        Ok(Self { ptr, batch })
    }

    /// Whether items wait in the worker's queue, not yet started: a hint, read without the
    /// worker's lock (an item may be queued or start at any moment).
    pub(crate) fn has_queued(&self) -> bool {
        self.batch.has_queued()
    }

    /// The process ID of the worker's thread.
    pub(crate) fn pid(&self) -> i32 {
        // SAFETY: The worker is running (type invariant), so its task is alive until
        // `kthread_destroy_worker` in `drop`.
        unsafe { rust_loop_kthread_worker_pid(self.ptr.as_ptr().cast()) }
    }
}

impl<T: RequestWork> OwnedRequest<T> {
    /// Hands the request to the worker thread that [`RequestWork::worker`] names for it,
    /// which runs [`RequestWork::run`] for it; `Err` gives it back when there is none.
    ///
    /// A request may be queued on a different worker each time (a device's workers change
    /// with its hardware queues), never on two at once: this consumes its ownership.
    pub(crate) fn queue_to_worker(self) -> Result<(), Self> {
        // SAFETY: The request is in flight, so its disk's data is alive.
        let data = unsafe { Disk::<T>::data_of_request(&self) };
        let Some(target) = T::worker(data, &self) else {
            return Err(self);
        };
        let worker = target.ptr;
        let batch: *const Backlog = &*target.batch;
        let raw = self.into_raw();
        // SAFETY: `raw` is a request of a `Disk<T>`.
        let item = unsafe { work_of::<T>(raw.as_ptr()) };
        // SAFETY: We own the request, so no one else reads its item; the item's `batch` may
        // point to the batch until the request ends ([`OwnedRequest::complete_in_batch`]),
        // which the worker outlives (the contract of `RequestWork::worker`).
        unsafe { (*item).batch = batch };
        let work = item.cast::<bindings::kthread_work>();
        // A finished item keeps pointing at the worker that ran it, which `kthread_queue_work`
        // insists be this one, and which may have been destroyed since: forget it. Only the
        // queueing, flush and cancel functions read the field, and this item is never flushed
        // or cancelled. The function is set here, where `T` is known to be a `RequestWork`.
        // SAFETY: The item is not queued (we own the request), so no worker lock covers it.
        unsafe {
            (*work).worker = core::ptr::null_mut();
            (*work).func = Some(request_work_fn::<T>);
        }
        // SAFETY: `worker` is running: `RequestWork::worker` borrowed it from the request or
        // its disk's data, and nothing has touched either since (the request was given to
        // the item only, which is not queued yet); a worker is destroyed only after a flush,
        // which takes the lock this call releases last. The item was set up by
        // `KthreadWork::init_request`; the worker's function takes the request's ownership back.
        unsafe { bindings::kthread_queue_work(worker.as_ptr(), work) };
        Ok(())
    }
}

/// A disk whose requests run on [`KthreadWorker`]s (with the work item of their PDU,
/// [`super::request::RequestPdu`]).
pub(crate) trait RequestWork: DiskOps {
    /// The worker that runs `rq` ([`OwnedRequest::queue_to_worker`]), or none. It must stay
    /// alive until the request has ended (its completion may be collected in the worker's
    /// [`Backlog`], [`OwnedRequest::complete_in_batch`]): borrowed from the request
    /// or from its disk's data, it lives at least while the request is in flight.
    fn worker<'r>(data: &'r Self::Data, rq: &'r OwnedRequest<Self>) -> Option<&'r KthreadWorker>;

    /// Whether `rq`, about to run, only submits its backing I/O and does not wait for it (a
    /// direct I/O), so that its submission may wait in the worker's plug with those of the
    /// requests queued behind it ([`Backlog`]). A request that waits for its own I/O must not
    /// run under the plug: the wait would flush it through kblockd, a context switch more.
    fn submits_only(data: &Self::Data, rq: &OwnedRequest<Self>) -> bool;

    /// Runs a request queued by [`OwnedRequest::queue_to_worker`], on the worker's thread.
    fn run(data: &Self::Data, rq: OwnedRequest<Self>);
}

/// The `kthread_work` function of the requests of a disk of `T`.
///
/// # Safety
///
/// Only a worker calls this, for the item of a request of a `Disk<T>` queued by
/// [`OwnedRequest::queue_to_worker`], which gave up the request's ownership to it.
unsafe extern "C" fn request_work_fn<T: RequestWork>(work: *mut bindings::kthread_work) {
    let item = work.cast::<KthreadWork>();
    // SAFETY: The item is in the PDU of a request of a `Disk<T>`, which this function owns;
    // `init_request` set `rq`, `queue_to_worker` set `batch` to the batch of the worker
    // running it.
    let (rq, batch) = unsafe { ((*item).rq, (*item).batch) };
    // SAFETY: The batch of this worker, alive while its thread runs this item.
    let batch = unsafe { batch.as_ref() };
    // SAFETY: `queue_to_worker` handed the ownership of the request to this item; `rq` is the
    // item's request (not null).
    let rq = unsafe { OwnedRequest::<T>::from_raw(NonNull::new_unchecked(rq)) };
    // SAFETY: The request belongs to the queue of a `Disk<T>`, whose data outlives its
    // requests in flight.
    let data = unsafe { Disk::<T>::data_of_request(&rq) };
    if let Some(b) = batch {
        // SAFETY: On the batch's thread, at the start of a request item.
        unsafe { b.start_of_run(T::submits_only(data, &rq)) };
    }
    T::run(data, rq);
    if let Some(b) = batch {
        // SAFETY: On the batch's thread, at the end of a request item.
        unsafe { b.end_of_run() };
    }
}

impl Drop for KthreadWorker {
    fn drop(&mut self) {
        // SAFETY: The worker is running (type invariant). Its batch's item, queued before the
        // destroy's flush item, ends a plug left open by a backlog; the worker is destroyed
        // exactly once, after running whatever was still queued.
        unsafe {
            bindings::kthread_queue_work(self.ptr.as_ptr(), self.batch.work.get());
            bindings::kthread_destroy_worker(self.ptr.as_ptr())
        }
    }
}

extern "C" {
    /// `worker` is a `struct kthread_worker *` (opaque here: bindgen's struct reaches
    /// `task_struct`, which is not FFI-safe).
    fn rust_loop_kthread_worker_pid(worker: *mut core::ffi::c_void) -> i32;
}

/// A `struct kthread_work`, embedded in a request's PDU ([`RequestWork`]), with the request's
/// place in a worker's [`Backlog`].
///
/// # Invariants
///
/// `rq` is the request whose PDU holds this item. `batch` is null or the batch of the worker
/// the request was last queued to, which is alive until the request ends. `next` is only read
/// or written by that worker's thread, while the request is in the batch.
#[repr(C)]
pub(crate) struct KthreadWork {
    work: Opaque<bindings::kthread_work>,
    batch: *const Backlog,
    next: *mut KthreadWork,
    rq: *mut bindings::request,
}

// SAFETY: The raw pointers are only followed by the request's owner, or by the worker thread of
// the batch while it holds the request (type invariant); the item moves with its request.
unsafe impl Send for KthreadWork {}

impl KthreadWork {
    /// Initialises the work item of a request's PDU in place (`kthread_init_work`); its
    /// function is set when it is queued ([`OwnedRequest::queue_to_worker`]).
    ///
    /// # Safety
    ///
    /// `slot` must be valid for writes, in the PDU of `rq`, a new request, and not queued.
    pub(super) unsafe fn init_request(slot: *mut Self, rq: *mut bindings::request) {
        // SAFETY: The slot is writable and not queued (the caller's contract).
        unsafe {
            init_work(slot.cast(), None);
            (&raw mut (*slot).batch).write(core::ptr::null());
            (&raw mut (*slot).next).write(core::ptr::null_mut());
            (&raw mut (*slot).rq).write(rq);
        }
    }
}

/// `kthread_init_work`: zeroes the item, makes its list node empty and sets its function.
///
/// # Safety
///
/// `work` must be valid for writes and not queued.
unsafe fn init_work(
    work: *mut bindings::kthread_work,
    func: Option<unsafe extern "C" fn(*mut bindings::kthread_work)>,
) {
    // SAFETY: Forwarded from the caller.
    unsafe {
        core::ptr::write_bytes(work, 0, 1);
        let node = &raw mut (*work).node;
        (*node).next = node;
        (*node).prev = node;
        (*work).func = func;
    }
}

/// The [`KthreadWork`] of a request of a `Disk<T>`.
///
/// # Safety
///
/// `rq` must be a valid request of a `Disk<T>`.
unsafe fn work_of<T: DiskOps>(rq: *mut bindings::request) -> *mut KthreadWork {
    // SAFETY: Forwarded from the caller: the item is in the request's PDU.
    unsafe { &raw mut (*RequestPdu::<T>::of(rq)).work }
}

/// What a worker thread carries from one request item to the next while requests are queued
/// to it:
///
/// - the plug that the backlog's submissions to the backing device collect in, handed to that
///   device's driver together ([`PLUG_ITEMS`] items' worth at most; loop.c's worker submits
///   each one on its own);
/// - the completions it collected while running them, ended together by one work item queued
///   behind them: a worker that submits a backlog of requests whose backing I/O completes on
///   its own stack (a backing device that completes at once) ends their requests, and wakes
///   their submitters, once per backlog rather than once per request (loop.c gets the same
///   batching from the BLOCK softirq, at the price of a ksoftirqd wake-up from task context).
///
/// # Invariants
///
/// `work` is a `kthread_work` running `batch_work_fn`, queued only to `worker`, whose thread
/// is `task`. `head` and `tail` (a list of request items linked by `next`, oldest first),
/// `in_run`, `plug` and `plugged` are read and written only by `task`. `work` is queued
/// whenever the list is not empty, except while `task` runs a request item (`in_run`), at whose
/// end the list is ended or `work` queued. `plug` is `task`'s `current->plug` while `plugged`
/// (request items run under it) is not 0; it is ended at the end of a request item after which
/// none is queued, or after [`PLUG_ITEMS`] of them, before a request item that waits for its
/// own I/O, and by `work`, which `KthreadWorker`'s drop queues before the worker's thread exits.
pub(crate) struct Backlog {
    work: Opaque<bindings::kthread_work>,
    worker: NonNull<bindings::kthread_worker>,
    task: *mut bindings::task_struct,
    head: UnsafeCell<*mut KthreadWork>,
    tail: UnsafeCell<*mut KthreadWork>,
    in_run: UnsafeCell<bool>,
    plug: Opaque<bindings::blk_plug>,
    plugged: UnsafeCell<u32>,
}

/// Request items whose submissions one plug of a [`Backlog`] collects at most: enough
/// to hand the backing device's driver a batch (`queue_rqs`) and to read the clock once for
/// them, few enough that the first one waits little for the last.
const PLUG_ITEMS: u32 = 8;

impl Backlog {
    /// Whether the worker has items queued (`list_empty` without the lock: a stale answer
    /// only chooses between two correct ways).
    fn has_queued(&self) -> bool {
        let worker = self.worker.as_ptr();
        // SAFETY: The worker is alive (its thread runs the caller).
        unsafe {
            let list = &raw mut (*worker).work_list;
            core::ptr::read_volatile(&raw const (*list).next) != list
        }
    }

    /// Whether the worker has at least two items queued; only on the worker's thread, the only
    /// one that takes items off the list (so the first one stays while its `next` is read),
    /// without the lock as [`Self::has_queued`].
    ///
    /// # Safety
    ///
    /// Only on the batch's thread.
    unsafe fn has_queued_two(&self) -> bool {
        let worker = self.worker.as_ptr();
        // SAFETY: The worker is alive (its thread runs the caller). A first item read here is
        // not taken off the list before this thread does so (the caller's contract).
        unsafe {
            let list = &raw mut (*worker).work_list;
            let first = core::ptr::read_volatile(&raw const (*list).next);
            first != list && core::ptr::read_volatile(&raw const (*first).next) != list
        }
    }

    /// At the start of a request item that only submits its I/O (`submits_only`,
    /// [`RequestWork::submits_only`]): with two or more items queued behind it, starts the plug
    /// that the submissions of the backlog collect in (up to [`PLUG_ITEMS`] items' worth), as a
    /// task submitting several I/Os at once does (`io_submit`, `io_uring`). A plug costs each
    /// bio a merge attempt with the plugged requests: for two requests it does not pay. Before
    /// an item that waits for its I/O, ends the plug.
    ///
    /// # Safety
    ///
    /// Only on the batch's thread, at the start of a request item.
    unsafe fn start_of_run(&self, submits_only: bool) {
        // SAFETY: On the batch's thread (the caller's contract).
        unsafe {
            *self.in_run.get() = true;
            let plugged = self.plugged.get();
            if !submits_only {
                // It waits for its I/O: not under the plug.
                self.unplug();
            } else if *plugged > 0 {
                *plugged += 1;
            } else if self.has_queued_two() {
                *plugged = 1;
                bindings::blk_start_plug(self.plug.get());
            }
        }
    }

    /// Submits what the backlog's plug collected, and ends the plug.
    ///
    /// # Safety
    ///
    /// Only on the batch's thread, in task context, outside a request's completion.
    unsafe fn unplug(&self) {
        // SAFETY: On the batch's thread (the caller's contract): the plug is the thread's
        // `current->plug` while `plugged` is not 0.
        unsafe {
            if core::mem::replace(&mut *self.plugged.get(), 0) > 0 {
                bindings::blk_finish_plug(self.plug.get());
            }
        }
    }

    /// At the end of a request item: ends the collected requests now if nothing else is queued
    /// to the worker (a shallow queue pays no extra work item), else queues `work` behind the
    /// backlog.
    ///
    /// # Safety
    ///
    /// Only on the batch's thread, at the end of a request item.
    unsafe fn end_of_run(&self) {
        // SAFETY: On the batch's thread (the caller's contract).
        if unsafe { *self.plugged.get() } >= PLUG_ITEMS || !self.has_queued() {
            // SAFETY: On the batch's thread, at the end of a request item (the caller's
            // contract). Completions of the plugged I/O may join the batch (`in_run`).
            unsafe { self.unplug() };
        }
        // SAFETY: On the batch's thread (the caller's contract).
        unsafe { *self.in_run.get() = false };
        // SAFETY: As above.
        if unsafe { (*self.head.get()).is_null() } {
            return;
        }
        let worker = self.worker.as_ptr();
        if !self.has_queued() {
            // SAFETY: On the batch's thread, in task context at the top of the worker.
            unsafe { self.end_all() };
        } else {
            // INVARIANT: queued while the list is not empty (a no-op if already queued).
            // SAFETY: `work` was set up for this worker, which is alive.
            unsafe { bindings::kthread_queue_work(worker, self.work.get()) };
        }
    }

    /// Ends the collected requests, in the order they finished (the list's).
    ///
    /// # Safety
    ///
    /// Only on the batch's thread, in task context, outside a request's completion.
    unsafe fn end_all(&self) {
        // SAFETY: On the batch's thread, the only one touching the list.
        let mut item = unsafe {
            *self.tail.get() = core::ptr::null_mut();
            core::mem::replace(&mut *self.head.get(), core::ptr::null_mut())
        };
        while !item.is_null() {
            // SAFETY: Items in the list belong to requests the list owns (their completion
            // was handed to it); `next` is read before the request is given up.
            unsafe {
                let next = (*item).next;
                (*item).next = core::ptr::null_mut();
                super::request::complete_direct((*item).rq);
                item = next;
            }
        }
    }
}

impl<T: RequestWork> OwnedRequest<T> {
    /// Adds the request to the [`Backlog`] of the worker it was last queued to, if the
    /// current thread is that worker's: the batch's work item ends it (through the `complete`
    /// callback, as [`OwnedRequest::complete_here`]) after the requests queued before it. Else
    /// gives the request back. Either way the request is no longer tied to that worker.
    pub(crate) fn complete_in_batch(self) -> Result<(), Self> {
        let rq = self.into_raw().as_ptr();
        // SAFETY: A request of a `Disk<T>`.
        let item = unsafe { work_of::<T>(rq) };
        // SAFETY: We own the request and its item (the ownership is back in `self` below or
        // handed to the batch).
        let batch = unsafe { core::mem::replace(&mut (*item).batch, core::ptr::null()) };
        // SAFETY: `batch` is null or alive until the request ends (type invariant of the item).
        let Some(b) = (unsafe { batch.as_ref() }) else {
            // SAFETY: Ownership given back, as taken above.
            return Err(unsafe { Self::from_raw(NonNull::new_unchecked(rq)) });
        };
        // In task context only: an interrupt on the worker's thread has the same `current`
        // but may have cut into the thread's own use of the list.
        if b.task != Task::current_raw() || !super::request::in_task() {
            // SAFETY: As above.
            return Err(unsafe { Self::from_raw(NonNull::new_unchecked(rq)) });
        }
        // SAFETY: The current thread is the batch's (checked), the only one touching `head`
        // and the items in the list; the request's ownership goes to the list.
        unsafe {
            let tail = b.tail.get();
            let was_empty = (*tail).is_null();
            if was_empty {
                *b.head.get() = item;
            } else {
                (**tail).next = item;
            }
            *tail = item;
            if was_empty && !*b.in_run.get() {
                // INVARIANT: queued now that the list is not empty (outside a request item,
                // whose end would do it).
                bindings::kthread_queue_work(b.worker.as_ptr(), b.work.get());
            }
        }
        Ok(())
    }
}

/// The work function of a [`Backlog`]: ends its plug, and the requests collected so far.
///
/// # Safety
///
/// Only the batch's worker calls it, for the batch's own item.
unsafe extern "C" fn batch_work_fn(work: *mut bindings::kthread_work) {
    let offset = core::mem::offset_of!(Backlog, work);
    // SAFETY: `work` is the `work` field of a `Backlog` (the caller's contract), which
    // is alive: its worker is running it.
    let batch = unsafe { &*work.cast::<u8>().sub(offset).cast::<Backlog>() };
    // SAFETY: On the batch's thread, at the top of the worker.
    unsafe {
        batch.unplug();
        batch.end_all()
    }
}
