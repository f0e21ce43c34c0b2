// SPDX-License-Identifier: GPL-2.0
/*
 * The C values the crate depends on, as the C compiler sees them: the sizes and field offsets of
 * the structures whose fields the crate touches, and the constants that bindgen cannot export
 * (typed macros such as BLK_OPEN_WRITE). Compiled to assembly only, as the kernel's
 * asm-offsets.c is; Kbuild turns the markers into rust_loop/sys/c_values_generated.rs: constants, and
 * the checks of bindgen's view that rust_loop/sys/layout.rs runs at compile time. This list is
 * the only one: add a structure or field here and it is checked.
 */

#include <linux/blk-cgroup.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/falloc.h>
#include <linux/cgroup.h>
#include <linux/cpumask.h>
#include <linux/iversion.h>
#include <linux/kthread.h>
#include <linux/magic.h>
#include <linux/memcontrol.h>
#include <linux/miscdevice.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/task_stack.h>
#include <linux/stat.h>
#include <linux/statfs.h>
#include <linux/uio.h>

#include "compat_generated.h"

/* Markers in the assembly: "->SIZE struct value", "->OFFSET struct field value",
 * "->CONST name value". */
#define MARK(text, val) asm volatile("\n.ascii \"->" text " %0\"" : : "i"((long)(val)))
#define SIZE(t) MARK("SIZE " #t, sizeof(struct t))
#define OFFSET(t, f) MARK("OFFSET " #t " " #f, offsetof(struct t, f))
#define CONST(c) MARK("CONST " #c, (__force long)(c))

void rust_loop_c_values(void);
void rust_loop_c_values(void)
{
	SIZE(request);
	OFFSET(request, q);
	OFFSET(request, cmd_flags);
	OFFSET(request, __data_len);
	OFFSET(request, __sector);
	OFFSET(request, bio);
	OFFSET(request, biotail);
	SIZE(bio);
	OFFSET(bio, bi_next);
	OFFSET(bio, bi_iter);
	OFFSET(bio, bi_io_vec);
	OFFSET(bio, bi_ioprio);
	SIZE(bio_vec);
	SIZE(bvec_iter);
	OFFSET(bvec_iter, bi_size);
	OFFSET(bvec_iter, bi_idx);
#ifdef RUST_LOOP_HAS_BVEC_ITER_BI_OFFSET
	OFFSET(bvec_iter, bi_offset);
#else
	OFFSET(bvec_iter, bi_bvec_done);
#endif
	SIZE(request_queue);
	OFFSET(request_queue, queuedata);
	OFFSET(request_queue, limits);
	OFFSET(request_queue, limits_lock);
	OFFSET(request_queue, rq_qos);
	SIZE(queue_limits);
	OFFSET(queue_limits, features);
	OFFSET(queue_limits, max_hw_sectors);
	OFFSET(queue_limits, logical_block_size);
	OFFSET(queue_limits, physical_block_size);
	OFFSET(queue_limits, io_min);
	OFFSET(queue_limits, dma_alignment);
	OFFSET(queue_limits, max_segments);
	OFFSET(queue_limits, max_hw_discard_sectors);
	OFFSET(queue_limits, max_write_zeroes_sectors);
	OFFSET(queue_limits, discard_granularity);
	OFFSET(queue_limits, max_hw_wzeroes_unmap_sectors);
	SIZE(gendisk);
	OFFSET(gendisk, major);
	OFFSET(gendisk, first_minor);
	OFFSET(gendisk, minors);
	OFFSET(gendisk, disk_name);
	OFFSET(gendisk, events);
	OFFSET(gendisk, event_flags);
	OFFSET(gendisk, part0);
	OFFSET(gendisk, fops);
	OFFSET(gendisk, queue);
	OFFSET(gendisk, private_data);
	OFFSET(gendisk, state);
	OFFSET(gendisk, open_mutex);
	SIZE(block_device);
	OFFSET(block_device, bd_dev);
	OFFSET(block_device, bd_disk);
	OFFSET(block_device, bd_openers);
	OFFSET(block_device, bd_device);
	SIZE(device);
	OFFSET(device, kobj);
	SIZE(kobject);
	SIZE(blk_mq_tag_set);
	OFFSET(blk_mq_tag_set, ops);
	OFFSET(blk_mq_tag_set, nr_hw_queues);
	OFFSET(blk_mq_tag_set, queue_depth);
	OFFSET(blk_mq_tag_set, cmd_size);
	OFFSET(blk_mq_tag_set, numa_node);
	OFFSET(blk_mq_tag_set, flags);
	SIZE(blk_mq_ops);
	SIZE(block_device_operations);
	SIZE(file_operations);
	OFFSET(file_operations, read_iter);
	OFFSET(file_operations, write_iter);
	OFFSET(file_operations, fsync);
	OFFSET(file_operations, fallocate);
	SIZE(kiocb);
	OFFSET(kiocb, ki_filp);
	OFFSET(kiocb, ki_pos);
	OFFSET(kiocb, ki_complete);
	OFFSET(kiocb, ki_flags);
	OFFSET(kiocb, ki_ioprio);
	SIZE(iov_iter);
	OFFSET(iov_iter, iov_offset);
	SIZE(file);
	OFFSET(file, f_mode);
	OFFSET(file, f_op);
	OFFSET(file, f_mapping);
	OFFSET(file, f_flags);
	OFFSET(file, f_path);
	OFFSET(inode, i_mode);
	OFFSET(inode, i_sb);
	OFFSET(inode, i_rdev);
	OFFSET(inode, i_size);
	OFFSET(address_space, host);
	OFFSET(address_space, gfp_mask);
	OFFSET(super_block, s_blocksize);
	OFFSET(super_block, s_bdev);
	SIZE(kstat);
	OFFSET(kstat, result_mask);
	OFFSET(kstat, ino);
	OFFSET(kstat, dev);
	OFFSET(kstat, rdev);
	OFFSET(kstat, size);
	OFFSET(kstat, dio_mem_align);
	OFFSET(kstat, dio_offset_align);
	SIZE(miscdevice);
	OFFSET(miscdevice, minor);
	OFFSET(miscdevice, name);
	OFFSET(miscdevice, fops);
	SIZE(device_attribute);
	SIZE(attribute_group);
	OFFSET(attribute_group, name);
	OFFSET(attribute_group, attrs);
	SIZE(kthread_work);
	OFFSET(kthread_work, node);
	OFFSET(kthread_work, func);
	OFFSET(kthread_work, worker);
	SIZE(list_head);
	OFFSET(list_head, next);
	OFFSET(list_head, prev);
	CONST(BLK_STS_OK);
	CONST(BLK_STS_IOERR);
	CONST(BLK_OPEN_WRITE);
	CONST(BLK_OPEN_EXCL);
	CONST(BLK_FEAT_WRITE_CACHE);
	CONST(SECTOR_SHIFT);
	CONST(REQ_NOUNMAP);
	CONST(FMODE_WRITE);
	CONST(FMODE_CAN_ODIRECT);
	CONST(FMODE_NOWAIT);
	CONST(IOCB_NOWAIT);
	CONST(IOCB_DONTCACHE);
	CONST(FALLOC_FL_KEEP_SIZE);
	CONST(FALLOC_FL_PUNCH_HOLE);
	CONST(FALLOC_FL_ZERO_RANGE);
	CONST(FALLOC_FL_WRITE_ZEROES);
}
