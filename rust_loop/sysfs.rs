// SPDX-License-Identifier: GPL-2.0

//! `/sys/block/loopN/loop/{backing_file,offset,sizelimit,autoclear,partscan,dio}`, present while
//! the device is bound (as loop.c's `loop_attribute_group`), and the counters of
//! [`crate::stats`] in `/sys/block/loopN/rust_loop/`, present while the device exists.

use crate::device::{LoopDevice, FLAG_AUTOCLEAR, FLAG_DIRECT_IO, FLAG_PARTSCAN};
use core::{cell::UnsafeCell, fmt::Write, sync::atomic::Ordering};
use kernel::{bindings, prelude::*, str::as_char_ptr_in_const_context};

/// A C object that is only handed to the kernel, which synchronises its own use of it.
#[repr(transparent)]
struct KernelOwned<T>(UnsafeCell<T>);

// SAFETY: The wrapped attribute tables are written once at compile time and then only read by
// sysfs.
unsafe impl<T> Sync for KernelOwned<T> {}

impl<T> KernelOwned<T> {
    const fn get(&self) -> *mut T {
        self.0.get()
    }
}

type ShowFn =
    unsafe extern "C" fn(*mut bindings::device, *mut bindings::device_attribute, *mut u8) -> isize;

type StoreFn = unsafe extern "C" fn(
    *mut bindings::device,
    *mut bindings::device_attribute,
    *const u8,
    usize,
) -> isize;

const fn ro_attr(name: &'static CStr, show: ShowFn) -> KernelOwned<bindings::device_attribute> {
    // SAFETY: All-zero is a valid `device_attribute`.
    let mut a: bindings::device_attribute = unsafe { core::mem::zeroed() };
    a.attr.name = as_char_ptr_in_const_context(name);
    a.attr.mode = 0o444;
    a.__bindgen_anon_1.show = Some(show);
    KernelOwned(UnsafeCell::new(a))
}

const fn rw_attr(
    name: &'static CStr,
    show: ShowFn,
    store: StoreFn,
) -> KernelOwned<bindings::device_attribute> {
    let KernelOwned(cell) = ro_attr(name, show);
    let mut a = cell.into_inner();
    a.attr.mode = 0o644;
    a.__bindgen_anon_2.store = Some(store);
    KernelOwned(UnsafeCell::new(a))
}

static BACKING_FILE: KernelOwned<bindings::device_attribute> =
    ro_attr(c"backing_file", show_backing_file);
static OFFSET: KernelOwned<bindings::device_attribute> = ro_attr(c"offset", show_offset);
static SIZELIMIT: KernelOwned<bindings::device_attribute> = ro_attr(c"sizelimit", show_sizelimit);
static AUTOCLEAR: KernelOwned<bindings::device_attribute> = ro_attr(c"autoclear", show_autoclear);
static PARTSCAN: KernelOwned<bindings::device_attribute> = ro_attr(c"partscan", show_partscan);
static DIO: KernelOwned<bindings::device_attribute> = ro_attr(c"dio", show_dio);

static ATTRS: KernelOwned<[*mut bindings::attribute; 7]> = KernelOwned(UnsafeCell::new([
    BACKING_FILE.get().cast(),
    OFFSET.get().cast(),
    SIZELIMIT.get().cast(),
    AUTOCLEAR.get().cast(),
    PARTSCAN.get().cast(),
    DIO.get().cast(),
    core::ptr::null_mut(),
]));

static GROUP: KernelOwned<bindings::attribute_group> = KernelOwned(UnsafeCell::new({
    // SAFETY: All-zero is a valid `attribute_group`.
    let mut g: bindings::attribute_group = unsafe { core::mem::zeroed() };
    g.name = as_char_ptr_in_const_context(c"loop");
    g.__bindgen_anon_2.attrs = ATTRS.get().cast();
    g
}));

static NOWAIT_COMPLETIONS: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_completions", show_nowait_completions);
static NOWAIT_EAGAIN: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_eagain", show_nowait_eagain);
static WORKER_SUBMISSIONS: KernelOwned<bindings::device_attribute> =
    ro_attr(c"worker_submissions", show_worker_submissions);
static COMPLETIONS_HERE: KernelOwned<bindings::device_attribute> =
    ro_attr(c"completions_here", show_completions_here);
static COMPLETIONS_DEFERRED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"completions_deferred", show_completions_deferred);
static READ_BYTES: KernelOwned<bindings::device_attribute> =
    ro_attr(c"read_bytes", show_read_bytes);
static WRITE_BYTES: KernelOwned<bindings::device_attribute> =
    ro_attr(c"write_bytes", show_write_bytes);

static SKIP_JOURNAL: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_journal", show_skip_journal);
static UNDEFERRED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_undeferred", show_undeferred);
static PARTSCAN_SKIPPED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"partscan_skipped", show_partscan_skipped);
static WRITE_ZEROES_OFFLOADED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"write_zeroes_offloaded", show_write_zeroes_offloaded);
static SKIP_STACK: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_stack", show_skip_stack);
static SKIP_RQQOS: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_rqqos", show_skip_rqqos);
static SKIP_CGROUP: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_cgroup", show_skip_cgroup);
static SKIP_NESTED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_nested", show_skip_nested);
static SKIP_WRITES: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_writes", show_skip_writes);

static SKIP_CMTIME: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_cmtime", show_skip_cmtime);
static SKIP_ATIME: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_atime", show_skip_atime);
static SKIP_DEPTH: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_skip_depth", show_skip_depth);
static NOWAIT_PROBES: KernelOwned<bindings::device_attribute> =
    ro_attr(c"nowait_probes", show_nowait_probes);
static NOWAIT_MAX_DEPTH: KernelOwned<bindings::device_attribute> = rw_attr(
    c"nowait_max_depth",
    show_nowait_max_depth,
    store_nowait_max_depth,
);

static NR_HW_QUEUES: KernelOwned<bindings::device_attribute> =
    rw_attr(c"nr_hw_queues", show_nr_hw_queues, store_nr_hw_queues);

static HW_QUEUE_REQUESTS: KernelOwned<bindings::device_attribute> =
    ro_attr(c"hw_queue_requests", show_hw_queue_requests);

static WORKER_QUEUED: KernelOwned<bindings::device_attribute> =
    ro_attr(c"worker_queued", show_worker_queued);
static BACKING_INFLIGHT: KernelOwned<bindings::device_attribute> =
    ro_attr(c"backing_inflight", show_backing_inflight);

static NOWAIT: KernelOwned<bindings::device_attribute> = ro_attr(c"nowait", show_nowait);
static DIO_FALLBACKS: KernelOwned<bindings::device_attribute> =
    ro_attr(c"dio_fallbacks", show_dio_fallbacks);
static CACHE_MODE: KernelOwned<bindings::device_attribute> =
    rw_attr(c"cache_mode", show_cache_mode, store_cache_mode);

static STATS_ATTRS: KernelOwned<[*mut bindings::attribute; 29]> = KernelOwned(UnsafeCell::new([
    NOWAIT_COMPLETIONS.get().cast(),
    NOWAIT_EAGAIN.get().cast(),
    WORKER_SUBMISSIONS.get().cast(),
    COMPLETIONS_HERE.get().cast(),
    COMPLETIONS_DEFERRED.get().cast(),
    READ_BYTES.get().cast(),
    WRITE_BYTES.get().cast(),
    SKIP_JOURNAL.get().cast(),
    UNDEFERRED.get().cast(),
    WRITE_ZEROES_OFFLOADED.get().cast(),
    PARTSCAN_SKIPPED.get().cast(),
    SKIP_STACK.get().cast(),
    SKIP_RQQOS.get().cast(),
    SKIP_CGROUP.get().cast(),
    SKIP_NESTED.get().cast(),
    SKIP_WRITES.get().cast(),
    SKIP_CMTIME.get().cast(),
    SKIP_ATIME.get().cast(),
    SKIP_DEPTH.get().cast(),
    NOWAIT_PROBES.get().cast(),
    NOWAIT_MAX_DEPTH.get().cast(),
    NR_HW_QUEUES.get().cast(),
    HW_QUEUE_REQUESTS.get().cast(),
    WORKER_QUEUED.get().cast(),
    BACKING_INFLIGHT.get().cast(),
    NOWAIT.get().cast(),
    CACHE_MODE.get().cast(),
    DIO_FALLBACKS.get().cast(),
    core::ptr::null_mut(),
]));

static STATS_GROUP: KernelOwned<bindings::attribute_group> = KernelOwned(UnsafeCell::new({
    // SAFETY: All-zero is a valid `attribute_group`.
    let mut g: bindings::attribute_group = unsafe { core::mem::zeroed() };
    g.name = as_char_ptr_in_const_context(c"rust_loop");
    g.__bindgen_anon_2.attrs = STATS_ATTRS.get().cast();
    g
}));

/// Creates the `rust_loop/` counters group under the disk's kobject.
pub(crate) fn add_stats(kobj: *mut bindings::kobject) -> Result {
    // SAFETY: `kobj` is the disk's live kobject; the group is static.
    kernel::error::to_result(unsafe { bindings::sysfs_create_group(kobj, STATS_GROUP.get()) })
}

/// Removes the `rust_loop/` counters group (waits for running `show`/`store` calls).
pub(crate) fn remove_stats(kobj: *mut bindings::kobject) {
    // SAFETY: The group was created on `kobj` by `add_stats`.
    unsafe { bindings::sysfs_remove_group(kobj, STATS_GROUP.get()) }
}

/// Creates the `loop/` group under the disk's kobject.
pub(crate) fn add(kobj: *mut bindings::kobject) -> Result {
    // SAFETY: `kobj` is the disk's live kobject; the group is static.
    kernel::error::to_result(unsafe { bindings::sysfs_create_group(kobj, GROUP.get()) })
}

/// Removes the `loop/` group (waits for running `show` calls).
pub(crate) fn remove(kobj: *mut bindings::kobject) {
    // SAFETY: The group was created on `kobj` by `add`.
    unsafe { bindings::sysfs_remove_group(kobj, GROUP.get()) }
}

/// The loop device of a disk's `struct device` (`dev_to_disk(dev)->private_data`).
///
/// # Safety
///
/// `dev` must be the device of a live loop disk.
unsafe fn device_of<'a>(dev: *mut bindings::device) -> &'a LoopDevice {
    let off = core::mem::offset_of!(bindings::block_device, bd_device);
    // SAFETY: A disk's device is embedded in its whole-disk `block_device`, whose `bd_disk`
    // holds the loop device in `private_data` while the disk lives.
    unsafe {
        let bdev = dev.cast::<u8>().sub(off).cast::<bindings::block_device>();
        &*(*(*bdev).bd_disk).private_data.cast::<LoopDevice>()
    }
}

/// Formats into a sysfs page.
struct Page<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Write for Page<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let b = s.as_bytes();
        let end = self.len + b.len();
        // Keep room for the terminating NUL.
        if end >= self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(b);
        self.len = end;
        Ok(())
    }
}

/// Runs `f` on the loop device and the page of a `show` call.
///
/// # Safety
///
/// `dev` and `buf` must be what sysfs passes to a `show` callback of our group.
unsafe fn show(
    dev: *mut bindings::device,
    buf: *mut u8,
    f: impl FnOnce(&LoopDevice, &mut [u8]) -> core::result::Result<usize, Error>,
) -> isize {
    // SAFETY: sysfs passes a live loop disk's device and a `PAGE_SIZE` buffer.
    let (lo, page) = unsafe {
        (
            device_of(dev),
            core::slice::from_raw_parts_mut(buf, kernel::page::PAGE_SIZE),
        )
    };
    match f(lo, page) {
        Ok(n) => n as isize,
        Err(e) => e.to_errno() as isize,
    }
}

fn emit(page: &mut [u8], args: core::fmt::Arguments<'_>) -> core::result::Result<usize, Error> {
    let mut p = Page { buf: page, len: 0 };
    p.write_fmt(args).map_err(|_| EINVAL)?;
    let n = p.len;
    page[n] = 0;
    Ok(n)
}

/// `backing_file`: the path of the backing file (empty if there is none).
///
/// # Safety
///
/// Only sysfs calls this, as the `show` of an attribute of our groups, which exist only on loop
/// disks: `dev` is the device of a live loop disk and `buf` a `PAGE_SIZE` buffer.
unsafe extern "C" fn show_backing_file(
    dev: *mut bindings::device,
    _attr: *mut bindings::device_attribute,
    buf: *mut u8,
) -> isize {
    // SAFETY: Called by sysfs for our attribute.
    unsafe {
        show(dev, buf, |lo, page| match lo.backing_file() {
            Some(f) => f.path_to_sysfs(page),
            None => Ok(0),
        })
    }
}

/// Defines the sysfs `show` function `$name`, printing `$value` (computed from the loop device
/// `$lo`) and a newline.
macro_rules! show_value {
    ($name:ident, |$lo:ident| $value:expr) => {
        /// Prints one value of the loop device.
        ///
        /// # Safety
        ///
        /// Only sysfs calls this, as the `show` of an attribute of our groups, which exist only on
        /// loop disks: `dev` is the device of a live loop disk and `buf` a `PAGE_SIZE` buffer.
        unsafe extern "C" fn $name(
            dev: *mut bindings::device,
            _attr: *mut bindings::device_attribute,
            buf: *mut u8,
        ) -> isize {
            // SAFETY: Called by sysfs for our attribute.
            unsafe {
                show(dev, buf, |$lo, page| {
                    emit(page, format_args!("{}\n", $value))
                })
            }
        }
    };
}

show_value!(show_offset, |lo| lo.offset());
show_value!(show_nr_hw_queues, |lo| lo.nr_hw_queues());
show_value!(show_sizelimit, |lo| lo.sizelimit());
show_value!(show_autoclear, |lo| u8::from(
    lo.flags() & FLAG_AUTOCLEAR != 0
));
show_value!(show_partscan, |lo| u8::from(
    lo.flags() & FLAG_PARTSCAN != 0
));
show_value!(show_dio, |lo| u8::from(lo.flags() & FLAG_DIRECT_IO != 0));
show_value!(show_cache_mode, |lo| lo.cache_mode());
show_value!(show_dio_fallbacks, |lo| lo
    .stats
    .dio_fallbacks
    .load(Ordering::Relaxed));
show_value!(show_nowait, |lo| u8::from(
    lo.nowait_on.load(Ordering::Relaxed)
));

show_value!(show_nowait_completions, |lo| lo
    .stats
    .nowait_completions
    .load(Ordering::Relaxed));
show_value!(show_nowait_eagain, |lo| lo
    .stats
    .nowait_eagain
    .load(Ordering::Relaxed));
show_value!(show_partscan_skipped, |lo| lo
    .stats
    .partscan_skipped
    .load(Ordering::Relaxed));
show_value!(show_write_zeroes_offloaded, |lo| lo
    .stats
    .write_zeroes_offloaded
    .load(Ordering::Relaxed));
show_value!(show_undeferred, |lo| lo
    .stats
    .nowait_undeferred
    .load(Ordering::Relaxed));
show_value!(show_worker_queued, |lo| lo
    .stats
    .worker_queued
    .load(Ordering::Relaxed));
show_value!(show_backing_inflight, |lo| lo
    .stats
    .backing_inflight
    .load(Ordering::Relaxed));
show_value!(show_worker_submissions, |lo| lo
    .stats
    .worker_submissions
    .load(Ordering::Relaxed));
show_value!(show_completions_here, |lo| lo
    .stats
    .completions_here
    .load(Ordering::Relaxed));
show_value!(show_completions_deferred, |lo| lo
    .stats
    .completions_deferred
    .load(Ordering::Relaxed));
show_value!(show_read_bytes, |lo| lo
    .stats
    .read_bytes
    .load(Ordering::Relaxed));
show_value!(show_write_bytes, |lo| lo
    .stats
    .write_bytes
    .load(Ordering::Relaxed));
show_value!(show_skip_journal, |lo| lo
    .stats
    .nowait_skip_journal
    .load(Ordering::Relaxed));
show_value!(show_skip_stack, |lo| lo
    .stats
    .nowait_skip_stack
    .load(Ordering::Relaxed));
show_value!(show_skip_rqqos, |lo| lo
    .stats
    .nowait_skip_rqqos
    .load(Ordering::Relaxed));
show_value!(show_skip_cgroup, |lo| lo
    .stats
    .nowait_skip_cgroup
    .load(Ordering::Relaxed));
show_value!(show_skip_writes, |lo| lo
    .stats
    .nowait_skip_writes
    .load(Ordering::Relaxed));
show_value!(show_skip_cmtime, |lo| lo
    .stats
    .nowait_skip_cmtime
    .load(Ordering::Relaxed));
show_value!(show_skip_atime, |lo| lo
    .stats
    .nowait_skip_atime
    .load(Ordering::Relaxed));
show_value!(show_skip_depth, |lo| lo
    .stats
    .nowait_skip_depth
    .load(Ordering::Relaxed));
show_value!(show_nowait_probes, |lo| lo
    .stats
    .nowait_probes
    .load(Ordering::Relaxed));
show_value!(show_nowait_max_depth, |lo| lo.nowait_max_depth());
show_value!(show_skip_nested, |lo| lo
    .stats
    .nowait_skip_nested
    .load(Ordering::Relaxed));

/// Requests started per hardware queue, space-separated.
///
/// # Safety
///
/// Only sysfs calls this, as the `show` of an attribute of our groups, which exist only on loop
/// disks: `dev` is the device of a live loop disk and `buf` a `PAGE_SIZE` buffer.
unsafe extern "C" fn show_hw_queue_requests(
    dev: *mut bindings::device,
    _attr: *mut bindings::device_attribute,
    buf: *mut u8,
) -> isize {
    // SAFETY: Called by sysfs for our attribute.
    unsafe {
        show(dev, buf, |lo, page| {
            lo.hw_queue_requests(|counts| {
                let mut p = Page { buf: page, len: 0 };
                for (i, n) in counts.enumerate() {
                    let sep = if i == 0 { "" } else { " " };
                    write!(p, "{sep}{n}").map_err(|_| EINVAL)?;
                }
                p.write_str("\n").map_err(|_| EINVAL)?;
                let n = p.len;
                page[n] = 0;
                Ok(n)
            })
        })
    }
}

/// Parses the decimal `u32` a `store` call got and hands it to `f`.
///
/// # Safety
///
/// `dev`, `buf` and `count` must be what sysfs passes to a `store` callback of our groups:
/// `dev` is the device of a live loop disk and `buf` holds `count` readable bytes.
unsafe fn store_u32(
    dev: *mut bindings::device,
    buf: *const u8,
    count: usize,
    f: impl FnOnce(&LoopDevice, u32) -> Result,
) -> isize {
    // SAFETY: Forwarded from the caller.
    unsafe {
        store_str(dev, buf, count, |lo, s| {
            f(lo, s.parse::<u32>().map_err(|_| EINVAL)?)
        })
    }
}

/// The body of a `store` callback taking a word: `buf` as UTF-8 without surrounding white space
/// goes to `f`; returns `count` or the negative errno (`EINVAL` for input that is not UTF-8).
///
/// # Safety
///
/// As [`store_u32`].
unsafe fn store_str(
    dev: *mut bindings::device,
    buf: *const u8,
    count: usize,
    f: impl FnOnce(&LoopDevice, &str) -> Result,
) -> isize {
    // SAFETY: sysfs passes a live loop disk's device and `count` readable bytes.
    let (lo, input) = unsafe { (device_of(dev), core::slice::from_raw_parts(buf, count)) };
    let word = core::str::from_utf8(input).map_err(|_| EINVAL);
    match word.and_then(|s| f(lo, s.trim())) {
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// `echo N > /sys/block/loopN/rust_loop/nr_hw_queues`: hardware queues (and workers) of an
/// unbound device. EBUSY while bound, EINVAL outside 1..=online CPUs.
///
/// # Safety
///
/// Only sysfs calls this, as the `store` of `rust_loop/nr_hw_queues`, which exists only on loop
/// disks: `dev` is the device of a live loop disk and `buf` holds `count` readable bytes.
unsafe extern "C" fn store_nr_hw_queues(
    dev: *mut bindings::device,
    _attr: *mut bindings::device_attribute,
    buf: *const u8,
    count: usize,
) -> isize {
    // SAFETY: Called by sysfs for our attribute.
    unsafe { store_u32(dev, buf, count, LoopDevice::set_nr_hw_queues) }
}

/// `echo normal|dontcache > /sys/block/loopN/rust_loop/cache_mode`: buffered backing I/O with
/// or without `IOCB_DONTCACHE`, any time (see [`LoopDevice::set_cache_mode`] for the errors).
///
/// # Safety
///
/// Only sysfs calls this, as the `store` of `rust_loop/cache_mode`, which exists only on loop
/// disks: `dev` is the device of a live loop disk and `buf` holds `count` readable bytes.
unsafe extern "C" fn store_cache_mode(
    dev: *mut bindings::device,
    _attr: *mut bindings::device_attribute,
    buf: *const u8,
    count: usize,
) -> isize {
    // SAFETY: Called by sysfs for our attribute.
    unsafe { store_str(dev, buf, count, LoopDevice::set_cache_mode) }
}

/// `echo N > /sys/block/loopN/rust_loop/nowait_max_depth`: the in-flight depth from which a
/// single task's direct I/O goes to the worker (and every task's from 16 on, or from N if
/// larger), any time (the next request sees it). EINVAL
/// unless a `u32`.
///
/// # Safety
///
/// Only sysfs calls this, as the `store` of `rust_loop/nowait_max_depth`, which exists only on
/// loop disks: `dev` is the device of a live loop disk and `buf` holds `count` readable bytes.
unsafe extern "C" fn store_nowait_max_depth(
    dev: *mut bindings::device,
    _attr: *mut bindings::device_attribute,
    buf: *const u8,
    count: usize,
) -> isize {
    // SAFETY: Called by sysfs for our attribute.
    unsafe {
        store_u32(dev, buf, count, |lo, n| {
            lo.set_nowait_max_depth(n);
            Ok(())
        })
    }
}
