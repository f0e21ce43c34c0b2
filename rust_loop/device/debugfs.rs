// SPDX-License-Identifier: GPL-2.0

//! `/sys/kernel/debug/rust_loop/loopN/`: the device's counters ([`super::super::stats`]), one
//! read-only file each, the requests started per hardware queue, and the fault injection of the
//! tests; present while the device exists. Diagnostics, not ABI: sysfs keeps loop.c's files
//! and the knobs users set.

use super::super::{
    device::LoopDevice,
    stats::{self, DevStats, QueueStats},
    sys::{self, DebugDir, DebugFiles, DebugShow},
};
use core::{fmt::Write, sync::atomic::Ordering};
use kernel::{prelude::*, str::CString, sync::Arc};

/// The files after the counters: the requests started on each hardware queue, space-separated.
const LISTS: &[&CStr] = &[c"hw_queue_requests"];

/// The writable file, after [`LISTS`]: fault injection, for tests. `queue_rq` drops the next
/// N requests without ending them (a driver bug on purpose); each still ends, with an I/O
/// error, and the kernel log says so. Reads the number left; takes a `u32`.
const INJECT: &[&CStr] = &[c"inject_drop_requests"];

/// The number of counters (the tag of the first file after them).
const COUNTERS: usize = QueueStats::NAMES.len() + DevStats::NAMES.len();

impl DebugShow for LoopDevice {
    type Module = crate::LoopModule;

    /// Counter `tag` of [`QueueStats::NAMES`] then [`DevStats::NAMES`], summed over the
    /// hardware queues; then [`LISTS`] and [`INJECT`].
    fn show(&self, tag: usize, out: &mut dyn Write) -> Result {
        match tag.checked_sub(COUNTERS) {
            None => {
                let value = stats::counter(&self.per_queue, &self.stats, tag).ok_or(EINVAL)?;
                writeln!(out, "{value}")
            }
            Some(0) => self.hw_queue_requests(|counts| {
                for (i, n) in counts.enumerate() {
                    write!(out, "{}{n}", if i == 0 { "" } else { " " })?;
                }
                writeln!(out)
            }),
            Some(1) => writeln!(out, "{}", self.inject_drop_requests.load(Ordering::Relaxed)),
            Some(_) => return Err(EINVAL),
        }
        .map_err(|_| EINVAL)
    }

    fn store(&self, tag: usize, word: &str) -> Result {
        if tag != COUNTERS + LISTS.len() {
            return Err(EPERM);
        }
        let n = word.parse::<u32>().map_err(|_| EINVAL)?;
        if n > 0 {
            // The static key `queue_rq` tests before it reads the count (once, for good).
            sys::arm_fault_injection();
        }
        self.inject_drop_requests.store(n, Ordering::Relaxed);
        Ok(())
    }
}

impl LoopDevice {
    /// Adds the counters' directory `loopN` under `root` (debugfs' `rust_loop/`). Without
    /// debugfs, or short of memory, the device has none: it works all the same.
    pub(crate) fn add_debugfs(self: &Arc<Self>, root: &DebugDir) {
        let Ok(name) = CString::try_from_fmt(fmt!("loop{}", self.number)) else {
            return;
        };
        let files = DebugFiles::new(
            &name,
            root,
            self.clone(),
            &[QueueStats::NAMES, DevStats::NAMES, LISTS],
            INJECT,
        );
        let old = self.debugfs.lock().replace(files);
        drop(old);
    }

    /// Removes the counters' directory, waiting for the reads in progress (which take no lock
    /// of the device): from [`LoopDevice::remove`].
    pub(super) fn remove_debugfs(&self) {
        let files = self.debugfs.lock().take();
        drop(files);
    }
}
