// SPDX-License-Identifier: GPL-2.0

//! `/dev/loop-control` (misc minor 237): `LOOP_CTL_ADD`, `LOOP_CTL_REMOVE`, `LOOP_CTL_GET_FREE`.
//!
//! The kernel crate's `MiscDeviceRegistration` always asks for a dynamic minor, but
//! `/dev/loop-control` has the fixed minor 237 (its module alias `char-major-10-237` and the
//! static device node depend on it), so the registration is done here over `kernel::bindings`.

use crate::uapi;
use kernel::{bindings, error::to_result, prelude::*, types::Opaque};

/// The registered `/dev/loop-control` misc device.
///
/// # Invariants
///
/// `misc` is registered with `misc_register` for as long as this object exists.
#[pin_data(PinnedDrop)]
pub(crate) struct ControlDevice {
    #[pin]
    misc: Opaque<bindings::miscdevice>,
}

// SAFETY: `misc_deregister` may run on any thread.
unsafe impl Send for ControlDevice {}
// SAFETY: No `&self` method touches the registration.
unsafe impl Sync for ControlDevice {}

const FOPS: bindings::file_operations = bindings::file_operations {
    owner: crate::this_module_const(),
    open: Some(bindings::nonseekable_open),
    llseek: Some(bindings::noop_llseek),
    unlocked_ioctl: Some(control_ioctl),
    compat_ioctl: Some(control_ioctl),
    // SAFETY: All-zero is a valid `file_operations` (every operation absent).
    ..unsafe { core::mem::zeroed() }
};

impl ControlDevice {
    /// Registers `/dev/loop-control` with minor `LOOP_CTRL_MINOR`.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            misc <- Opaque::try_ffi_init(|slot: *mut bindings::miscdevice| {
                // SAFETY: All-zero is a valid `miscdevice`.
                let mut m: bindings::miscdevice = unsafe { core::mem::zeroed() };
                m.minor = bindings::LOOP_CTRL_MINOR as i32;
                m.name = c"loop-control".as_char_ptr();
                m.fops = &FOPS;
                // INVARIANT: registered if this returns Ok.
                // SAFETY: `slot` is pinned memory that outlives the registration (`drop`).
                unsafe {
                    slot.write(m);
                    to_result(bindings::misc_register(slot))
                }
            }),
        })
    }
}

#[pinned_drop]
impl PinnedDrop for ControlDevice {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered (type invariant); deregistered exactly once.
        unsafe { bindings::misc_deregister(self.misc.get()) }
    }
}

/// `unlocked_ioctl` and `compat_ioctl` of `/dev/loop-control`. Safe: it reads neither the file
/// nor user memory (the argument is a device index).
extern "C" fn control_ioctl(
    _file: *mut bindings::file,
    cmd: core::ffi::c_uint,
    parm: usize,
) -> isize {
    // The index is an `int` in loop.c: a huge or negative value means "any" (ADD) or is refused
    // (REMOVE).
    let index = parm as i32;
    let r = match cmd {
        uapi::LOOP_CTL_ADD => crate::add_device(index),
        uapi::LOOP_CTL_REMOVE => crate::remove_device(index),
        uapi::LOOP_CTL_GET_FREE => crate::get_free_device(),
        _ => Err(ENOSYS),
    };
    match r {
        Ok(n) => n as isize,
        Err(e) => e.to_errno() as isize,
    }
}
