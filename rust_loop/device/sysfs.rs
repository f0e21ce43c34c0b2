// SPDX-License-Identifier: GPL-2.0

//! `/sys/block/loopN/loop/{backing_file,offset,sizelimit,autoclear,partscan,dio}`, present while
//! the device is bound (as loop.c's `loop_attribute_group`), and `/sys/block/loopN/rust_loop/`,
//! present while the device exists: the knobs (the counters are in debugfs, [`super::debugfs`]).

use super::super::{
    device::{LoopDevice, LoopDisk, FLAG_AUTOCLEAR, FLAG_DIRECT_IO, FLAG_PARTSCAN},
    sys::{AttrGroup, AttrPtrs, DiskAttr, Page},
};
use core::{fmt::Write, sync::atomic::Ordering};
use kernel::prelude::*;

type Attr = DiskAttr<LoopDisk>;

/// Prints `value` and a newline.
fn line(page: &mut Page<'_>, value: impl core::fmt::Display) -> Result {
    writeln!(page, "{value}").map_err(|_| EINVAL)
}

fn flag(lo: &LoopDevice, flag: u32) -> u8 {
    u8::from(lo.flags() & flag != 0)
}

static LOOP_ATTRS: [Attr; 6] = [
    // The path of the backing file (empty if there is none).
    Attr::ro(c"backing_file", |lo, _, page| {
        if let Some(f) = lo.backing_file() {
            let n = f.path_to_sysfs(page.raw())?;
            page.set_len(n);
        }
        Ok(())
    }),
    Attr::ro(c"offset", |lo, _, page| line(page, lo.offset())),
    Attr::ro(c"sizelimit", |lo, _, page| line(page, lo.sizelimit())),
    Attr::ro(c"autoclear", |lo, _, page| {
        line(page, flag(lo, FLAG_AUTOCLEAR))
    }),
    Attr::ro(c"partscan", |lo, _, page| {
        line(page, flag(lo, FLAG_PARTSCAN))
    }),
    Attr::ro(c"dio", |lo, _, page| line(page, flag(lo, FLAG_DIRECT_IO))),
];

static LOOP_PTRS: AttrPtrs<LoopDisk, 7> = AttrPtrs::new(&[&LOOP_ATTRS]);

/// `loop/`, as loop.c's.
pub(crate) static LOOP_GROUP: AttrGroup<LoopDisk> = AttrGroup::new(c"loop", &LOOP_PTRS);

/// Writes `values` space-separated, and a newline.
fn list<T: core::fmt::Display>(page: &mut Page<'_>, values: &mut dyn Iterator<Item = T>) -> Result {
    for (i, n) in values.enumerate() {
        let sep = if i == 0 { "" } else { " " };
        write!(page, "{sep}{n}").map_err(|_| EINVAL)?;
    }
    page.write_str("\n").map_err(|_| EINVAL)
}

static KNOB_ATTRS: [Attr; 5] = [
    // The in-flight depth from which a single task's direct I/O goes to the worker (and every
    // task's from 16 on, or from N if larger); any time, the next request sees it. EINVAL
    // unless a `u32`.
    Attr::rw(
        c"nowait_max_depth",
        |lo, _, page| line(page, lo.policy.max_depth()),
        |lo, s| {
            lo.policy.set_max_depth(parse_u32(s)?);
            Ok(())
        },
    ),
    // Hardware queues (and workers) of an unbound device: EBUSY while bound, EINVAL outside
    // 1..=online CPUs.
    Attr::rw(
        c"nr_hw_queues",
        |lo, _, page| line(page, lo.nr_hw_queues()),
        |lo, s| lo.set_nr_hw_queues(parse_u32(s)?),
    ),
    // The process IDs of the hardware queues' worker threads (`rust_loop/K`), space-separated
    // in queue order; empty while unbound.
    Attr::ro(c"worker_pids", |lo, _, page| {
        lo.worker_pids(|pids| list(page, pids))
    }),
    // Whether `queue_rq` tries the NOWAIT submission (direct-I/O mode on a file system that
    // `nowait_fs` names).
    Attr::ro(c"nowait", |lo, _, page| {
        line(page, u8::from(lo.nowait_on.load(Ordering::Relaxed)))
    }),
    // `normal` or `dontcache` buffered backing I/O, any time (see
    // [`LoopDevice::set_cache_mode`] for the errors).
    Attr::rw(
        c"cache_mode",
        |lo, _, page| line(page, lo.cache_mode()),
        LoopDevice::set_cache_mode,
    ),
];

fn parse_u32(s: &str) -> Result<u32> {
    s.parse::<u32>().map_err(|_| EINVAL)
}

static RUST_LOOP_PTRS: AttrPtrs<LoopDisk, { KNOB_ATTRS.len() + 1 }> = AttrPtrs::new(&[&KNOB_ATTRS]);

/// `rust_loop/`: the knobs.
pub(crate) static RUST_LOOP_GROUP: AttrGroup<LoopDisk> =
    AttrGroup::new(c"rust_loop", &RUST_LOOP_PTRS);
