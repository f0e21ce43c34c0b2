// SPDX-License-Identifier: GPL-2.0
// probes: THIS_MODULE
//! `kernel::ModuleMetadata::THIS_MODULE` (7.3; before it, `module!` defines a `THIS_MODULE`
//! static at the crate root).

/// The module of `M`.
pub fn this_module<M: kernel::ModuleMetadata>() -> *mut kernel::bindings::module {
    M::THIS_MODULE.as_ptr()
}
