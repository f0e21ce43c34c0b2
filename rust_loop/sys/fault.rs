// SPDX-License-Identifier: GPL-2.0

//! The switch of the tests' fault injection (debugfs' `inject_drop_requests`), a static key: off,
//! which it is unless a test writes that file, the request path's check is a no-op instruction
//! the kernel patches into a jump the first time a test arms it. The module users run carries
//! no load, no branch on data, for a test's benefit.
//!
//! C header: [`include/linux/jump_label.h`](srctree/include/linux/jump_label.h).

use kernel::bindings;

/// The static key's type as `static_branch_unlikely!` takes it: a struct with the key as a
/// field (rust_loop/helpers.c defines the one instance, `DEFINE_STATIC_KEY_FALSE`).
#[repr(C)]
pub(crate) struct FaultKey {
    key: bindings::static_key_false,
}

extern "C" {
    // rust_loop/helpers.c.
    static rust_loop_fault_injection: FaultKey;
    fn rust_loop_fault_injection_enable();
}

/// Whether a test has ever armed fault injection since the module was loaded. A patched jump
/// (with `CONFIG_JUMP_LABEL`, every kernel of the matrix), so cheap enough for `queue_rq`.
#[inline(always)]
pub(crate) fn fault_injection_armed() -> bool {
    // SAFETY: `rust_loop_fault_injection` is a static key the C side defines with
    // `DEFINE_STATIC_KEY_FALSE`, living as long as the module; the macro only takes its address
    // (for the jump table, or for `static_key_count` without jump labels).
    unsafe { kernel::static_branch_unlikely!(rust_loop_fault_injection, FaultKey, key) }
}

/// Arms fault injection for the rest of the module's life: [`fault_injection_armed`] is true
/// from now on. May sleep (it patches kernel text); a debugfs write may.
pub(crate) fn arm_fault_injection() {
    // SAFETY: `static_branch_enable` on the module's own key, from process context.
    unsafe { rust_loop_fault_injection_enable() }
}
