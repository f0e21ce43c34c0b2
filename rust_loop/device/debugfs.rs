// SPDX-License-Identifier: GPL-2.0

//! `/sys/kernel/debug/rust_loop/loopN/`: the device's counters ([`super::super::stats`]), one
//! read-only file each, present while the device exists. Diagnostics, not ABI: sysfs keeps
//! loop.c's files and the knobs.

use super::super::{
    device::LoopDevice,
    stats::{self, DevStats, QueueStats},
    sys::{DebugDir, DebugFiles, DebugShow},
};
use core::fmt::Write;
use kernel::{prelude::*, str::CString, sync::Arc};

impl DebugShow for LoopDevice {
    type Module = crate::LoopModule;

    /// Counter `tag` of [`QueueStats::NAMES`] then [`DevStats::NAMES`], summed over the
    /// hardware queues.
    fn show(&self, tag: usize, out: &mut dyn Write) -> Result {
        let value = stats::counter(&self.per_queue, &self.stats, tag).ok_or(EINVAL)?;
        writeln!(out, "{value}").map_err(|_| EINVAL)
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
            &[QueueStats::NAMES, DevStats::NAMES],
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
