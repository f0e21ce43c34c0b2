// SPDX-License-Identifier: GPL-2.0

//! Facts about the current task and scoped changes to it: its block plug and deferred-bio list,
//! reclaim and file-system-transaction context, stack left, `PF_*` flags.
//!
//! C header: [`include/linux/sched.h`](srctree/include/linux/sched.h).

/// Number of online CPUs (the bound on hardware queues).
pub(crate) fn online_cpus() -> u32 {
    // SAFETY: Reads the online CPU mask.
    unsafe { rust_loop_online_cpus() }
}

/// Whether the current task has a block plug (requests may be dispatched from its flush).
pub(crate) fn plugged() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_task_plugged() }
}

/// While it lives, bios the current task submits are submitted at once, not deferred.
///
/// Inside `submit_bio` (direct issue, or a submitter that found every tag taken and runs the
/// queue before it sleeps) the block layer queues the bios submitted meanwhile on
/// `current->bio_list` and submits them only once the bio it is handling is done with, which
/// may first wait for a tag of the very queue whose `queue_rq` is running. Backing I/O started
/// from there must not wait on that list: what the worker waits for in the backing file system
/// (XFS's sub-block writes wait for every direct I/O in flight on the file) could be held there
/// by a task waiting for a tag that only the worker's progress frees.
///
/// # Invariants
///
/// `saved` is the list taken from the current task, put back on drop, on the same task (the
/// value is neither `Send` nor kept beyond the scope that created it).
pub(crate) struct UndeferredBios {
    saved: *mut core::ffi::c_void,
}

impl UndeferredBios {
    /// Takes the current task's deferred-bio list until the value is dropped.
    pub(crate) fn new() -> Self {
        // SAFETY: Reads and clears a field of the current task; `drop` puts it back.
        let saved = unsafe { rust_loop_bio_list_take() };
        // INVARIANT: taken from the current task just now.
        Self { saved }
    }

    /// Whether the task was inside `submit_bio` (it had a deferred-bio list).
    pub(crate) fn was_deferring(&self) -> bool {
        !self.saved.is_null()
    }
}

impl Drop for UndeferredBios {
    fn drop(&mut self) {
        // SAFETY: Puts back the list taken from this same task (type invariant); any nested
        // `submit_bio` has cleared it again on return.
        unsafe { rust_loop_bio_list_restore(self.saved) }
    }
}

/// Whether the current task is reclaiming memory or must not recurse into I/O for it
/// (`PF_MEMALLOC*`).
pub(crate) fn in_reclaim() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_task_in_reclaim() }
}

/// Whether the current task is inside a filesystem transaction (`current->journal_info`):
/// submitting to a backing filesystem from there would nest its transaction in ours.
pub(crate) fn in_fs_transaction() -> bool {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_in_fs_transaction() }
}

/// Whether the current task is a loop device's worker (`PF_LOCAL_THROTTLE`, set by rust_loop's
/// and loop.c's workers): its I/O to another loop device may come from inside the backing file
/// system's transaction (XFS does not mark those in `journal_info`).
pub(crate) fn submitter_is_loop_worker() -> bool {
    // SAFETY: Reads the current task's flags.
    unsafe { rust_loop_task_is_loop_worker() }
}

/// An identity of the current task, for comparing with another over time: its pid (not its
/// `task_struct`'s address, which a new task may get as soon as this one is freed, and with it
/// what was recorded for this one).
pub(crate) fn current_task_id() -> usize {
    // SAFETY: Reads a field of the current task.
    unsafe { rust_loop_task_id() as usize }
}

/// Whether the current task has capability `cap` (`CAP_*`; `capable()`, which records its use).
pub(crate) fn capable(cap: u32) -> bool {
    // SAFETY: `capable` checks the current task's credentials.
    unsafe { kernel::bindings::capable(cap as i32) }
}

/// Bytes of kernel stack left below the current frame.
pub(crate) fn stack_remaining() -> usize {
    // SAFETY: Reads the current task's stack base and the frame address.
    unsafe { rust_loop_stack_remaining() as usize }
}

/// `PF_*` flags set on the current task for a scope; the previous values come back on drop.
pub(crate) struct TaskFlags {
    old: u32,
    flags: u32,
}

impl TaskFlags {
    /// Sets `flags` (`PF_*`) on the current task.
    pub(crate) fn set(flags: u32) -> Self {
        // SAFETY: The current task changes its own flags.
        let old = unsafe { rust_loop_task_flags_set(flags) };
        Self { old, flags }
    }
}

impl Drop for TaskFlags {
    fn drop(&mut self) {
        // SAFETY: Restores what `set` changed on the same (current) task.
        unsafe { rust_loop_task_flags_restore(self.old, self.flags) }
    }
}

extern "C" {
    // rust_loop/helpers.c: `task_struct` fields (see there why not through bindgen).
    fn rust_loop_in_fs_transaction() -> bool;
    fn rust_loop_task_is_loop_worker() -> bool;
    fn rust_loop_stack_remaining() -> core::ffi::c_ulong;
    fn rust_loop_task_flags_set(flags: core::ffi::c_uint) -> core::ffi::c_uint;
    fn rust_loop_task_flags_restore(old: core::ffi::c_uint, flags: core::ffi::c_uint);
    fn rust_loop_task_plugged() -> bool;
    fn rust_loop_task_id() -> core::ffi::c_ulong;
    fn rust_loop_bio_list_take() -> *mut core::ffi::c_void;
    fn rust_loop_bio_list_restore(list: *mut core::ffi::c_void);
    fn rust_loop_task_in_reclaim() -> bool;
    fn rust_loop_online_cpus() -> core::ffi::c_uint;
}
