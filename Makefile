# SPDX-License-Identifier: GPL-2.0
# rust_loop — build, run and test. Every target sets up what it needs (scripts/setup.sh is
# idempotent and quick once done).
#
#   make                 build rust_loop.ko (KERNEL=stock, the default: for Debian's 7.3 kernel;
#                        KERNEL=default|debug: for the project's own kernels; KDIR=...: another tree)
#   make run             main job: build, boot a VM, attach an image with --direct-io=on, mkfs, fio
#   make check           the test suite in a VM (KERNEL=debug for the sanitizer kernel)
#   make check-alloc     the robustness and data-path tests with the allocator's checks on at boot
#   make bench           the benchmark (see BENCHMARKS.md; BENCH_CLOCK=icount: instruction-counted)
#   make perfcheck       short instruction-counted bench; fails if rust_loop costs more than loop.c
#   make split           instructions per I/O by thread class (submitters, workers, interrupts), icount
#   make lifecycle       device create/bind/read/unbind/remove rates and idle cost, both drivers
#   make profile         perf profile of one fio workload in an instruction-counted VM (scripts/bench/profile.sh)
#   make insn-profile    exact kernel instructions per I/O by function, drivers side by side (scripts/bench/insn-profile.sh)
#   make fstests         fstests on loop devices of rust_loop and loop.ko in a VM (docs/testing.md "fstests")
#   make crashcheck      power cuts below the loop device, rust_loop and loop.ko (docs/testing.md "Crash consistency")
#   make setup | kernel  install the toolchain and packages | build the kernel only
#   make toolchains      build with the stock kernel's rustc and with the project's (both warning-free)
#   make deb             the Debian source and DKMS packages, dpkg-buildpackage (results/deb/)
#   make repo            a local apt repository of them (results/repo/: deb [trusted=yes] file:...)
#   make lintian         lintian on the packages (Debian trixie's; errors and warnings fail)
#   make dkms-test       the package installed, upgraded, booted and purged on STOCK=<name>'s suite
#   make pkg-matrix      the package's rust-loop-build for every kernel of the matrix (no VM)
#   make matrix          build the module for every kernel of config/kernels.conf (MATRIX=<names>)
#   make smoke           boot STOCK=<name> and attach, mkfs, fio verify, detach, unload
#   make arm64-boot      the same on the arm64 kernel: qemu-system-aarch64 (TCG), a debootstrap root
#   make subset          the reliability subset (tests/reliability.list) on STOCK=<name>
#   make kernels         the archive's Rust kernels against the matrix
#   make kernels-table   README's "Supported kernels" table from the matrix and the last results
#   make fmt | fmtcheck | clippy | clean

KERNEL ?= stock
export KERNEL
export KDIR

# -Dwarnings: the module build must stay free of warnings.
MODFLAGS = KRUSTFLAGS=-Dwarnings
# make against the flavour's kernel tree (in the stock kernel's build environment for KERNEL=stock).
KMAKE = bash scripts/kernels/kmake.sh

.PHONY: all modules clean setup kernel run check check-alloc bench perfcheck profile insn-profile split lifecycle fstests fmt fmtcheck clippy deb repo lintian dkms-test pkg-matrix toolchains matrix smoke arm64-boot subset kernels kernels-table crashcheck

all: modules

modules:
	@$(KMAKE) M="$(CURDIR)" $(MODFLAGS) modules

clippy:
	@$(KMAKE) M="$(CURDIR)" $(MODFLAGS) CLIPPY=1 modules

# The module and clippy with the stock kernel's toolchain and with the project's (rustup's).
toolchains:
	bash scripts/kernels/toolchains.sh

clean:
	@kdir=$$(bash -c 'source scripts/common.sh; kernel_dir' 2>/dev/null); \
	if [ -f "$$kdir/Makefile" ]; then $(KMAKE) M="$(CURDIR)" clean; fi; \
	rm -f *.o *.ko *.mod *.mod.c *.mod.o .*.cmd Module.symvers modules.order rust_loop/*.o

setup:
	bash scripts/setup.sh

kernel: setup
	bash scripts/kernels/kernel.sh >/dev/null

run:
	bash scripts/run.sh

check:
	bash scripts/check.sh

# The tests CI runs again with slub_debug, KFENCE and page poisoning on (scripts/vm/vm.sh:
# VM_DEBUG_ALLOC): those that allocate and free the most (ioctls, the fuzzer, device add/remove,
# module reloads, faults under I/O), the fuzzer and the reload cycles shortened (40,000 ioctls,
# 20 cycles): about 12 minutes under TCG on 2 cores.
CHECK_ALLOC_TESTS ?= ^(robust-fuzz|robust-module|zz-robust-fault|core-ioctl|core-control)
check-alloc:
	VM_DEBUG_ALLOC=1 CHECK_DKMS=0 FUZZ_ITERS=$${FUZZ_ITERS:-40000} RELOAD_CYCLES=$${RELOAD_CYCLES:-20} \
		bash scripts/check.sh '$(CHECK_ALLOC_TESTS)'

bench:
	bash scripts/bench/bench.sh

perfcheck:
	BENCH_CLOCK=icount BENCH_QUICK=1 BENCH_GATE=$${BENCH_GATE:-1.05} \
		BENCH_GATE_EXEMPT=$${BENCH_GATE_EXEMPT-} bash scripts/bench/bench.sh

profile:
	bash scripts/bench/profile.sh

insn-profile:
	bash scripts/bench/insn-profile.sh

split:
	bash scripts/bench/split.sh

lifecycle:
	bash scripts/bench/lifecycle.sh

fstests:
	bash scripts/third_party/fstests.sh

crashcheck:
	bash scripts/crashcheck.sh

deb:
	bash scripts/pkg/deb.sh

repo:
	bash scripts/pkg/repo.sh

lintian:
	bash scripts/pkg/lintian.sh

dkms-test:
	bash scripts/pkg/dkms-test.sh

pkg-matrix:
	bash scripts/pkg/pkg-matrix.sh

matrix:
	bash scripts/kernels/matrix.sh

smoke:
	bash scripts/vm/smoke.sh

# The smoke test on Debian's arm64 kernel, cross-built and emulated (docs/testing.md "arm64").
arm64-boot:
	bash scripts/vm/arm64-boot.sh

# The reliability subset (tests/reliability.list: data, direct I/O, multi-queue and cgroups,
# churn, faults, the fuzzer, reload cycles), on the kernel STOCK names (CI: the RT kernel).
# SUBSET_TESTS=<regex>: a part of it (a partial result in README's "Supported kernels").
subset:
	CHECK_STEP=subset CHECK_SCOPE=$${SUBSET_TESTS:+partial} CHECK_DKMS=0 FUZZ_ITERS=$${FUZZ_ITERS:-40000} RELOAD_CYCLES=$${RELOAD_CYCLES:-20} \
		bash scripts/check.sh "$${SUBSET_TESTS:-$$(grep -v '^#' tests/reliability.list | paste -sd'|')}"

kernels:
	python3 scripts/kernels/kernels.py

kernels-table:
	python3 scripts/kernels/kernels_table.py --update

RUSTFMT = bash scripts/kernels/kernel.sh >/dev/null && rustfmt --edition 2021 --config-path "$$(bash -c 'source scripts/common.sh; kernel_src')/.rustfmt.toml"

fmt:
	$(RUSTFMT) rust_loop.rs

fmtcheck:
	$(RUSTFMT) --check rust_loop.rs
