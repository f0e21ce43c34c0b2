// SPDX-License-Identifier: GPL-2.0
/*
 * The feature tests' control: compiles against every kernel rust_loop supports. If it does not,
 * the feature tests' flags are wrong for this kernel (not its features), and Kbuild stops rather
 * than take every C test for a missing feature.
 */
#include <linux/blkdev.h>

unsigned int rust_loop_conftest(struct block_device *bdev);
unsigned int rust_loop_conftest(struct block_device *bdev)
{
	return bdev_logical_block_size(bdev);
}
