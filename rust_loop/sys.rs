// SPDX-License-Identifier: GPL-2.0

//! The safe layer over `kernel::bindings` that the driver is built on: what the 7.3 kernel
//! crate does not offer yet, one file per C object, shaped like the kernel's own
//! `rust/kernel/block/mq/`. Every `unsafe` block of the crate that wraps a C object lives here;
//! the driver modules beside this folder make the decisions.

#[path = "sys/bdev.rs"]
mod bdev;
#[path = "sys/cgroup.rs"]
mod cgroup;
#[path = "sys/clock.rs"]
mod clock;
#[path = "sys/disk.rs"]
mod disk;
#[path = "sys/file.rs"]
mod file;
#[path = "sys/iov.rs"]
mod iov;
#[path = "sys/kiocb.rs"]
mod kiocb;
#[path = "sys/misc.rs"]
mod misc;
#[path = "sys/module.rs"]
mod module;
#[path = "sys/queue.rs"]
mod queue;
#[path = "sys/request.rs"]
mod request;
#[path = "sys/sysfs.rs"]
mod sysfs;
#[path = "sys/task.rs"]
mod task;
#[path = "sys/worker.rs"]
mod worker;
#[path = "sys/workqueue.rs"]
mod workqueue;

pub(crate) use bdev::*;
pub(crate) use cgroup::*;
pub(crate) use clock::*;
pub(crate) use disk::*;
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
