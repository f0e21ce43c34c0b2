// SPDX-License-Identifier: GPL-2.0

//! [`DeviceSettings`]: what a new device is made with (the module parameters, as values).

/// What a new device is made with: the module parameters, as values.
#[derive(Clone, Copy)]
pub(crate) struct DeviceSettings {
    /// Minors per device are `1 << part_shift` (`max_part`).
    pub(crate) part_shift: u32,
    /// Tag set depth (`hw_queue_depth`).
    pub(crate) queue_depth: u32,
    /// Hardware queues, each with its worker (`nr_hw_queues`).
    pub(crate) nr_hw_queues: u32,
    /// Kernel stack bytes that must remain for `queue_rq` to submit direct I/O itself
    /// (`nowait_min_stack`).
    pub(crate) nowait_min_stack: usize,
    /// The first `nowait_max_depth` (a sysfs knob of each device).
    pub(crate) nowait_max_depth: u32,
    /// The first cache mode is `dontcache` (a sysfs knob of each device).
    pub(crate) dontcache: bool,
    /// Most per-cgroup worker threads (`max_cgroup_workers`).
    pub(crate) max_cgroup_workers: usize,
}

impl DeviceSettings {
    /// The module parameters' defaults.
    pub(crate) const DEFAULT: Self = Self {
        part_shift: 0,
        queue_depth: 128,
        nr_hw_queues: 1,
        nowait_min_stack: 8192,
        nowait_max_depth: 1,
        dontcache: false,
        max_cgroup_workers: 16,
    };
}
