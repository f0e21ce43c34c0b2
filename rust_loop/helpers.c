// SPDX-License-Identifier: GPL-2.0
/*
 * What the Rust crate cannot do itself, as the kernel's rust/helpers/ does for the kernel crate:
 *
 * - static inline functions: freeze protection around asynchronous writes (kiocb_*_write);
 * - fields of struct task_struct, whose layout as GCC builds it differs from what bindgen sees
 *   (journal_info, the stack base and the flags are only touched here);
 * - a string module parameter (the kernel crate's parameters are integers and booleans);
 * - the static key of the tests' fault injection (a C definition: DEFINE_STATIC_KEY_FALSE).
 */
#include <linux/blk-cgroup.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/falloc.h>
#include <linux/cgroup.h>
#include <linux/cpumask.h>
#include <linux/debugfs.h>
#include <linux/iversion.h>
#include <linux/jump_label.h>
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
#include "helpers.h"

void rust_loop_kiocb_start_write(struct kiocb *iocb)
{
	kiocb_start_write(iocb);
}

bool rust_loop_kiocb_start_write_trylock(struct kiocb *iocb)
{
	struct inode *inode = file_inode(iocb->ki_filp);

	if (!sb_start_write_trylock(inode->i_sb))
		return false;
	/* As kiocb_start_write(): the write may complete in another context. */
	__sb_writers_release(inode->i_sb, SB_FREEZE_WRITE);
	return true;
}

void rust_loop_kiocb_end_write(struct kiocb *iocb)
{
	kiocb_end_write(iocb);
}

bool rust_loop_in_fs_transaction(void)
{
	return current->journal_info != NULL;
}

unsigned long rust_loop_stack_remaining(void)
{
	unsigned long sp = (unsigned long)__builtin_frame_address(0);
	unsigned long base = (unsigned long)task_stack_page(current);

	return sp > base ? sp - base : 0;
}

/*
 * Whether a request may be completed on the current stack (rust_loop_complete_request_direct):
 * in task context with at least @min_stack bytes of stack left. Elsewhere (interrupt context)
 * blk_mq_complete_request is the way; from task context it would send the completion of a
 * single-hardware-queue device to the BLOCK softirq, i.e. wake ksoftirqd for every request.
 */
bool rust_loop_may_complete_here(unsigned long min_stack)
{
	return in_task() && rust_loop_stack_remaining() >= min_stack;
}

/* blk_mq_complete_request_direct() with the queue's own ->complete. */
void rust_loop_complete_request_direct(struct request *rq)
{
	blk_mq_complete_request_direct(rq, rq->q->mq_ops->complete);
}

/*
 * Whether the file system of @inode records a timestamp update without blocking: mounted
 * lazytime, so that the update only marks the inode I_DIRTY_TIME (inode_time_dirty_flag()),
 * through either XFS's ->update_time (xfs_vn_update_time(): no transaction for an
 * I_DIRTY_TIME update) or generic_update_time(), which under IOCB_NOWAIT (@nowait, the mtime/
 * ctime update of a write) refuses file systems with ->dirty_inode. Other ->update_time methods
 * (btrfs) may start a transaction: treated as blocking. An mtime/ctime update that must also
 * increment i_version (someone queried it) may block: inode_update_cmtime().
 */
static bool rust_loop_lazy_time_update(struct inode *inode, bool nowait)
{
	struct super_block *sb = inode->i_sb;

	if (!(sb->s_flags & SB_LAZYTIME))
		return false;
	if (nowait && IS_I_VERSION(inode) && inode_iversion_need_inc(inode))
		return false;
	if (inode->i_op->update_time)
		return sb->s_magic == XFS_SUPER_MAGIC;
	return !(nowait && sb->s_op->dirty_inode);
}

/*
 * Whether a write to @file now must first update its mtime/ctime in a way that cannot be done
 * under IOCB_NOWAIT: need_cmtime_update() and the NOCMTIME checks of file_update_time_flags()
 * in fs/inode.c (static there), less the updates a lazytime mount records without blocking.
 * XFS without lazytime refuses such a write under IOCB_NOWAIT (the update needs a transaction).
 */
bool rust_loop_file_cmtime_update_blocks(struct file *file)
{
	struct inode *inode = file_inode(file);
	struct timespec64 now, ts;

	if (IS_NOCMTIME(inode) || (file->f_mode & FMODE_NOCMTIME))
		return false;
	now = current_time(inode);
	ts = inode_get_mtime(inode);
	if (timespec64_equal(&ts, &now)) {
		ts = inode_get_ctime(inode);
		if (timespec64_equal(&ts, &now) &&
		    !(IS_I_VERSION(inode) && inode_iversion_need_inc(inode)))
			return false;
	}
	return !rust_loop_lazy_time_update(inode, true);
}

/*
 * Whether a read of @file now would first update its atime in a way that may block:
 * file_accessed() and atime_needs_update() with relatime_need_update() in fs/inode.c (not
 * exported), less the updates a lazytime mount records without blocking. touch_atime() ignores
 * IOCB_NOWAIT: on XFS without lazytime it starts a transaction (sb_internal, log space) in the
 * reader's context. Errs towards "yes" (the idmapped-mount exception is left out), which only
 * sends a read to the worker.
 */
bool rust_loop_file_atime_update_blocks(struct file *file)
{
	struct inode *inode = file_inode(file);
	struct vfsmount *mnt = file->f_path.mnt;
	struct timespec64 now, atime, ts;

	if (file->f_flags & O_NOATIME)
		return false;
	if ((inode->i_flags & S_NOATIME) || IS_NOATIME(inode))
		return false;
	if (mnt->mnt_flags & MNT_NOATIME)
		return false;
	now = current_time(inode);
	atime = inode_get_atime(inode);
	if (timespec64_equal(&atime, &now))
		return false;
	if (rust_loop_lazy_time_update(inode, false))
		return false;
	if (!(mnt->mnt_flags & MNT_RELATIME))
		return true;
	ts = inode_get_mtime(inode);
	if (timespec64_compare(&ts, &atime) >= 0)
		return true;
	ts = inode_get_ctime(inode);
	if (timespec64_compare(&ts, &atime) >= 0)
		return true;
	return (long)(now.tv_sec - atime.tv_sec) >= 24 * 60 * 60;
}

/*
 * Whether the file system of @file has its deferred direct-I/O completion workqueue. The first
 * asynchronous direct I/O on a super block creates it (sb_init_dio_done_wq: alloc_workqueue,
 * which takes wq_pool_mutex and allocates with reclaim), so that I/O must not be submitted
 * from queue_rq (inside the tag set's SRCU read section).
 */
bool rust_loop_file_sb_has_dio_wq(struct file *file)
{
	return READ_ONCE(file_inode(file)->i_sb->s_dio_done_wq) != NULL;
}

/*
 * Whether the block device the file's direct I/O goes to takes REQ_NOWAIT bios
 * (BLK_FEAT_NOWAIT): that of its super block, or the device itself for a block device file;
 * true for a file system without one. submit_bio_noacct() fails a REQ_NOWAIT bio to a device
 * without it (dm-crypt, dm-thin, dm-snapshot, dm-flakey, dm-log-writes, ...) with
 * BLK_STS_NOTSUPP, so a NOWAIT direct I/O on such a file ends with -EOPNOTSUPP. A prediction: a
 * device-mapper table can be swapped at any time (the caller retries on -EOPNOTSUPP).
 */
bool rust_loop_file_bdev_nowait(struct file *file)
{
	struct inode *inode = file->f_mapping->host;
	struct block_device *bdev;

	if (S_ISBLK(inode->i_mode))
		bdev = I_BDEV(inode);
	else
		bdev = file_inode(file)->i_sb->s_bdev;
	return !bdev || bdev_nowait(bdev);
}

/*
 * The backing file's change cookie: its i_version where the file system keeps one (xfs, ext4,
 * btrfs, tmpfs; for a file on overlayfs, that of the real file below), 0 where it does not.
 * Marks the value queried, so that the next change to the file's data or metadata gives a new
 * value. 0 for a block device: the i_version of its node (in devtmpfs, a tmpfs) does not change
 * when the device's data does.
 */
u64 rust_loop_file_change_cookie(struct file *file)
{
	/* The file that holds the data: below an overlay (a container image), the real one. */
	struct inode *inode = d_real_inode(file->f_path.dentry);

	if (!S_ISREG(inode->i_mode) || !IS_I_VERSION(inode))
		return 0;
	return inode_query_iversion(inode);
}

/* Whether a partition scan is pending on @disk (set by BLKRRPART before it opens the disk). */
bool rust_loop_disk_part_scan_pending(struct gendisk *disk)
{
	return test_bit(GD_NEED_PART_SCAN, &disk->state);
}

/* Drops a pending partition scan: the open that follows does not rescan. */
void rust_loop_disk_cancel_part_scan(struct gendisk *disk)
{
	clear_bit(GD_NEED_PART_SCAN, &disk->state);
}

/*
 * A digest of the disk's partitions (number, start and size of each): two scans that found the
 * same table leave the same digest, and a partition added, removed or resized by hand (BLKPG)
 * changes it. Partition block devices are freed after an RCU grace period, so reading them
 * under rcu_read_lock() is safe whatever the caller holds.
 */
u64 rust_loop_disk_parts_digest(struct gendisk *disk)
{
	struct block_device *part;
	unsigned long idx;
	u64 h = 0xcbf29ce484222325ULL;

	rcu_read_lock();
	xa_for_each_start(&disk->part_tbl, idx, part, 1) {
		h = (h ^ idx) * 0x100000001b3ULL;
		h = (h ^ part->bd_start_sect) * 0x100000001b3ULL;
		h = (h ^ bdev_nr_sectors(part)) * 0x100000001b3ULL;
	}
	rcu_read_unlock();
	return h;
}

/* Whether the whole-disk block device's page cache holds data not yet written to the device. */
bool rust_loop_disk_page_cache_dirty(struct gendisk *disk)
{
	struct address_space *mapping = disk->part0->bd_mapping;

	return mapping_tagged(mapping, PAGECACHE_TAG_DIRTY) ||
	       mapping_tagged(mapping, PAGECACHE_TAG_WRITEBACK);
}

/* The process ID of @worker's thread (task_struct's layout is not bindgen's to read). */
pid_t rust_loop_kthread_worker_pid(void *worker)
{
	return task_pid_nr(((struct kthread_worker *)worker)->task);
}

/* Whether the current task is a loop worker (rust_loop's or loop.c's set PF_LOCAL_THROTTLE). */
bool rust_loop_task_is_loop_worker(void)
{
	return current->flags & PF_LOCAL_THROTTLE;
}

/* Sets @flags in current->flags; returns the old flags for rust_loop_task_flags_restore(). */
unsigned int rust_loop_task_flags_set(unsigned int flags)
{
	unsigned int old = current->flags;

	current->flags |= flags;
	return old;
}

void rust_loop_task_flags_restore(unsigned int old, unsigned int flags)
{
	current->flags = (current->flags & ~flags) | (old & flags);
}

bool rust_loop_task_in_reclaim(void)
{
	return current->flags & (PF_MEMALLOC | PF_MEMALLOC_NOIO | PF_MEMALLOC_NOFS);
}

bool rust_loop_task_plugged(void)
{
	return current->plug != NULL;
}

/*
 * An identity of the current task that lasts: its pid, which is not handed to a new task until
 * the pid space wraps, where the task_struct's address is reused as soon as the task is freed.
 */
unsigned long rust_loop_task_id(void)
{
	return current->pid;
}

/*
 * Takes the current task's deferred-bio list (current->bio_list, set inside submit_bio() by
 * __submit_bio_noacct_mq()), so that bios submitted until rust_loop_bio_list_restore() are
 * submitted at once instead of waiting on that list until the bio the task is handling is done
 * with, which may first wait for a tag of our own queue. Returns the list to restore (or NULL).
 */
void *rust_loop_bio_list_take(void)
{
	struct bio_list *list = current->bio_list;

	current->bio_list = NULL;
	return list;
}

/* Puts back the list rust_loop_bio_list_take() returned. */
void rust_loop_bio_list_restore(void *list)
{
	current->bio_list = list;
}

/* f_bsize of the filesystem holding @file (struct kstatfs is opaque to bindgen), or 0. */
unsigned long rust_loop_statfs_bsize(struct file *file)
{
	struct kstatfs sbuf;

	if (vfs_statfs(&file->f_path, &sbuf))
		return 0;
	return sbuf.f_bsize;
}

unsigned int rust_loop_online_cpus(void)
{
	return num_online_cpus();
}

/*
 * The switch of the tests' fault injection (rust_loop/sys/fault.rs): queue_rq tests it with
 * static_branch_unlikely, a no-op until a test arms it through debugfs.
 */
DEFINE_STATIC_KEY_FALSE(rust_loop_fault_injection);

void rust_loop_fault_injection_enable(void)
{
	static_branch_enable(&rust_loop_fault_injection);
}

/*
 * As loop_queue_rq(): the blkcg of the request's first bio, and a reference on the memory
 * cgroup of that blkcg's cgroup. The blkcg needs no reference of its own: the bio holds one
 * (through its blkg) until the request ends, and kthread_associate_blkcg() takes its own.
 * The root blkcg gives NULL for both: the worker, a kthread of the root cgroup, is charged to
 * the root cgroups already, so there is nothing to enter (and no reference to take and drop).
 */
void rust_loop_rq_cgroups(struct request *rq, struct cgroup_subsys_state **blkcg,
			  struct cgroup_subsys_state **memcg)
{
	*blkcg = NULL;
	*memcg = NULL;
#ifdef CONFIG_BLK_CGROUP
	if (rq->bio) {
		*blkcg = bio_blkcg_css(rq->bio);
		if (*blkcg == blkcg_root_css)
			*blkcg = NULL;
#ifdef CONFIG_MEMCG
		if (*blkcg)
			*memcg = cgroup_get_e_css((*blkcg)->cgroup, &memory_cgrp_subsys);
#endif
	}
#endif
}

/*
 * As loop_handle_cmd(): charge what the current kthread does to @blkcg (block I/O) and @memcg
 * (page cache, allocations). Returns the previously active memory cgroup for
 * rust_loop_cgroups_leave().
 */
void *rust_loop_cgroups_enter(struct cgroup_subsys_state *blkcg, struct cgroup_subsys_state *memcg)
{
	void *old = NULL;

	if (blkcg)
		kthread_associate_blkcg(blkcg);
#ifdef CONFIG_MEMCG
	if (memcg)
		old = set_active_memcg(mem_cgroup_from_css(memcg));
#endif
	return old;
}

void rust_loop_cgroups_leave(struct cgroup_subsys_state *blkcg, struct cgroup_subsys_state *memcg,
			     void *old)
{
	if (blkcg)
		kthread_associate_blkcg(NULL);
#ifdef CONFIG_MEMCG
	if (memcg)
		set_active_memcg(old);
#endif
}

/*
 * Whether I/O the current task submits is charged where @rq's issuer's would be: to the blkcg
 * of the request's first bio. A kernel thread may carry an association (kthread_blkcg(), not
 * exported), so for one only the root cgroup is known to match.
 */
bool rust_loop_rq_issued_here(struct request *rq)
{
#ifdef CONFIG_BLK_CGROUP
	struct cgroup_subsys_state *css;
	bool same;

	if (!rq->bio || !rq->bio->bi_blkg)
		return true;
	css = bio_blkcg_css(rq->bio);
	if (current->flags & PF_KTHREAD)
		return css == blkcg_root_css;
	rcu_read_lock();
	same = task_css(current, io_cgrp_id) == css;
	rcu_read_unlock();
	return same;
#else
	return true;
#endif
}

void rust_loop_css_put(struct cgroup_subsys_state *css)
{
	css_put(css);
}

void rust_loop_css_get(struct cgroup_subsys_state *css)
{
	css_get(css);
}

bool rust_loop_css_is_root(struct cgroup_subsys_state *css)
{
#ifdef CONFIG_BLK_CGROUP
	return css == blkcg_root_css;
#else
	return true;
#endif
}


/*
 * nowait_fs: the file systems on which queue_rq may submit direct I/O itself (IOCB_NOWAIT); the
 * policy that reads it is rust_loop/nowait_fs.rs. Writable at run time; a device reads it
 * whenever it publishes its configuration (binding, LOOP_SET_STATUS, LOOP_CHANGE_FD, ...).
 */
static char nowait_fs[256] = "xfs,ext4";
/*
 * Guards nowait_fs. Not the module's parameter lock (kernel_param_lock): a device reads the list
 * with its queue frozen, and the parameter lock is held around allocations elsewhere
 * (param_set_charp), which may wait for that queue's I/O under reclaim (lockdep: param_lock ->
 * fs_reclaim -> q_usage_counter). The set and get below run under the parameter lock and take
 * this one inside it.
 */
static DEFINE_SPINLOCK(nowait_fs_lock);

/* param_set_copystring, under nowait_fs_lock. */
static int nowait_fs_set(const char *val, const struct kernel_param *kp)
{
	if (strlen(val) + 1 > sizeof(nowait_fs)) {
		pr_err("%s: string doesn't fit in %zu chars.\n", kp->name, sizeof(nowait_fs) - 1);
		return -ENOSPC;
	}
	spin_lock(&nowait_fs_lock);
	strscpy(nowait_fs, val, sizeof(nowait_fs));
	spin_unlock(&nowait_fs_lock);
	return 0;
}

/* param_get_string, under nowait_fs_lock. */
static int nowait_fs_get(char *buffer, const struct kernel_param *kp)
{
	int n;

	spin_lock(&nowait_fs_lock);
	n = scnprintf(buffer, PAGE_SIZE, "%s\n", nowait_fs);
	spin_unlock(&nowait_fs_lock);
	return n;
}

static const struct kernel_param_ops nowait_fs_ops = {
	.set = nowait_fs_set,
	.get = nowait_fs_get,
};
module_param_cb(nowait_fs, &nowait_fs_ops, NULL, 0644);
MODULE_PARM_DESC(nowait_fs,
		 "File system types (comma-separated; \"bdev\" for block devices, \"all\" for every one, empty for none) on which queue_rq submits direct I/O itself (IOCB_NOWAIT); on others the worker does. Per device: /sys/block/loopN/rust_loop/nowait. Default: xfs,ext4");

/* Copies nowait_fs into @buf (NUL-terminated, truncated to @len). */
void rust_loop_nowait_fs_read(char *buf, size_t len)
{
	spin_lock(&nowait_fs_lock);
	strscpy(buf, nowait_fs, len);
	spin_unlock(&nowait_fs_lock);
}

/* Whether @file's page cache honours IOCB_DONTCACHE (the check kiocb_set_rw_flags makes). */
bool rust_loop_file_supports_dontcache(struct file *file)
{
	return (file->f_op->fop_flags & FOP_DONTCACHE) && !IS_DAX(file->f_mapping->host);
}

/* The file system type name of @file's data: "bdev" for a block device. */
const char *rust_loop_file_fs_type(struct file *file)
{
	struct inode *inode = file_inode(file);

	if (S_ISBLK(inode->i_mode))
		return "bdev";
	return inode->i_sb->s_type->name;
}

/* debugfs_create_file_aux is a macro (_Generic over the operations' type). */
void *rust_loop_debugfs_file(const char *name, umode_t mode, void *parent, void *data,
			     void *aux, const void *fops)
{
	const struct file_operations *ops = fops;

	return debugfs_create_file_aux(name, mode, parent, data, aux, ops);
}

void *rust_loop_debugfs_aux(const void *file)
{
	return debugfs_get_aux(file);
}
