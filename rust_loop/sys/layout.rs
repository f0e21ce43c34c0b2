// SPDX-License-Identifier: GPL-2.0

//! Build-time truth: the C values this crate depends on, as the C compiler sees them
//! (`c_values.c`, compiled to assembly by Kbuild and turned into `c_values_generated.rs`), checked
//! at compile time against bindgen's view: the size and the field offsets of every structure
//! whose fields the crate reads or writes, and the constants bindgen cannot export (typed macros
//! such as `BLK_OPEN_WRITE`), which the crate takes from here rather than copying them. A
//! difference fails the build (GCC and bindgen's clang do disagree on some structures, e.g.
//! `task_struct`, which the crate therefore never touches directly). Every generated value is
//! used here or by a constant of this layer: one left over is a dead-code error.

use core::mem::{offset_of, size_of};
use kernel::bindings as b;

/// Asserts at compile time that bindgen's `struct $t` has the C compiler's size `$v`.
macro_rules! size {
    ($t:ident, $v:literal) => {
        const _: () = assert!(
            size_of::<b::$t>() == $v,
            concat!(
                "size of struct ",
                stringify!($t),
                ": bindgen and the C compiler differ"
            )
        );
    };
}

/// Asserts at compile time that field `$f` of bindgen's `struct $t` is at the C compiler's
/// offset `$v` (fields of anonymous unions under bindgen's name for the union).
macro_rules! offset {
    (file, f_path, $v:literal) => {
        offset!(@check file, __bindgen_anon_1.f_path, $v);
    };
    (attribute_group, attrs, $v:literal) => {
        offset!(@check attribute_group, __bindgen_anon_2.attrs, $v);
    };
    ($t:ident, $f:ident, $v:literal) => {
        offset!(@check $t, $f, $v);
    };
    (@check $t:ident, $($f:ident).+, $v:literal) => {
        const _: () = assert!(
            offset_of!(b::$t, $($f).+) == $v,
            concat!(
                "offset of ",
                stringify!($t),
                ".",
                stringify!($($f).+),
                ": bindgen and the C compiler differ"
            )
        );
    };
}

/// The C compiler's values (generated): the typed constants, and the checks above for every
/// structure and field that `c_values.c` lists.
#[allow(non_upper_case_globals)]
pub(super) mod c {
    use super::*;

    include!("c_values_generated.rs");
}
