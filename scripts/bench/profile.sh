#!/usr/bin/env bash
# Where the instructions of one I/O go: one fio workload through one driver on XFS on a
# memory-backed null_blk, in an instruction-counted guest (QEMU -icount shift=0,sleep=off),
# sampled by `perf record -e cpu-clock -a`. Under icount the guest's clock counts instructions,
# so cpu-clock samples fall in proportion to instructions executed: the report is an instruction
# profile of the whole guest (fio, the file systems, the block layer and the driver), with no PMU.
#
#   scripts/bench/profile.sh                                   (make profile)
#   PROFILE_DRIVER=loop PROFILE_MODE=dio PROFILE_WORKLOAD=randwrite-4k-qd32 scripts/bench/profile.sh
#
#   PROFILE_DRIVER    rust_loop | rust_loop_mq2 | loop | raw     (default rust_loop)
#   PROFILE_MODE      dio | buffered                             (default dio)
#   PROFILE_WORKLOAD  a workload of scripts/guest/guest-bench.py       (default randwrite-4k-qd32)
#   PROFILE_RUNTIME   seconds of guest time (= 1e9 instructions each; default 2)
#   PROFILE_FREQ      samples per second of guest time (default 20000: one per 50k instructions)
#   PROFILE_CALLGRAPH 1: also record call chains (perf -g; the kernel's guess unwinder makes them
#                     approximate) into callers.txt
#   PROFILE_PARAMS    rust_loop module parameters (e.g. nowait_max_depth=0), part of the result's name
#   PROFILE_NULLB_IRQMODE  null_blk's completions: 0 on the submitter's stack (default), 1 softirq,
#                     2 a timer interrupt 10 us later (as hardware); part of the result's name if not 0
#
# Output in results/profile/<driver>-<mode>-<workload>/: perf.data, report.txt (symbols by share
# of samples, kernel and user), by-dso.txt, by-thread.txt (by task name, then symbol), fio.json (IOPS: 1e9 / IOPS = instructions per I/O),
# and the driver's counters. perf is the host's (linux-perf, installed here if missing: the guest
# shares the host's root); its version need not match the kernel's for cpu-clock samples.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
PROFILE_DRIVER=${PROFILE_DRIVER:-rust_loop}
PROFILE_MODE=${PROFILE_MODE:-dio}
PROFILE_WORKLOAD=${PROFILE_WORKLOAD:-randwrite-4k-qd32}
case "$PROFILE_DRIVER" in rust_loop | rust_loop_mq2 | loop | raw) ;; *) die "PROFILE_DRIVER: rust_loop, rust_loop_mq2, loop or raw" ;; esac
case "$PROFILE_MODE" in dio | buffered) ;; *) die "PROFILE_MODE: dio or buffered" ;; esac
[[ "${PROFILE_RUNTIME:-2}" =~ ^[1-9][0-9]*$ ]] || die "PROFILE_RUNTIME must be a number of seconds"
[[ "${PROFILE_FREQ:-20000}" =~ ^[1-9][0-9]*$ ]] || die "PROFILE_FREQ must be a number"
[[ "${PROFILE_NULLB_IRQMODE:-0}" =~ ^[012]$ ]] || die "PROFILE_NULLB_IRQMODE must be 0, 1 or 2"

if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ] && [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
	bash scripts/setup.sh
fi
if ! command -v perf >/dev/null; then
	say "apt-get install linux-perf (perf, for the guest: it shares the host's root)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-perf ||
		die "installing linux-perf failed"
fi
bash scripts/kernels/kernel.sh >/dev/null
make -s modules >&2 || die "module build failed"
irq=${PROFILE_NULLB_IRQMODE:-0}
out=results/profile/$PROFILE_DRIVER-$PROFILE_MODE-$PROFILE_WORKLOAD${PROFILE_PARAMS:+-${PROFILE_PARAMS// /-}}
[ "$irq" = 0 ] || out+=-irqmode$irq
rm -rf "$out" && mkdir -p "$out"
VM_QEMU_OPTS="-icount shift=0,sleep=off" bash scripts/vm/vm.sh -- env PROFILE_DRIVER="$PROFILE_DRIVER" \
	PROFILE_MODE="$PROFILE_MODE" PROFILE_WORKLOAD="$PROFILE_WORKLOAD" \
	PROFILE_RUNTIME="${PROFILE_RUNTIME:-2}" PROFILE_CALLGRAPH="${PROFILE_CALLGRAPH:-0}" PROFILE_FREQ="${PROFILE_FREQ:-20000}" \
	BENCH_RUST_LOOP_PARAMS="${PROFILE_PARAMS:-}" BENCH_NULLB_IRQMODE="$irq" PROFILE_OUT="$ROOT/$out" python3 scripts/guest/guest-profile.py || die "the guest profile failed"
say "profile: $out/report.txt"
head -n 60 "$out/report.txt"
