#!/usr/bin/env bash
# Where an I/O's instructions run (make split): for each target (the raw file, loop.ko, rust_loop
# under each submission policy), mode and workload, the instructions per I/O of the submitting
# tasks, of the driver's worker threads (all, and the busiest one), of ksoftirqd,
# and of everything else, in an instruction-counted guest (QEMU -icount shift=0,sleep=off) on one
# vCPU, where a task's run time is the instructions it executed (two vCPUs run in turn under
# icount: their run times are not). Feeds the many-core projection (scripts/bench/cost-model.py,
# BENCHMARKS.md "Many cores").
#
#   scripts/bench/split.sh                                     (make split)
#   SPLIT_TARGETS=loop,rust_loop SPLIT_MODES=dio SPLIT_WORKLOADS=rw-4k-qd16-12jobs scripts/bench/split.sh
#
#   SPLIT_TARGETS    raw,loop,rust_loop,rust_loop_inline,rust_loop_worker (rust_loop_mq2 too)
#   SPLIT_MODES      dio,buffered (buffered: loop and rust_loop; the policies differ in dio only)
#   SPLIT_WORKLOADS  psync-randread-4k,randread-4k-qd32,randwrite-4k-qd32,rw-4k-qd16-12jobs
#   SPLIT_RUNTIME    guest seconds measured per cell (default 2)
#   SPLIT_CPUS       vCPUs (default 1; with more, run times are guest time, not instructions)
#   SPLIT_OUT_DIR    results directory (default results/split)
#   SPLIT_NULLB_IRQMODE  null_blk's completions (default 0, on the submitter's stack; 2: a timer
#                    interrupt, as a device that interrupts). With KERNEL=irqtime (interrupt time
#                    accounted apart) the instructions run in interrupt and softirq context get
#                    their own column; on other kernels they count in the task they interrupted.
#
# Output: results/split/split.json (every cell: I/Os, instructions per I/O by thread class) and
# split.md (the table), from each cell's snapshots (<cell>.json; scripts/bench/split-report.py).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
[[ "${SPLIT_RUNTIME:-2}" =~ ^[1-9][0-9]*$ ]] || die "SPLIT_RUNTIME must be a number of seconds"
[[ "${SPLIT_CPUS:-1}" =~ ^[1-9][0-9]*$ ]] || die "SPLIT_CPUS must be a number"
[[ "${SPLIT_NULLB_IRQMODE:-0}" =~ ^[012]$ ]] || die "SPLIT_NULLB_IRQMODE must be 0, 1 or 2"

if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ] && [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
	bash scripts/setup.sh
fi
bash scripts/kernels/kernel.sh >/dev/null
make -s modules >&2 || die "module build failed"
out=${SPLIT_OUT_DIR:-results/split}
rm -rf "$out" && mkdir -p "$out"
say "split: ${SPLIT_CPUS:-1} vCPU(s), icount, ${SPLIT_RUNTIME:-2} s per cell"
VM_CPUS=${SPLIT_CPUS:-1} VM_QEMU_OPTS="-icount shift=0,sleep=off" bash scripts/vm/vm.sh -- env \
	SPLIT_TARGETS="${SPLIT_TARGETS:-}" SPLIT_MODES="${SPLIT_MODES:-}" SPLIT_WORKLOADS="${SPLIT_WORKLOADS:-}" \
	SPLIT_RUNTIME="${SPLIT_RUNTIME:-2}" SPLIT_OUT="$(cd "$out" && pwd)" \
	BENCH_NULLB_IRQMODE="${SPLIT_NULLB_IRQMODE:-0}" SPLIT_IRQ_TIME="$([ "$KERNEL" = irqtime ] && echo 1 || echo 0)" \
	python3 scripts/guest/guest-split.py || say "split: the guest reported failed cells (see above)"
python3 scripts/bench/split-report.py "$out" || die "split-report failed"
cat "$out/split.md"
