// SPDX-License-Identifier: GPL-2.0

//! A load-time check that the C structures whose fields this crate touches are laid out as
//! bindgen told the crate: the C compiler measures them in `rust_loop/helpers.c`
//! (`rust_loop_c_layout`), the crate measures bindgen's view here, in the same order, and the
//! module refuses to load on any difference (GCC and bindgen's clang do disagree on some
//! structures, e.g. `task_struct`, which the crate therefore never touches directly).

use core::mem::{offset_of, size_of};
use kernel::{bindings as b, prelude::*};

extern "C" {
    static rust_loop_c_layout: [kernel::ffi::c_ulong; 0];
    static rust_loop_c_layout_len: core::ffi::c_uint;
}

macro_rules! sz {
    ($t:ident) => {
        (stringify!($t), size_of::<b::$t>())
    };
}
macro_rules! off {
    ($t:ident, $($f:tt)+) => {
        (concat!(stringify!($t), ".", stringify!($($f)+)), offset_of!(b::$t, $($f)+))
    };
}

/// bindgen's view, in the order of `rust_loop_c_layout`.
const RUST_LAYOUT: &[(&str, usize)] = &[
    sz!(request),
    off!(request, q),
    off!(request, cmd_flags),
    off!(request, __data_len),
    off!(request, __sector),
    off!(request, bio),
    off!(request, biotail),
    sz!(bio),
    off!(bio, bi_next),
    off!(bio, bi_iter),
    off!(bio, bi_io_vec),
    off!(bio, bi_ioprio),
    sz!(bio_vec),
    sz!(bvec_iter),
    off!(bvec_iter, bi_size),
    off!(bvec_iter, bi_idx),
    off!(bvec_iter, bi_offset),
    sz!(request_queue),
    off!(request_queue, queuedata),
    off!(request_queue, limits),
    off!(request_queue, limits_lock),
    off!(request_queue, rq_qos),
    sz!(queue_limits),
    off!(queue_limits, features),
    off!(queue_limits, max_hw_sectors),
    off!(queue_limits, logical_block_size),
    off!(queue_limits, physical_block_size),
    off!(queue_limits, io_min),
    off!(queue_limits, dma_alignment),
    off!(queue_limits, max_segments),
    off!(queue_limits, max_hw_discard_sectors),
    off!(queue_limits, max_write_zeroes_sectors),
    off!(queue_limits, discard_granularity),
    sz!(gendisk),
    off!(gendisk, major),
    off!(gendisk, first_minor),
    off!(gendisk, minors),
    off!(gendisk, disk_name),
    off!(gendisk, events),
    off!(gendisk, event_flags),
    off!(gendisk, part0),
    off!(gendisk, fops),
    off!(gendisk, queue),
    off!(gendisk, private_data),
    off!(gendisk, state),
    off!(gendisk, open_mutex),
    sz!(block_device),
    off!(block_device, bd_dev),
    off!(block_device, bd_disk),
    off!(block_device, bd_openers),
    off!(block_device, bd_device),
    sz!(device),
    off!(device, kobj),
    sz!(blk_mq_tag_set),
    off!(blk_mq_tag_set, ops),
    off!(blk_mq_tag_set, nr_hw_queues),
    off!(blk_mq_tag_set, queue_depth),
    off!(blk_mq_tag_set, cmd_size),
    off!(blk_mq_tag_set, numa_node),
    off!(blk_mq_tag_set, flags),
    sz!(blk_mq_ops),
    sz!(block_device_operations),
    sz!(file_operations),
    off!(file_operations, read_iter),
    off!(file_operations, write_iter),
    off!(file_operations, fsync),
    off!(file_operations, fallocate),
    sz!(kiocb),
    off!(kiocb, ki_filp),
    off!(kiocb, ki_pos),
    off!(kiocb, ki_complete),
    off!(kiocb, ki_flags),
    off!(kiocb, ki_ioprio),
    sz!(iov_iter),
    off!(iov_iter, iov_offset),
    sz!(file),
    off!(file, f_mode),
    off!(file, f_op),
    off!(file, f_mapping),
    off!(file, f_flags),
    off!(file, __bindgen_anon_1.f_path),
    off!(inode, i_mode),
    off!(inode, i_sb),
    off!(inode, i_rdev),
    off!(inode, i_size),
    off!(address_space, host),
    off!(address_space, gfp_mask),
    off!(super_block, s_blocksize),
    off!(super_block, s_bdev),
    sz!(kstat),
    off!(kstat, result_mask),
    off!(kstat, ino),
    off!(kstat, dev),
    off!(kstat, rdev),
    off!(kstat, size),
    off!(kstat, dio_mem_align),
    off!(kstat, dio_offset_align),
    sz!(miscdevice),
    off!(miscdevice, minor),
    off!(miscdevice, name),
    off!(miscdevice, fops),
    sz!(device_attribute),
    sz!(attribute_group),
    off!(attribute_group, name),
    off!(attribute_group, __bindgen_anon_2.attrs),
    sz!(kthread_work),
    off!(kthread_work, node),
    off!(kthread_work, func),
    off!(kthread_work, worker),
];

/// Compares bindgen's layout with the C compiler's; `Err(EINVAL)` (and a log line naming the
/// first difference) when they disagree.
pub(crate) fn check() -> Result {
    // SAFETY: The C side defines the array with `rust_loop_c_layout_len` entries; both are
    // immutable.
    let c = unsafe {
        core::slice::from_raw_parts(
            (&raw const rust_loop_c_layout).cast::<kernel::ffi::c_ulong>(),
            rust_loop_c_layout_len as usize,
        )
    };
    if c.len() != RUST_LAYOUT.len() {
        pr_err!(
            "layout check: {} C entries, {} Rust entries\n",
            c.len(),
            RUST_LAYOUT.len()
        );
        return Err(EINVAL);
    }
    for (&(name, rust), &c) in RUST_LAYOUT.iter().zip(c) {
        if rust != c {
            pr_err!(
                "layout check: {} is {} for the C compiler, {} for bindgen\n",
                name,
                c,
                rust
            );
            return Err(EINVAL);
        }
    }
    Ok(())
}
