/* SPDX-License-Identifier: GPL-2.0 */
/* Declarations of rust_loop/helpers.c, called from the Rust crate (see rust_loop/backing.rs). */
#ifndef RUST_LOOP_HELPERS_H
#define RUST_LOOP_HELPERS_H

#include <linux/fs.h>

void rust_loop_kiocb_start_write(struct kiocb *iocb);
bool rust_loop_kiocb_start_write_trylock(struct kiocb *iocb);
void rust_loop_kiocb_end_write(struct kiocb *iocb);

#endif
