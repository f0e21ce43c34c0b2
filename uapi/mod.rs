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

/// `struct compat_loop_info`: `loop_info` as a 32-bit x86 process lays it out.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CompatLoopInfo {
    pub(crate) lo_number: i32,
    pub(crate) lo_device: u16,
    pub(crate) lo_inode: u32,
    pub(crate) lo_rdevice: u16,
    pub(crate) lo_offset: i32,
    pub(crate) lo_encrypt_type: i32,
    pub(crate) lo_encrypt_key_size: i32,
    pub(crate) lo_flags: i32,
    pub(crate) lo_name: [core::ffi::c_char; LO_NAME_SIZE as usize],
    pub(crate) lo_encrypt_key: [u8; LO_KEY_SIZE as usize],
    pub(crate) lo_init: [u32; 2],
    pub(crate) reserved: [u8; 4],
}

// SAFETY: Integers and arrays of integers: every bit pattern is a valid value.
unsafe impl kernel::transmute::FromBytes for CompatLoopInfo {}

// The 32-bit layout, fixed by the ABI.
const _: () = assert!(core::mem::size_of::<CompatLoopInfo>() == 140);
const _: () = assert!(core::mem::offset_of!(CompatLoopInfo, lo_name) == 32);
