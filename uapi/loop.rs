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
