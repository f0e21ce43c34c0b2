// SPDX-License-Identifier: GPL-2.0
/*
 * Test helper for rust_loop: reads one page from a block device from a task whose
 * current->journal_info is set, as a filesystem does while it holds a transaction handle
 * (ext4/jbd2). rust_loop must not submit such a request to its backing file from queue_rq
 * (the backing filesystem would take the handle for one of its own); the test checks the
 * device's nowait_skip_journal counter. Loading returns -EAGAIN after the read so that the
 * module never stays loaded; a failed read returns its error instead.
 */
#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/sched.h>

static char *dev = "/dev/loop0";
module_param(dev, charp, 0);
MODULE_PARM_DESC(dev, "block device to read");

static int __init rl_journal_probe_init(void)
{
	struct file *bdev_file;
	struct page *page;
	struct bio *bio;
	void *saved;
	int ret;

	bdev_file = bdev_file_open_by_path(dev, BLK_OPEN_READ, NULL, NULL);
	if (IS_ERR(bdev_file))
		return PTR_ERR(bdev_file);
	page = alloc_page(GFP_KERNEL);
	if (!page) {
		fput(bdev_file);
		return -ENOMEM;
	}
	bio = bio_alloc(file_bdev(bdev_file), 1, REQ_OP_READ, GFP_KERNEL);
	bio->bi_iter.bi_sector = 0;
	__bio_add_page(bio, page, PAGE_SIZE, 0);

	saved = current->journal_info;
	current->journal_info = &dev;	/* any non-NULL value: "inside a transaction" */
	ret = submit_bio_wait(bio);
	current->journal_info = saved;

	bio_put(bio);
	__free_page(page);
	fput(bdev_file);
	pr_info("rl_journal_probe: read %s with journal_info set: %d\n", dev, ret);
	return ret ? ret : -EAGAIN;
}
module_init(rl_journal_probe_init);

MODULE_DESCRIPTION("rust_loop test helper: I/O from inside a filesystem transaction");
MODULE_LICENSE("GPL");
