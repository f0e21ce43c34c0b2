// SPDX-License-Identifier: GPL-2.0

//! The table of loop devices (`loop_index_idr`): `LOOP_CTL_ADD`, `LOOP_CTL_REMOVE`,
//! `LOOP_CTL_GET_FREE`, creation on open of a missing `/dev/loopN` ([`probe`]), and removal of
//! every device at module exit.

use super::{
    device::{DeviceSettings, LoopDevice, State},
    sys::DebugDir,
};
use core::sync::atomic::Ordering;
use kernel::{bindings, prelude::*, sync::Arc};

kernel::sync::global_lock! {
    // SAFETY: Initialised in `LoopModule::init`, before any device exists.
    /// Every device (`loop_index_idr`), visible or not (`LoopDevice::visible`).
    pub(crate) unsafe(uninit) static DEVICES: Mutex<DeviceTable> = DeviceTable {
        devices: KVec::new(),
        adding: KVec::new(),
        settings: DeviceSettings::DEFAULT,
        max_loop_limit: 0,
        debugfs: None,
    };
}

/// The table of devices ([`DEVICES`]): the devices, and the numbers of those being created.
pub(crate) struct DeviceTable {
    devices: KVec<Arc<LoopDevice>>,
    /// Numbers taken by `LOOP_CTL_ADD`s that are still creating their device (its tag set and
    /// disk are allocated outside the table's lock, as loop.c's `loop_add` does).
    adding: KVec<u32>,
    /// What new devices are made with (the module parameters).
    settings: DeviceSettings,
    /// Highest device count that opening a node may create (`max_loop`; 0: no limit).
    max_loop_limit: u32,
    /// debugfs' `rust_loop/`, where each device has its counters, from module load to exit.
    debugfs: Option<DebugDir>,
}

impl DeviceTable {
    /// Whether `number` belongs to a device, or to one being created.
    fn taken(&self, number: u32) -> bool {
        self.devices.iter().any(|d| d.number == number) || self.adding.contains(&number)
    }
}

impl core::ops::Deref for DeviceTable {
    type Target = KVec<Arc<LoopDevice>>;

    fn deref(&self) -> &Self::Target {
        &self.devices
    }
}

impl core::ops::DerefMut for DeviceTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.devices
    }
}

/// `loop_add`: creates `loop<index>`, or the lowest free number when `index` is negative.
///
/// As loop.c, the table's lock covers choosing the number (reserved in [`DeviceTable::adding`]
/// while the device's tag set and disk are allocated) and entering the device, hidden; its disk
/// is added (sysfs, uevent, tens of milliseconds) outside the lock, so that devices being added
/// or removed at the same time do not wait for each other, and it is shown afterwards.
pub(crate) fn add_device(index: i32) -> Result<u32> {
    let (number, settings) = {
        let mut table = DEVICES.lock();
        let number = if index >= 0 {
            let n = index as u32;
            if table.taken(n) {
                return Err(EEXIST);
            }
            n
        } else {
            let mut n = 0;
            while table.taken(n) {
                n += 1;
            }
            n
        };
        table.adding.push(number, GFP_KERNEL)?;
        (number, table.settings)
    };
    // The tag set and the disk are allocated without the lock, the number reserved meanwhile,
    // so that concurrent adds do not wait for each other's allocations (as loop.c's `loop_add`).
    let made = LoopDevice::new(number, &settings);
    let dev = {
        let mut table = DEVICES.lock();
        table.adding.retain(|n| *n != number);
        let dev = made?;
        table.push(dev.clone(), GFP_KERNEL)?;
        dev
    };
    let added = dev.add_disk();
    let mut devices = DEVICES.lock();
    if let Err(e) = added {
        // Hidden all along: nobody else picked it.
        devices.retain(|d| !Arc::ptr_eq(d, &dev));
        return Err(e);
    }
    if let Some(root) = &devices.debugfs {
        dev.add_debugfs(root);
    }
    dev.visible.store(true, Ordering::Release);
    Ok(dev.number)
}

/// `loop_control_remove`.
pub(crate) fn remove_device(index: i32) -> Result<u32> {
    if index < 0 {
        kernel::pr_warn_once!("deleting an unspecified loop device is not supported.\n");
        return Err(EINVAL);
    }
    let dev = {
        let devices = DEVICES.lock();
        let dev = devices
            .iter()
            .find(|d| d.number == index as u32 && d.visible.load(Ordering::Acquire))
            .ok_or(ENODEV)?
            .clone();
        // Hidden while we check it, so nobody else picks or removes it.
        dev.visible.store(false, Ordering::Release);
        dev
    };
    if let Err(e) = dev.begin_delete() {
        dev.visible.store(true, Ordering::Release);
        return Err(e);
    }
    // The number stays taken (the device in the table, hidden) until the disk is deleted, as
    // loop.c keeps it in its idr: a `LOOP_CTL_ADD`/`GET_FREE` picking it earlier would register
    // a second `loopN` in sysfs while the old one is still there (`EEXIST`, found by the fuzzer).
    // Freeing the tag set and the disk waits for grace periods that the caller need not wait
    // for: that goes to the module's queue (or runs here, should the queue item not allocate).
    if let Some(release) = dev.remove() {
        super::release::drop_later(release);
    }
    {
        let mut devices = DEVICES.lock();
        if let Some(pos) = devices.iter().position(|d| Arc::ptr_eq(d, &dev)) {
            drop(devices.remove(pos));
        }
    }
    Ok(0)
}

/// `loop_control_get_free`: the first unbound device, else a new one.
pub(crate) fn get_free_device() -> Result<u32> {
    {
        let devices = DEVICES.lock();
        let mut free: Option<u32> = None;
        for d in devices.iter() {
            if d.visible.load(Ordering::Acquire) && d.state() == State::Unbound {
                free = Some(free.map_or(d.number, |f| f.min(d.number)));
            }
        }
        if let Some(n) = free {
            return Ok(n);
        }
    }
    add_device(-1)
}

/// `loop_probe`: opening `/dev/loopN` of a device that does not exist creates it. Safe: it only
/// uses the device number.
pub(crate) extern "C" fn probe(devt: bindings::dev_t) {
    let (shift, limit) = {
        let table = DEVICES.lock();
        (table.settings.part_shift, table.max_loop_limit)
    };
    let index = (devt & ((1 << bindings::MINORBITS) - 1)) >> shift;
    if limit != 0 && index >= limit {
        return;
    }
    let _ = add_device(index as i32);
}

/// Sets what new devices are made with, and the highest device number that opening a node may
/// create (`max_loop_limit`, 0: no limit); makes debugfs' `rust_loop/`. At module load, before
/// any device exists ([`DEVICES`] initialised).
pub(crate) fn configure(settings: DeviceSettings, max_loop_limit: u32) {
    let mut table = DEVICES.lock();
    table.settings = settings;
    table.max_loop_limit = max_loop_limit;
    table.debugfs = Some(DebugDir::new(c"rust_loop", None));
}

/// Removes every device (module exit: nobody can reach the table any more, the control device
/// and major are gone, and no device is open or bound, either of which holds a module
/// reference).
pub(crate) fn remove_all() {
    let (devices, adding, debugfs) = {
        let mut table = DEVICES.lock();
        // Both vectors taken out, so that their buffers are freed with them (the static
        // outlives the module: kmemleak on the debug kernel).
        (
            core::mem::take(&mut table.devices),
            core::mem::take(&mut table.adding),
            table.debugfs.take(),
        )
    };
    drop(adding);
    for dev in devices.iter() {
        drop(dev.remove());
    }
    drop(debugfs);
}
