// SPDX-License-Identifier: GPL-2.0

//! Per-device counters, readable in `/sys/block/loopN/rust_loop/`:
//!
//! - `nowait_completions`: requests completed by the `IOCB_NOWAIT` submission from `queue_rq`;
//! - `nowait_eagain`: NOWAIT attempts refused with `-EAGAIN` (at once or at completion) and
//!   handed to the worker;
//! - `worker_submissions`: commands run by the device's worker thread;
//! - `read_bytes`, `write_bytes`: data transferred to and from the backing file.

use core::sync::atomic::{AtomicU32, AtomicU64};

/// The counters of one loop device (relaxed atomics: they are statistics).
#[derive(Default)]
pub(crate) struct DevStats {
    /// Requests completed by the NOWAIT path.
    pub(crate) nowait_completions: AtomicU64,
    /// NOWAIT attempts that fell back to the worker.
    pub(crate) nowait_eagain: AtomicU64,
    /// Commands run by the worker.
    pub(crate) worker_submissions: AtomicU64,
    /// Bytes read from the backing file.
    pub(crate) read_bytes: AtomicU64,
    /// Bytes written to the backing file.
    pub(crate) write_bytes: AtomicU64,
    /// Writes queued to the worker and not yet submitted by it (steers writes away from NOWAIT
    /// while the backing file is allocating).
    pub(crate) worker_writes_pending: AtomicU32,
}
