// SPDX-License-Identifier: GPL-2.0

//! The safe layer over `kernel::bindings` that the driver is built on: what the 7.3 kernel
//! crate does not offer yet, one file per C object, shaped like the kernel's own
//! `rust/kernel/block/mq/`. Every `unsafe` block of the crate that wraps a C object lives here;
//! the driver modules beside this folder make the decisions.

mod bdev;
mod cgroup;
mod claims;
mod clock;
pub(crate) mod compat;
mod datapath;
mod debugfs;
mod disk;
mod fault;
mod file;
mod iov;
mod kiocb;
mod layout;
mod misc;
mod module;
mod queue;
mod request;
mod sysfs;
mod task;
mod worker;
mod workqueue;

pub(crate) use bdev::*;
pub(crate) use cgroup::*;
pub(crate) use claims::*;
pub(crate) use clock::*;
pub(crate) use datapath::*;
pub(crate) use debugfs::*;
pub(crate) use disk::*;
pub(crate) use fault::*;
pub(crate) use file::*;
pub(crate) use iov::*;
pub(crate) use kiocb::*;
pub(crate) use misc::*;
pub(crate) use module::*;
pub(crate) use queue::*;
pub(crate) use request::*;
pub(crate) use sysfs::*;
pub(crate) use task::*;
pub(crate) use worker::*;
pub(crate) use workqueue::*;
