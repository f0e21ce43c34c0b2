// SPDX-License-Identifier: GPL-2.0

//! The monotonic clock as a plain number of nanoseconds, for timestamps kept in atomics (the
//! kernel crate's `time::Instant` does not expose its value).
//!
//! C header: [`include/linux/timekeeping.h`](srctree/include/linux/timekeeping.h).

use kernel::bindings;

/// `ktime_get()`: nanoseconds of the monotonic clock.
pub(crate) fn now_ns() -> i64 {
    // SAFETY: `ktime_get` may be called from any context but NMI.
    unsafe { bindings::ktime_get() }
}
