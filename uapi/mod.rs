// SPDX-License-Identifier: GPL-2.0

//! The loop ioctl ABI: `struct loop_info`, `loop_info64`, `loop_config`, the `LO_FLAGS_*` and
//! `LOOP_*` constants.
//!
//! Generated at build time by bindgen from the kernel's `include/uapi/linux/loop.h` (see Kbuild);
//! the generated layout tests are compile-time assertions, so this can never drift from the C
//! header.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::all
)]

include!("loop_generated.rs");

// SAFETY: Integers and arrays of integers: every bit pattern is a valid value.
unsafe impl kernel::transmute::FromBytes for loop_info {}
// SAFETY: As above.
unsafe impl kernel::transmute::FromBytes for loop_info64 {}
// SAFETY: As above.
unsafe impl kernel::transmute::FromBytes for loop_config {}
// SAFETY: Integers and arrays of integers without padding (the size is the sum of the fields'
// sizes, checked below), so every byte is initialised.
unsafe impl kernel::transmute::AsBytes for loop_info64 {}
// SAFETY: All-zero is a valid value of these integer structures.
unsafe impl pin_init::Zeroable for loop_info64 {}
// SAFETY: As above.
unsafe impl pin_init::Zeroable for loop_config {}

const _: () = {
    use core::mem::size_of;
    let i = size_of::<loop_info64>();
    assert!(i == 5 * 8 + 4 * 4 + 2 * LO_NAME_SIZE as usize + LO_KEY_SIZE as usize + 2 * 8);
};
