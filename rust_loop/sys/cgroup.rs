// SPDX-License-Identifier: GPL-2.0

//! cgroup attribution of the I/O the worker does for a command.
//!
//! A command that `queue_rq` hands to a worker thread would otherwise be charged to the worker
//! (the root cgroup): its block I/O would escape the issuer's `io.max`, and the backing file's
//! page cache its `memory.max`. As loop.c, the command records the blkcg of its first bio and
//! that cgroup's memory cgroup ([`IoCgroups::of`]); the worker runs it inside
//! [`IoCgroups::enter`] (`kthread_associate_blkcg`, `set_active_memcg`). Direct I/O submitted
//! from `queue_rq` itself is charged to the current task, so `queue_rq` only does that when
//! the current task is in the issuer's blkcg ([`issued_here`]).
//!
//! C header: [`include/linux/blk-cgroup.h`](srctree/include/linux/blk-cgroup.h).

use super::{DiskOps, Request};
use core::{ffi::c_void, ptr::null_mut};

/// A `struct cgroup_subsys_state *`, opaque here (passed as `void *`: the C structures involved
/// contain zero-sized members, which are not FFI-safe in Rust's view).
type Css = c_void;

extern "C" {
    // rust_loop/helpers.c: static inline functions and `task_struct` fields.
    fn rust_loop_rq_cgroups(rq: *mut c_void, blkcg: *mut *mut Css, memcg: *mut *mut Css);
    fn rust_loop_cgroups_enter(blkcg: *mut Css, memcg: *mut Css) -> *mut c_void;
    fn rust_loop_cgroups_leave(blkcg: *mut Css, memcg: *mut Css, old: *mut c_void);
    fn rust_loop_css_put(css: *mut Css);
    fn rust_loop_rq_issued_here(rq: *mut c_void) -> bool;
    fn rust_loop_css_is_root(css: *mut Css) -> bool;
    fn rust_loop_css_get(css: *mut Css);
}

/// Whether I/O submitted by the current task is charged to the same blkcg as `rq`'s issuer
/// (then `queue_rq` may submit the request itself; otherwise the worker must, inside
/// [`IoCgroups::enter`]).
pub(crate) fn issued_here<T: DiskOps>(rq: &Request<T>) -> bool {
    // SAFETY: The request is in flight; the helper reads its first bio and the current task's
    // cgroup under RCU.
    unsafe { rust_loop_rq_issued_here(rq.as_raw().cast()) }
}

/// The cgroups a command's I/O is charged to (loop.c's `blkcg_css` and `memcg_css`).
///
/// # Invariants
///
/// `blkcg` is null or the blkcg of the command's first bio, which holds it until the request
/// ends (and the value is only used while the request is in flight); `memcg` is null or a
/// memory cgroup css this value holds a reference on.
pub(crate) struct IoCgroups {
    blkcg: *mut Css,
    memcg: *mut Css,
}

// SAFETY: css references may be used and dropped on any thread.
unsafe impl Send for IoCgroups {}

impl IoCgroups {
    /// The cgroups of the request's issuer (its first bio); none for the root blkcg (or a
    /// request without a bio), which the workers are charged to already.
    pub(crate) fn of<T: DiskOps>(rq: &Request<T>) -> Option<Self> {
        let mut blkcg = null_mut();
        let mut memcg = null_mut();
        // SAFETY: The request is in flight (type invariant of `Request`); the helper only reads
        // its first bio and takes a reference on the memory cgroup it returns (only for a
        // blkcg it returns).
        unsafe { rust_loop_rq_cgroups(rq.as_raw().cast(), &mut blkcg, &mut memcg) };
        // INVARIANT: as returned by the helper.
        (!blkcg.is_null()).then_some(Self { blkcg, memcg })
    }

    /// A reference on the blkcg these cgroups charge I/O to, unless that is the root blkcg
    /// (or none), which the workers are charged to already.
    pub(crate) fn blkcg(&self) -> Option<Blkcg> {
        let css = self.blkcg;
        // SAFETY: `css` is null or a live blkcg css (type invariant).
        if css.is_null() || unsafe { rust_loop_css_is_root(css) } {
            return None;
        }
        // SAFETY: `css` is live (see above); the new value holds its own reference.
        unsafe { rust_loop_css_get(css) };
        // INVARIANT: the reference was just taken.
        Some(Blkcg(css))
    }

    /// Whether these cgroups charge I/O to `blkcg`.
    pub(crate) fn is_in(&self, blkcg: &Blkcg) -> bool {
        self.blkcg == blkcg.0
    }

    /// Charges what the current kernel thread does to these cgroups until the scope drops.
    /// Must be called on a `kthread` (a worker), not in a user task's context.
    pub(crate) fn enter(self) -> CgroupScope {
        // SAFETY: The css pointers are valid (type invariant); the current task is a kthread.
        let old = unsafe { rust_loop_cgroups_enter(self.blkcg, self.memcg) };
        CgroupScope { cgroups: self, old }
    }
}

impl Drop for IoCgroups {
    fn drop(&mut self) {
        if !self.memcg.is_null() {
            // SAFETY: The reference was taken in `of` (type invariant) and is dropped once.
            unsafe { rust_loop_css_put(self.memcg) };
        }
    }
}

/// While alive, the current kernel thread's I/O and allocations are charged to [`IoCgroups`].
pub(crate) struct CgroupScope {
    cgroups: IoCgroups,
    old: *mut c_void,
}

impl Drop for CgroupScope {
    fn drop(&mut self) {
        // SAFETY: Undoes `enter` on the same thread, restoring the memory cgroup it replaced;
        // the css references are still held by `self.cgroups`, dropped after this.
        unsafe { rust_loop_cgroups_leave(self.cgroups.blkcg, self.cgroups.memcg, self.old) };
    }
}

/// A reference on a (non-root) blkcg, held as long as the value lives.
///
/// # Invariants
///
/// The pointer is a blkcg css this value holds a reference on.
pub(crate) struct Blkcg(*mut Css);

// SAFETY: css references may be used and dropped on any thread.
unsafe impl Send for Blkcg {}
// SAFETY: A shared `Blkcg` only compares the pointer.
unsafe impl Sync for Blkcg {}

impl Drop for Blkcg {
    fn drop(&mut self) {
        // SAFETY: The reference was taken by `IoCgroups::blkcg` (type invariant), dropped once.
        unsafe { rust_loop_css_put(self.0) };
    }
}
