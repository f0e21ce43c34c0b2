// SPDX-License-Identifier: GPL-2.0

//! A misc character device with a fixed minor and only ioctls.
//!
//! The kernel crate's `MiscDeviceRegistration` always asks for a dynamic minor; a device such
//! as `/dev/loop-control` has a fixed one (its module alias `char-major-10-237` and static
//! device nodes depend on it).
//!
//! C header: [`include/linux/miscdevice.h`](srctree/include/linux/miscdevice.h).

use core::marker::PhantomData;
use kernel::{bindings, error::to_result, prelude::*, types::Opaque};

/// What a fixed-minor misc device does.
pub(crate) trait FixedMinorMisc: 'static {
    /// The module the device's code belongs to (the `owner` of its file operations).
    type Module: kernel::ModuleMetadata;
    /// The device's name (`/dev/<NAME>`).
    const NAME: &'static CStr;
    /// Its minor on the misc major.
    const MINOR: i32;
    /// `unlocked_ioctl` and `compat_ioctl`: `arg` is taken as a number, never as a user pointer
    /// (so the 32-bit call needs no conversion). Returns the call's non-negative result.
    fn ioctl(cmd: u32, arg: usize) -> Result<isize>;
}

/// A registered fixed-minor misc device.
///
/// # Invariants
///
/// `misc` is registered with `misc_register` for as long as this object exists.
#[pin_data(PinnedDrop)]
pub(crate) struct MiscRegistration<T: FixedMinorMisc> {
    #[pin]
    misc: Opaque<bindings::miscdevice>,
    _t: PhantomData<T>,
}

// SAFETY: `misc_deregister` may run on any thread.
unsafe impl<T: FixedMinorMisc> Send for MiscRegistration<T> {}
// SAFETY: No `&self` method touches the registration.
unsafe impl<T: FixedMinorMisc> Sync for MiscRegistration<T> {}

impl<T: FixedMinorMisc> MiscRegistration<T> {
    const FOPS: bindings::file_operations = bindings::file_operations {
        owner: super::compat::this_module::<T::Module>(),
        open: Some(bindings::nonseekable_open),
        llseek: Some(bindings::noop_llseek),
        unlocked_ioctl: Some(Self::ioctl_callback),
        compat_ioctl: Some(Self::ioctl_callback),
        // SAFETY: All-zero is a valid `file_operations` (every operation absent).
        ..unsafe { core::mem::zeroed() }
    };

    /// Registers the device.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            misc <- Opaque::try_ffi_init(|slot: *mut bindings::miscdevice| {
                // SAFETY: All-zero is a valid `miscdevice`.
                let mut m: bindings::miscdevice = unsafe { core::mem::zeroed() };
                m.minor = T::MINOR;
                m.name = T::NAME.as_char_ptr();
                m.fops = &Self::FOPS;
                // INVARIANT: registered if this returns Ok.
                // SAFETY: `slot` is pinned memory that outlives the registration (`drop`).
                unsafe {
                    slot.write(m);
                    to_result(bindings::misc_register(slot))
                }
            }),
            _t: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called by the VFS for a file of this device.
    unsafe extern "C" fn ioctl_callback(
        _file: *mut bindings::file,
        cmd: core::ffi::c_uint,
        arg: usize,
    ) -> isize {
        match T::ioctl(cmd, arg) {
            Ok(n) => n,
            Err(e) => e.to_errno() as isize,
        }
    }
}

#[pinned_drop]
impl<T: FixedMinorMisc> PinnedDrop for MiscRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered (type invariant); deregistered exactly once.
        unsafe { bindings::misc_deregister(self.misc.get()) }
    }
}
