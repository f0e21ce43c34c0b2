// SPDX-License-Identifier: GPL-2.0

//! rust_loop: the loop block driver (`drivers/block/loop.c`) in Rust.
//!
//! Block major 7, devices `loopN`, `/dev/loop-control` (misc minor 237), driven by util-linux
//! `losetup` through the loop ioctl ABI.

use kernel::prelude::*;

module! {
    type: LoopModule,
    name: "rust_loop",
    authors: ["rust_loop developers"],
    description: "Loopback block device in Rust",
    license: "GPL",
    params: {
        max_loop: i32 {
            default: 8,
            description: "Initial number of loop devices",
        },
        max_part: i32 {
            default: 0,
            description: "Maximum number of partitions per loop device",
        },
        hw_queue_depth: i32 {
            default: 128,
            description: "Queue depth for each hardware queue. Default: 128",
        },
    },
}

/// The module: owns every loop device and `/dev/loop-control`.
struct LoopModule;

impl kernel::Module for LoopModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("rust_loop: module loaded\n");
        Ok(LoopModule)
    }
}
