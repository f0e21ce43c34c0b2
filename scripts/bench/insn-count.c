// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin for scripts/bench/insn-profile.sh: counts the guest kernel's instructions per
 * translation block, exactly (every execution of a block adds its instruction count), and
 * writes the counts to DIR/snap-N each time the guest enters the kernel function whose address
 * it wrote to DIR/trigger (the guest's `sysfs(2)` handler: nothing else calls it).
 *
 *   qemu-system-x86_64 ... -plugin insn-count.so,dir=DIR
 *
 * DIR/snap-N lines: "<block address, hex> <instructions in the block> <executions>". The
 * declarations below are the parts of QEMU's plugin API (include/qemu/qemu-plugin.h, API
 * version 2 and later) this plugin calls; QEMU's header is not packaged by Debian.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
					   void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
					  void (*cb)(unsigned int, void *),
					  enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *),
				    void *userdata);

__attribute__((visibility("default"))) int qemu_plugin_version = 2;

/* One translation of a block; a block translated again gets another (summed when read). */
struct block {
	uint64_t vaddr, insns, execs;
	struct block *next;
};

static struct block *blocks;
static const char *dir = ".";
static uint64_t trigger;
static unsigned int translations, snaps;

/* icount runs the vCPUs in turn on one host thread: the counters need no atomics. */
static void block_exec(unsigned int vcpu, void *udata)
{
	((struct block *)udata)->execs++;
}

static void dump(const char *name)
{
	char tmp[4096], path[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (struct block *b = blocks; b; b = b->next)
		if (b->execs)
			fprintf(f, "%llx %llu %llu\n", (unsigned long long)b->vaddr,
				(unsigned long long)b->insns, (unsigned long long)b->execs);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static void trigger_exec(unsigned int vcpu, void *udata)
{
	char name[32];

	snprintf(name, sizeof(name), "snap-%u", snaps++);
	dump(name);
}

static void block_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t va = qemu_plugin_tb_vaddr(tb);
	struct block *b;

	/* The guest writes the trigger's address once it knows it; look every 64 blocks. */
	if (!trigger && ++translations % 64 == 0) {
		char path[4096];
		FILE *f;

		snprintf(path, sizeof(path), "%s/trigger", dir);
		f = fopen(path, "r");
		if (f) {
			unsigned long long t;

			if (fscanf(f, "%llx", &t) == 1)
				trigger = t;
			fclose(f);
		}
	}
	if (va < 0xffff800000000000ull)
		return; /* user space: fio's own instructions are not counted */
	b = calloc(1, sizeof(*b));
	if (!b)
		return;
	b->vaddr = va;
	b->insns = qemu_plugin_tb_n_insns(tb);
	b->next = blocks;
	blocks = b;
	qemu_plugin_register_vcpu_tb_exec_cb(tb, block_exec, QEMU_PLUGIN_CB_NO_REGS, b);
	if (trigger && va == trigger)
		qemu_plugin_register_vcpu_tb_exec_cb(tb, trigger_exec, QEMU_PLUGIN_CB_NO_REGS, NULL);
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
	dump("snap-exit");
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
							       const qemu_info_t *info, int argc,
							       char **argv)
{
	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], "dir=", 4))
			dir = argv[i] + 4;
	qemu_plugin_register_vcpu_tb_trans_cb(id, block_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
