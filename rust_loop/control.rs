// SPDX-License-Identifier: GPL-2.0

//! `/dev/loop-control` (misc minor 237): `LOOP_CTL_ADD`, `LOOP_CTL_REMOVE`, `LOOP_CTL_GET_FREE`.

use super::sys::{FixedMinorMisc, MiscRegistration};
use crate::uapi;
use kernel::{bindings, prelude::*};

/// The loop-control device.
pub(crate) struct LoopControl;

/// The registered `/dev/loop-control`.
pub(crate) type ControlDevice = MiscRegistration<LoopControl>;

impl FixedMinorMisc for LoopControl {
    type Module = crate::LoopModule;
    const NAME: &'static CStr = c"loop-control";
    const MINOR: i32 = bindings::LOOP_CTRL_MINOR as i32;

    fn ioctl(cmd: u32, parm: usize) -> Result<isize> {
        // The index is an `int` in loop.c: a huge or negative value means "any" (ADD) or is
        // refused (REMOVE).
        let index = parm as i32;
        let n = match cmd {
            uapi::LOOP_CTL_ADD => super::devices::add_device(index),
            uapi::LOOP_CTL_REMOVE => super::devices::remove_device(index),
            uapi::LOOP_CTL_GET_FREE => super::devices::get_free_device(),
            _ => Err(crate::rust_loop::sys::compat::code::enosys()),
        }?;
        Ok(n as isize)
    }
}
