// SPDX-License-Identifier: GPL-2.0

//! An open block device, as a block device ioctl gets it, and an exclusive claim on it.
//!
//! C header: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use super::BLK_OPEN_EXCL;
use kernel::{bindings, error::to_result, prelude::*, types::Opaque};

/// An open block device.
///
/// # Invariants
///
/// The wrapped `struct block_device` is open for as long as a reference to this type exists.
#[repr(transparent)]
pub(crate) struct BlockDevice(Opaque<bindings::block_device>);

impl BlockDevice {
    /// # Safety
    ///
    /// `ptr` must be a block device that stays open for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::block_device) -> &'a Self {
        // SAFETY: Transparent wrapper; validity is the caller's guarantee.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut bindings::block_device {
        self.0.get()
    }

    /// An exclusive claim on the device for the time of a reconfiguration
    /// (`bd_prepare_to_claim`), unless the opener (`mode`) already holds it exclusively. `EBUSY`
    /// while someone else holds it.
    pub(crate) fn claim(&self, mode: u32) -> Result<Option<Claim<'_>>> {
        if mode & BLK_OPEN_EXCL != 0 {
            return Ok(None);
        }
        // SAFETY: The device is open (type invariant); the holder is a static cookie.
        to_result(unsafe {
            bindings::bd_prepare_to_claim(self.as_raw(), claim_holder(), core::ptr::null())
        })?;
        // INVARIANT: prepared just now, with `claim_holder()`.
        Ok(Some(Claim { bdev: self }))
    }
}

/// The `holder` cookie of [`Claim`]s.
static CLAIM_HOLDER: u8 = 0;

fn claim_holder() -> *mut core::ffi::c_void {
    (&raw const CLAIM_HOLDER).cast_mut().cast()
}

/// A prepared exclusive claim (`bd_prepare_to_claim`), abandoned on drop.
///
/// # Invariants
///
/// The claim on `bdev` was prepared with `claim_holder()`.
pub(crate) struct Claim<'a> {
    bdev: &'a BlockDevice,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        // SAFETY: Prepared with the same holder (type invariant).
        unsafe { bindings::bd_abort_claiming(self.bdev.as_raw(), claim_holder()) }
    }
}
