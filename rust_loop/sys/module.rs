// SPDX-License-Identifier: GPL-2.0

//! References on this module, its block major, and its `nowait_fs` parameter.
//!
//! C headers: [`include/linux/module.h`](srctree/include/linux/module.h),
//! [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use kernel::{bindings, prelude::*};

/// A reference on a module (a bound device holds one on its own, so the module stays loaded).
///
/// # Invariants
///
/// The value owns one reference on the module `module` (null for built-in code, which needs
/// none: `__module_get` and `module_put` accept it).
pub(crate) struct ModuleRef {
    module: *mut bindings::module,
}

// SAFETY: A module reference may be dropped on any thread.
unsafe impl Send for ModuleRef {}
// SAFETY: No `&self` method.
unsafe impl Sync for ModuleRef {}

impl ModuleRef {
    /// Takes a reference on the module `M`. The caller runs inside one of its callbacks (the
    /// module is live).
    pub(crate) fn get<M: kernel::ModuleMetadata>() -> Self {
        let module = super::compat::this_module::<M>();
        // SAFETY: The module is live while its code runs.
        unsafe { bindings::__module_get(module) };
        // INVARIANT: taken just now.
        Self { module }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: The reference is owned by this value (type invariant), dropped once.
        unsafe { bindings::module_put(self.module) }
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

// rust_loop/helpers.c keeps the `nowait_fs` parameter under a spinlock of its own.
extern "C" {
    fn rust_loop_nowait_fs_read(buf: *mut kernel::ffi::c_char, len: usize);
}

/// The value of the `nowait_fs` module parameter, copied into `buf` (truncated to its length
/// less one): the bytes before the NUL. Takes the list's own spinlock, not the module's
/// parameter lock (the caller may hold a frozen queue; rust_loop/helpers.c says why).
pub(crate) fn nowait_fs_param(buf: &mut [u8]) -> &[u8] {
    let len = buf.len();
    if len == 0 {
        return buf;
    }
    // SAFETY: `buf` is writable for `len` bytes; the helper writes at most that many, a NUL
    // included.
    unsafe { rust_loop_nowait_fs_read(buf.as_mut_ptr().cast(), len) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(len);
    &buf[..end]
}
