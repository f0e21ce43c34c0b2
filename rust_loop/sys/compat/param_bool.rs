// SPDX-License-Identifier: GPL-2.0
// probes: PARAM_OPS_BOOL
//! `module!` takes `bool` parameters (7.3: `kernel::module_param::PARAM_OPS_BOOL`, which the
//! macro names for them; before it, integer types only).

/// The operations of a `bool` parameter.
pub fn ops() -> &'static kernel::bindings::kernel_param_ops {
    &kernel::module_param::PARAM_OPS_BOOL
}
