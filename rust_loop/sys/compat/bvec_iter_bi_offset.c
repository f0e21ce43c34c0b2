// SPDX-License-Identifier: GPL-2.0
/* probes: bi_offset */
/* struct bvec_iter's offset into its current bvec is bi_offset (7.3; bi_bvec_done before). */
#include <linux/bvec.h>

unsigned int rust_loop_conftest(struct bvec_iter *iter);
unsigned int rust_loop_conftest(struct bvec_iter *iter)
{
	return iter->bi_offset;
}
