// SPDX-License-Identifier: GPL-2.0
/*
 * The few static inline kernel helpers that rust_loop needs and that the kernel crate does not
 * export (compare rust/helpers/ in the tree): freeze protection around asynchronous writes.
 */
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
