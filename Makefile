# SPDX-License-Identifier: GPL-2.0
# rust_loop — build, run and test. Every target sets up what it needs (scripts/setup.sh is
# idempotent and quick once done).
#
#   make                 build rust_loop.ko against the cached kernel (KDIR=... to use another)
#   make run             main job: build, boot a VM, attach an image with --direct-io=on, mkfs, fio
#   make check           the test suite in a VM (KERNEL=debug for the sanitizer kernel)
#   make bench           the benchmark (see BENCHMARKS.md; BENCH_CLOCK=icount: instruction-counted)
#   make perfcheck       short instruction-counted bench; fails if rust_loop costs more than loop.c
#   make lifecycle       device create/bind/read/unbind/remove rates and idle cost, both drivers
#   make profile         perf profile of one fio workload in an instruction-counted VM (scripts/profile.sh)
#   make fstests         fstests on loop devices of rust_loop and loop.ko in a VM (docs/testing.md "fstests")
#   make setup | kernel  install the toolchain and packages | build the kernel only
#   make fmt | fmtcheck | clippy | clean

KERNEL ?= default
export KERNEL
ifeq ($(KDIR),)
KDIR_CMD = $$(bash scripts/kernel.sh)
else
KDIR_CMD = $(KDIR)
endif
export KDIR

# The LLVM= the kernel tree was built with (empty: GCC; the debug flavour is built with clang-19).
LLVM_CMD = $$(bash -c 'source scripts/common.sh; kernel_llvm "$$0"' "$$kdir")

# -Dwarnings: the module build must stay free of warnings.
MODFLAGS = KRUSTFLAGS=-Dwarnings

.PHONY: all modules clean setup kernel run check bench perfcheck profile lifecycle fstests fmt fmtcheck clippy

all: modules

modules:
	@kdir=$(KDIR_CMD) && bash -c 'source scripts/common.sh; check_kdir "$$0"' "$$kdir" && \
	$(MAKE) -C "$$kdir" M="$(CURDIR)" LLVM="$(LLVM_CMD)" $(MODFLAGS) modules

clippy:
	@kdir=$(KDIR_CMD) && $(MAKE) -C "$$kdir" M="$(CURDIR)" LLVM="$(LLVM_CMD)" $(MODFLAGS) CLIPPY=1 modules

clean:
	@kdir=$$(bash -c 'source scripts/common.sh; kernel_dir' 2>/dev/null); \
	if [ -f "$$kdir/Makefile" ]; then $(MAKE) -C "$$kdir" M="$(CURDIR)" LLVM="$(LLVM_CMD)" clean; fi; \
	rm -f *.o *.ko *.mod *.mod.c *.mod.o .*.cmd Module.symvers modules.order rust_loop/*.o

setup:
	bash scripts/setup.sh

kernel: setup
	bash scripts/kernel.sh >/dev/null

run:
	bash scripts/run.sh

check:
	bash scripts/check.sh

bench:
	bash scripts/bench.sh

perfcheck:
	BENCH_CLOCK=icount BENCH_QUICK=1 BENCH_GATE=$${BENCH_GATE:-1.05} \
		BENCH_GATE_EXEMPT=$${BENCH_GATE_EXEMPT-} bash scripts/bench.sh

profile:
	bash scripts/profile.sh

lifecycle:
	bash scripts/lifecycle.sh

fstests:
	bash scripts/fstests.sh

RUSTFMT = rustfmt --edition 2021 --config-path "$$(bash -c 'source scripts/common.sh; kernel_src')/.rustfmt.toml"

fmt:
	$(RUSTFMT) rust_loop.rs

fmtcheck:
	$(RUSTFMT) --check rust_loop.rs
