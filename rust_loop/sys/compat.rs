// SPDX-License-Identifier: GPL-2.0

//! What differs between the kernels rust_loop is built for (config/kernels.conf: Debian's 7.2 and
//! 7.3), in one place. Each difference is decided at build time by a feature test,
//! `rust_loop/sys/compat/NAME.c`, compiled against the kernel's headers: Kbuild passes
//! `--cfg rust_loop_has_NAME` when it compiles (and `RUST_LOOP_HAS_NAME` to the C files). The
//! rest of the crate calls the functions here and never names a `cfg`.

use kernel::bindings;

/// The offset into its current bvec of a bvec iterator: `bi_offset` (7.3), `bi_bvec_done`
/// before (feature test `bvec_iter_bi_offset`).
#[inline(always)]
pub(crate) fn bvec_iter_offset(iter: &bindings::bvec_iter) -> u32 {
    #[cfg(rust_loop_has_bvec_iter_bi_offset)]
    let offset = iter.bi_offset;
    #[cfg(not(rust_loop_has_bvec_iter_bi_offset))]
    let offset = iter.bi_bvec_done;
    offset
}

/// Sets the offset [`bvec_iter_offset`] reads.
#[inline(always)]
pub(crate) fn set_bvec_iter_offset(iter: &mut bindings::bvec_iter, offset: u32) {
    #[cfg(rust_loop_has_bvec_iter_bi_offset)]
    {
        iter.bi_offset = offset;
    }
    #[cfg(not(rust_loop_has_bvec_iter_bi_offset))]
    {
        iter.bi_bvec_done = offset;
    }
}

/// The `struct module` of the module `M` (`THIS_MODULE`): `M::THIS_MODULE` (7.3), the static
/// that `module!` defines at the crate root before (feature test `this_module_const`).
#[inline]
// Before 7.3 the module is the crate's own, whatever `M` is.
#[cfg_attr(
    not(rust_loop_has_this_module_const),
    allow(clippy::extra_unused_type_parameters)
)]
pub(crate) const fn this_module<M: kernel::ModuleMetadata>() -> *mut bindings::module {
    #[cfg(rust_loop_has_this_module_const)]
    let module = M::THIS_MODULE.as_ptr();
    #[cfg(not(rust_loop_has_this_module_const))]
    let module = crate::THIS_MODULE.as_ptr();
    module
}

/// Invokes the macro `$module` with the type of the module's on/off parameters and its "off"
/// value: `bool, false` where `module!` takes `bool` parameters (7.3), `u8, 0` before (feature
/// test `param_bool`). The value reads as a `bool` through [`Flag`] either way.
macro_rules! with_flag_param_type {
    ($module:ident) => {
        #[cfg(rust_loop_has_param_bool)]
        $module!(bool, false);
        #[cfg(not(rust_loop_has_param_bool))]
        $module!(u8, 0);
    };
}
pub(crate) use with_flag_param_type;

/// The value of an on/off module parameter, of the type [`with_flag_param_type`] gave it.
pub(crate) trait Flag: Copy {
    /// Whether it is on.
    fn is_on(self) -> bool;
}

impl Flag for bool {
    fn is_on(self) -> bool {
        self
    }
}

impl Flag for u8 {
    fn is_on(self) -> bool {
        self != 0
    }
}

/// Error codes that not every kernel's `kernel::error::code` declares (7.2 lacks these), made
/// from the C values, which every kernel has.
pub(crate) mod code {
    use kernel::{bindings, error::Error};

    /// `-ENOSYS`.
    pub(crate) fn enosys() -> Error {
        Error::from_errno(-(bindings::ENOSYS as i32))
    }

    /// `-EOPNOTSUPP`.
    pub(crate) fn eopnotsupp() -> Error {
        Error::from_errno(-(bindings::EOPNOTSUPP as i32))
    }

    /// `-ENAMETOOLONG`.
    pub(crate) fn enametoolong() -> Error {
        Error::from_errno(-(bindings::ENAMETOOLONG as i32))
    }
}

/// A module parameter's value as `module_parameters::NAME.value()` returns it: the value (7.3)
/// or a reference to it (before). [`ParamValue::get`] gives the value either way; the type
/// decides, so no feature test is needed.
pub(crate) trait ParamValue {
    /// The parameter's type.
    type Value;
    /// The value.
    fn get(self) -> Self::Value;
}

impl<T: Copy> ParamValue for &T {
    type Value = T;
    fn get(self) -> T {
        *self
    }
}

macro_rules! param_value_by_value {
    ($($t:ty),*) => {
        $(impl ParamValue for $t {
            type Value = $t;
            fn get(self) -> $t {
                self
            }
        })*
    };
}
param_value_by_value!(i32, u32, u8, bool);
