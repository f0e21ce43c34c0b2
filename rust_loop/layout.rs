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
    static rust_loop_c_consts: [kernel::ffi::c_ulong; 0];
    static rust_loop_c_consts_len: core::ffi::c_uint;
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

macro_rules! val {
    ($name:ident = $v:expr) => {
        (stringify!($name), $v as usize)
    };
}

/// The C constants the crate copies by hand (typed macros that bindgen does not export), in the
/// order of `rust_loop_c_consts`.
const RUST_CONSTS: &[(&str, usize)] = {
    use crate::sys::*;
    &[
        val!(BLK_STS_OK = BlkStatus::OK.as_raw()),
        val!(BLK_STS_NOTSUPP = BlkStatus::NOTSUPP.as_raw()),
        val!(BLK_STS_IOERR = BlkStatus::IOERR.as_raw()),
        val!(BLK_OPEN_WRITE = BLK_OPEN_WRITE),
        val!(BLK_OPEN_EXCL = BLK_OPEN_EXCL),
        val!(BLK_FEAT_WRITE_CACHE = BLK_FEAT_WRITE_CACHE),
        val!(SECTOR_SHIFT = SECTOR_SHIFT),
        val!(REQ_NOUNMAP = REQ_NOUNMAP),
        val!(FMODE_WRITE = FMODE_WRITE),
        val!(FMODE_CAN_ODIRECT = FMODE_CAN_ODIRECT),
        val!(FMODE_NOWAIT = FMODE_NOWAIT),
        val!(IOCB_NOWAIT = IOCB_NOWAIT),
        val!(IOCB_DONTCACHE = IOCB_DONTCACHE),
        val!(FALLOC_FL_KEEP_SIZE = FALLOC_FL_KEEP_SIZE),
        val!(FALLOC_FL_PUNCH_HOLE = FALLOC_FL_PUNCH_HOLE),
        val!(FALLOC_FL_ZERO_RANGE = FALLOC_FL_ZERO_RANGE),
        val!(FALLOC_FL_WRITE_ZEROES = FALLOC_FL_WRITE_ZEROES),
    ]
};

/// Compares bindgen's layout and the copied constants with the C compiler's values;
/// `Err(EINVAL)` (and a log line naming the first difference) when they disagree.
pub(crate) fn check() -> Result {
    // SAFETY: The C side defines each array with its `_len` entries; all are immutable.
    let (layout, consts) = unsafe {
        (
            core::slice::from_raw_parts(
                (&raw const rust_loop_c_layout).cast::<kernel::ffi::c_ulong>(),
                rust_loop_c_layout_len as usize,
            ),
            core::slice::from_raw_parts(
                (&raw const rust_loop_c_consts).cast::<kernel::ffi::c_ulong>(),
                rust_loop_c_consts_len as usize,
            ),
        )
    };
    compare("layout", "bindgen", RUST_LAYOUT, layout)?;
    compare("constant", "the crate", RUST_CONSTS, consts)
}

fn compare(what: &str, ours: &str, rust: &[(&str, usize)], c: &[kernel::ffi::c_ulong]) -> Result {
    if c.len() != rust.len() {
        pr_err!(
            "{} check: {} C entries, {} Rust entries\n",
            what,
            c.len(),
            rust.len()
        );
        return Err(EINVAL);
    }
    for (&(name, r), &c) in rust.iter().zip(c) {
        if r != c {
            pr_err!(
                "{} check: {} is {} for the C compiler, {} for {}\n",
                what,
                name,
                c,
                r,
                ours
            );
            return Err(EINVAL);
        }
    }
    Ok(())
}
