// SPDX-License-Identifier: GPL-2.0

//! The module's release queue: teardowns that wait (grace periods, thread exits) and that
//! nobody needs to wait for run there, off the caller's path ([`drop_later`]). Opened at load,
//! drained and destroyed at module exit.

use super::sys::OwnedQueue;
use kernel::prelude::*;

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init`, before any device exists.
    /// Where removed devices finish their teardown ([`super::sys::DiskRelease`]) off the
    /// remover's path; drained and destroyed at module exit. `None` outside [`open`]..[`close`].
    pub(crate) unsafe(uninit) static RELEASES: Mutex<Option<OwnedQueue>> = None;
}

/// Makes the queue: from now on [`drop_later`] drops values there.
pub(crate) fn open() -> Result {
    *RELEASES.lock() = Some(OwnedQueue::new_unbound(c"rust_loop_release")?);
    Ok(())
}

/// Runs the teardowns still queued and destroys the queue (module exit). It is taken out
/// first, so that the lock is not held while the queue drains.
pub(crate) fn close() {
    let queue = RELEASES.lock().take();
    drop(queue);
}

/// Drops `value` on the module's release queue, off the caller's path: for teardowns that wait
/// (grace periods, thread exits) and that nobody needs to wait for. Drops it here should the
/// queue item not allocate, or the queue be closed.
pub(crate) fn drop_later<T: Send + 'static>(value: T) {
    // Without the queue, or on failure, the closure, and with it `value`, is dropped here.
    on_release_queue(move |queue| {
        let _ = queue.try_spawn(GFP_KERNEL, move || drop(value));
    });
}

/// Runs `f` with the module's release queue, unless module exit has taken it.
pub(crate) fn on_release_queue(f: impl FnOnce(&OwnedQueue)) {
    if let Some(queue) = RELEASES.lock().as_ref() {
        f(queue);
    }
}
