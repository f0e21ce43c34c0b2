// SPDX-License-Identifier: GPL-2.0
//! The feature tests' control: compiles against every kernel rust_loop supports. If it does not,
//! the feature tests' flags are wrong for this kernel (not its features), and Kbuild stops
//! rather than take every Rust test for a missing feature.

/// A kernel-crate type, used as every feature test uses the crate.
pub fn control() -> kernel::error::Result {
    Ok(())
}
