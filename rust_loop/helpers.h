/* SPDX-License-Identifier: GPL-2.0 */
/* Declarations of rust_loop/helpers.c, called from the Rust crate. */
#ifndef RUST_LOOP_HELPERS_H
#define RUST_LOOP_HELPERS_H

#include <linux/fs.h>

struct cgroup_subsys_state;
struct request;

void rust_loop_kiocb_start_write(struct kiocb *iocb);
bool rust_loop_kiocb_start_write_trylock(struct kiocb *iocb);
void rust_loop_kiocb_end_write(struct kiocb *iocb);
bool rust_loop_in_fs_transaction(void);
pid_t rust_loop_kthread_worker_pid(void *worker);
bool rust_loop_task_is_loop_worker(void);
unsigned long rust_loop_stack_remaining(void);
unsigned int rust_loop_task_flags_set(unsigned int flags);
void rust_loop_task_flags_restore(unsigned int old, unsigned int flags);
bool rust_loop_task_plugged(void);
unsigned long rust_loop_task_id(void);
void *rust_loop_bio_list_take(void);
void rust_loop_bio_list_restore(void *list);
bool rust_loop_task_in_reclaim(void);
unsigned long rust_loop_statfs_bsize(struct file *file);
bool rust_loop_file_cmtime_update_blocks(struct file *file);
bool rust_loop_file_atime_update_blocks(struct file *file);
bool rust_loop_file_sb_has_dio_wq(struct file *file);
bool rust_loop_file_bdev_nowait(struct file *file);
u64 rust_loop_file_change_cookie(struct file *file);
bool rust_loop_disk_part_scan_pending(struct gendisk *disk);
void rust_loop_disk_cancel_part_scan(struct gendisk *disk);
bool rust_loop_disk_page_cache_dirty(struct gendisk *disk);
u64 rust_loop_disk_parts_digest(struct gendisk *disk);
void rust_loop_nowait_fs_read(char *buf, size_t len);
const char *rust_loop_file_fs_type(struct file *file);
bool rust_loop_file_supports_dontcache(struct file *file);
bool rust_loop_may_complete_here(unsigned long min_stack);
void rust_loop_complete_request_direct(struct request *rq);
unsigned int rust_loop_online_cpus(void);
void rust_loop_fault_injection_enable(void);
void rust_loop_rq_cgroups(struct request *rq, struct cgroup_subsys_state **blkcg,
			  struct cgroup_subsys_state **memcg);
void *rust_loop_cgroups_enter(struct cgroup_subsys_state *blkcg, struct cgroup_subsys_state *memcg);
void rust_loop_cgroups_leave(struct cgroup_subsys_state *blkcg, struct cgroup_subsys_state *memcg,
			     void *old);
bool rust_loop_rq_issued_here(struct request *rq);
void rust_loop_css_put(struct cgroup_subsys_state *css);
void rust_loop_css_get(struct cgroup_subsys_state *css);
bool rust_loop_css_is_root(struct cgroup_subsys_state *css);
void *rust_loop_debugfs_file(const char *name, umode_t mode, void *parent, void *data,
			     void *aux, const void *fops);
void *rust_loop_debugfs_aux(const void *file);
extern const unsigned long rust_loop_c_layout[];
extern const unsigned int rust_loop_c_layout_len;
extern const unsigned long rust_loop_c_consts[];
extern const unsigned int rust_loop_c_consts_len;

#endif
