#!/usr/bin/env bash
# Exact instruction counts by kernel function: one fio workload through each driver on XFS on a
# memory-backed null_blk, in an instruction-counted guest (QEMU -icount shift=0,sleep=off) with
# a TCG plugin (scripts/bench/insn-count.c) counting every kernel block it executes. Where `make
# profile` samples (and charges time with interrupts off to the instruction that enables them),
# this counts: a difference of 20 instructions per I/O in one function shows.
#
#   scripts/bench/insn-profile.sh                              (make insn-profile)
#   INSN_DRIVERS=loop,rust_loop,rust_loop_b BENCH_B_KO=/tmp/before/rust_loop.ko scripts/bench/insn-profile.sh
#
#   INSN_DRIVERS      comma list of raw, loop, rust_loop, rust_loop_b (default loop,rust_loop);
#                     the report compares each with the first
#   INSN_MODE         dio | buffered                           (default dio)
#   INSN_WORKLOAD     a workload of scripts/guest/guest-bench.py    (default randread-4k-qd32)
#   INSN_RUNTIME      guest seconds per driver                (default 6)
#   INSN_NULLB_IRQMODE  null_blk's completions: 0 on the submitter's stack (default), 1 softirq,
#                     2 a timer interrupt 10 us later (as hardware)
#   INSN_CPUS         vCPUs (default 1)
#   BENCH_RUST_LOOP_PARAMS, BENCH_B_KO, BENCH_B_PARAMS   as for make bench (rust_loop_b: "A/B")
#
# Output in results/insn-profile/: report.md (per driver its module's functions, then each driver
# against the first: the functions that differ most), the plugin's snapshots, kallsyms. The
# plugin is built with gcc into the cache; QEMU's plugin support is Debian's (-plugin).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
[[ "${INSN_RUNTIME:-6}" =~ ^[1-9][0-9]*$ ]] || die "INSN_RUNTIME must be a number of seconds"
[[ "${INSN_NULLB_IRQMODE:-0}" =~ ^[012]$ ]] || die "INSN_NULLB_IRQMODE must be 0, 1 or 2"
[[ "${INSN_CPUS:-1}" =~ ^[1-9][0-9]*$ ]] || die "INSN_CPUS must be a number"
case "${INSN_MODE:-dio}" in dio | buffered) ;; *) die "INSN_MODE: dio or buffered" ;; esac

if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ] && [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
	bash scripts/setup.sh
fi
command -v gcc >/dev/null || die "gcc is missing: run scripts/setup.sh"
plugin=$CACHE/insn-count-$(sha256sum scripts/bench/insn-count.c | cut -c1-12).so
if [ ! -f "$plugin" ]; then
	mkdir -p "$CACHE"
	gcc -O2 -Wall -shared -fPIC -fvisibility=hidden -o "$plugin.tmp" scripts/bench/insn-count.c ||
		die "building the QEMU plugin (scripts/bench/insn-count.c) failed"
	mv "$plugin.tmp" "$plugin"
fi
bash scripts/kernels/kernel.sh >/dev/null
make -s modules >&2 || die "module build failed"
out=results/insn-profile
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
VM_CPUS=${INSN_CPUS:-1} VM_QEMU_OPTS="-icount shift=0,sleep=off -plugin $plugin,dir=$out" \
	bash scripts/vm/vm.sh -- env INSN_OUT="$out" INSN_DRIVERS="${INSN_DRIVERS:-loop,rust_loop}" \
	INSN_MODE="${INSN_MODE:-dio}" INSN_WORKLOAD="${INSN_WORKLOAD:-randread-4k-qd32}" \
	INSN_RUNTIME="${INSN_RUNTIME:-6}" BENCH_NULLB_IRQMODE="${INSN_NULLB_IRQMODE:-0}" \
	BENCH_RUST_LOOP_PARAMS="${BENCH_RUST_LOOP_PARAMS:-}" BENCH_B_KO="${BENCH_B_KO:-}" \
	BENCH_B_PARAMS="${BENCH_B_PARAMS:-}" python3 scripts/guest/guest-insn-profile.py ||
	die "the guest run failed"
INSN_DRIVERS="${INSN_DRIVERS:-loop,rust_loop}" python3 scripts/bench/insn-report.py "$out" >/dev/null ||
	die "insn-report failed"
say "insn-profile: $out/report.md"
head -n 40 "$out/report.md"
