// SPDX-License-Identifier: GPL-2.0

//! References on this module, and its block major.
//!
//! C headers: [`include/linux/module.h`](srctree/include/linux/module.h),
//! [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use kernel::{bindings, prelude::*};

/// A reference on this module (a bound device holds one, so the module stays loaded).
///
/// # Invariants
///
/// The value owns one reference on this module.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference. The caller runs inside one of the module's callbacks (the module
    /// is live).
    pub(crate) fn get() -> Self {
        // SAFETY: The module is live while its code runs.
        unsafe { bindings::__module_get(crate::this_module()) };
        // INVARIANT: taken just now.
        Self(())
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: The reference is owned by this value (type invariant), dropped once.
        unsafe { bindings::module_put(crate::this_module()) }
    }
}

/// A registered block major (`__register_blkdev`), unregistered on drop.
///
/// # Invariants
///
/// `major` is registered under `name`.
pub(crate) struct BlockMajor {
    major: u32,
    name: &'static CStr,
}

impl BlockMajor {
    /// Registers `major` as `name`; opening a missing device node of it calls `probe` with the
    /// device number first (which may create the device).
    pub(crate) fn register(
        major: u32,
        name: &'static CStr,
        probe: unsafe extern "C" fn(bindings::dev_t),
    ) -> Result<Self> {
        // SAFETY: `name` and `probe` are static; the probe stays registered until `drop`.
        let rc = unsafe { bindings::__register_blkdev(major, name.as_char_ptr(), Some(probe)) };
        if rc != 0 {
            return Err(EIO);
        }
        // INVARIANT: registered just now.
        Ok(Self { major, name })
    }
}

impl Drop for BlockMajor {
    fn drop(&mut self) {
        // SAFETY: Registered (type invariant), unregistered once.
        unsafe { bindings::unregister_blkdev(self.major, self.name.as_char_ptr()) };
    }
}
