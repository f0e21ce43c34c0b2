#!/usr/bin/env bash
# The benchmark (make bench): rust_loop.ko against the raw backing file (O_DIRECT), the C loop.ko
# of the same kernel and the rublk ublk loop target, in buffered and dio mode, in one VM boot.
# See BENCHMARKS.md. Results: results/bench/{bench.json,summary.md,ratios.png}.
#
#   scripts/bench/bench.sh                      full run (3 rounds x 3 s cells, 1 GiB backing files)
#   BENCH_QUICK=1 scripts/bench/bench.sh        smoke run (1 round x 1 s, 2 workloads: a few minutes)
#   BENCH_CLOCK=icount scripts/bench/bench.sh   instruction-counted run (see below), results/bench-icount
#   make perfcheck                        = BENCH_CLOCK=icount BENCH_QUICK=1 BENCH_GATE=1.05
#
# BENCH_CLOCK=icount boots the guest with QEMU's `-icount shift=0,sleep=off`: guest time advances
# by one nanosecond per guest instruction (idle skipped), so fio's IOPS become 1e9 / instructions
# per I/O, a CPU-cost figure that the host's load does not move (rounds agree within 1-2 %). Its
# defaults: XFS on memory-backed null_blk only (no device time), raw, loop, rust_loop and
# rust_loop_mq2 (2 hardware queues, every workload), the five cells of issue 14, 2 rounds x 2 s,
# 512 MiB files, no page-cache test; quick: 2 rounds x 1 s, 256 MiB. BENCH_GATE=F makes the report
# fail (exit 1) when rust_loop's overhead per I/O over the raw file exceeds F x the C loop's in a
# cell (beyond a noise floor: 1 % of the C loop's instructions per I/O, or the cell's spread over
# rounds when larger); BENCH_GATE_EXEMPT lists
# MODE/WORKLOAD cells that are reported but not gated (make perfcheck: the known gap, see
# BENCHMARKS.md).
#
# Variables (defaults for a full run; BENCH_QUICK=1 changes the ones marked *):
#   BENCH_RUNTIME=3*      seconds per fio cell            (quick: 1)
#   BENCH_ROUNDS=3*       rounds, medians over rounds     (quick: 1)
#   BENCH_FILE_MB=1024*   size of each backing file       (quick: 256)
#   BENCH_PAGECACHE_MB*   data read by the page-cache test, 0 skips it (default: BENCH_FILE_MB; quick: 128)
#   BENCH_WORKLOADS*      comma list of workloads (default all six; quick: randread-4k-qd32,
#                         rw-4k-qd16-12jobs)
#   BENCH_DRIVERS, BENCH_BACKINGS, BENCH_MODES   subsets of raw,loop,rust_loop,ublk / disk,nullb /
#                         buffered,dio,dontcache (dontcache: rust_loop's buffered mode with
#                         cache_mode=dontcache; not in icount runs unless asked for)
#   BENCH_RUBLK_VERSION=0.2.15   rublk from crates.io, built once into $RUST_LOOP_CACHE/rublk
#   BENCH_UBLK_OPTS       extra `rublk add loop` options (default none: rublk's defaults)
#   BENCH_VM_MEM=4G       guest memory
#   BENCH_NO_SETUP=1      skip scripts/setup.sh
#   BENCH_OUT_DIR         results directory (default results/bench, results/bench-icount for icount)
#   BENCH_RUST_LOOP_PARAMS  rust_loop module parameters for an experiment (e.g. nowait_max_depth=0)
#   BENCH_B_KO, BENCH_B_PARAMS  an A/B in one boot: add rust_loop_b to BENCH_DRIVERS and it runs
#                         this rust_loop.ko (another build; default the one built here) with these
#                         module parameters, its cells interleaved with rust_loop's; summary.md
#                         gains the "A/B" table (per round, and the median difference)
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
if [ -n "${BENCH_B_KO:-}" ]; then
	[ -f "$BENCH_B_KO" ] || die "BENCH_B_KO: no such file: $BENCH_B_KO"
	BENCH_B_KO=$(realpath "$BENCH_B_KO")
fi
b_drivers=${BENCH_DRIVERS:-}
if [[ ",${b_drivers// /,}," == *,rust_loop_b,* ]] && [ -z "${BENCH_B_KO:-}${BENCH_B_PARAMS:-}" ]; then
	die "BENCH_DRIVERS has rust_loop_b but neither BENCH_B_KO nor BENCH_B_PARAMS says what B is"
fi
start=$(date +%s)

BENCH_CLOCK=${BENCH_CLOCK:-wall}
OUT=$ROOT/results/bench
case "$BENCH_CLOCK" in
wall) ;;
icount)
	OUT=$ROOT/results/bench-icount
	export VM_QEMU_OPTS="-icount shift=0,sleep=off${VM_QEMU_OPTS:+ $VM_QEMU_OPTS}"
	if [ "${BENCH_QUICK:-0}" = 1 ]; then
		# Two rounds even so: the 12-job cell moves by a few percent of its overhead between
		# one-round runs, about what the perfcheck gate allows.
		: "${BENCH_RUNTIME:=1}" "${BENCH_ROUNDS:=2}" "${BENCH_FILE_MB:=256}"
	fi
	: "${BENCH_RUNTIME:=2}" "${BENCH_ROUNDS:=2}" "${BENCH_FILE_MB:=512}" "${BENCH_PAGECACHE_MB:=0}"
	: "${BENCH_BACKINGS:=nullb}" "${BENCH_DRIVERS:=raw,loop,rust_loop,rust_loop_mq2}"
	: "${BENCH_WORKLOADS:=psync-randread-4k,randread-4k-qd32,randwrite-4k-qd32,seqread-1m-qd8,rw-4k-qd16-12jobs}"
	: "${BENCH_MQ_WORKLOADS:=all}" "${BENCH_MODES:=buffered,dio}"
	;;
*) die "BENCH_CLOCK must be wall or icount" ;;
esac
OUT=${BENCH_OUT_DIR:-$OUT}
if [ -n "${BENCH_GATE:-}" ]; then
	[[ "$BENCH_GATE" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "BENCH_GATE must be a factor such as 1.05"
	[ "$BENCH_CLOCK" = icount ] || die "BENCH_GATE needs BENCH_CLOCK=icount"
fi
if [ "${BENCH_QUICK:-0}" = 1 ]; then
	: "${BENCH_RUNTIME:=1}" "${BENCH_ROUNDS:=1}" "${BENCH_FILE_MB:=256}"
	: "${BENCH_WORKLOADS:=randread-4k-qd32,rw-4k-qd16-12jobs}" "${BENCH_PAGECACHE_MB:=128}"
fi
BENCH_RUNTIME=${BENCH_RUNTIME:-3}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_FILE_MB=${BENCH_FILE_MB:-1024}
BENCH_PAGECACHE_MB=${BENCH_PAGECACHE_MB:-$BENCH_FILE_MB}
BENCH_RUBLK_VERSION=${BENCH_RUBLK_VERSION:-0.2.15}

if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ] && [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
	bash scripts/setup.sh
fi
bash scripts/kernels/kernel.sh >/dev/null
say "module: building rust_loop.ko"
make -s modules >&2 || die "module build failed"

# rublk (the ublk loop target), from crates.io into the cache, once per version. If it cannot be
# built, the ublk cells are skipped with a note rather than failing the bench.
rublk_dir=$CACHE/rublk
rublk=$rublk_dir/bin/rublk
rublk_note=
if [ -n "${BENCH_DRIVERS:-}" ] && [[ ",${BENCH_DRIVERS// /,}," != *,ublk,* ]]; then
	rublk_note="not among BENCH_DRIVERS"
elif [ -x "$rublk" ] && [ "$("$rublk" --version 2>/dev/null)" = "rublk $BENCH_RUBLK_VERSION" ]; then
	say "rublk: $BENCH_RUBLK_VERSION cached ($rublk)"
elif ! command -v cargo >/dev/null; then
	rublk_note="cargo not found"
else
	mkdir -p "$rublk_dir"
	log=$rublk_dir/build.log
	: >"$log"
	for features in "" "--no-default-features"; do
		say "rublk: cargo install --locked rublk --version $BENCH_RUBLK_VERSION $features (log: $log)"
		# shellcheck disable=SC2086
		if cargo install --locked --force rublk --version "$BENCH_RUBLK_VERSION" $features \
			--root "$rublk_dir" >>"$log" 2>&1; then
			rublk_note=
			break
		fi
		rublk_note="cargo install rublk $BENCH_RUBLK_VERSION failed (see $log)"
		tail -n 5 "$log" >&2
	done
fi
if [ "$rublk_note" = "not among BENCH_DRIVERS" ]; then
	rublk=
elif [ -n "$rublk_note" ]; then
	say "rublk: not available, ublk cells will be skipped: $rublk_note"
	rublk=
fi

# matplotlib for the chart, in the project's venv (created by setup.sh).
py=$CACHE/venv/bin/python
[ -x "$py" ] || die "$py missing: run scripts/setup.sh"
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
	say "venv: pip install matplotlib"
	"$py" -m pip install -q matplotlib || say "pip install matplotlib failed: no chart"
fi

# A fresh sparse disk image each run: the guest makes XFS on it and preconditions the file.
img_dir=$CACHE/bench
mkdir -p "$img_dir" "$OUT"
img=$img_dir/disk-$BENCH_CLOCK-$$.img
rm -f "$img"
truncate -s $(((BENCH_FILE_MB * 5 / 4 + 512) * 1024 * 1024)) "$img"
rm -f "$OUT/bench.json" "$OUT/summary.md" "$OUT/ratios.png" "$OUT/host-load.txt"

accel=TCG
[ "${RUST_LOOP_KVM:-0}" = 1 ] && accel=KVM
git_desc=$(git describe --always --dirty 2>/dev/null || echo unknown)
say "bench: ${BENCH_ROUNDS} rounds x ${BENCH_RUNTIME}s cells, ${BENCH_FILE_MB} MiB backing files ($accel, ${VM_CPUS:-2} vCPUs, ${BENCH_VM_MEM:-4G}, clock $BENCH_CLOCK)"
vm_start=$(date +%s)
status=0
# The host's load while the VM runs (other VMs on a shared machine skew TCG numbers): sampled
# every 10 s into host-load.txt ("epoch load1 qemu-processes"), summarised by the report.
(while :; do
	echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(pgrep -c qemu-system || true)"
	sleep 10
done) >"$OUT/host-load.txt" 2>/dev/null &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
bash scripts/vm/vm.sh --disk "$img" --mem "${BENCH_VM_MEM:-4G}" -- env \
	BENCH_RUNTIME="$BENCH_RUNTIME" BENCH_ROUNDS="$BENCH_ROUNDS" BENCH_FILE_MB="$BENCH_FILE_MB" \
	BENCH_PAGECACHE_MB="$BENCH_PAGECACHE_MB" BENCH_WORKLOADS="${BENCH_WORKLOADS:-}" \
	BENCH_DRIVERS="${BENCH_DRIVERS:-}" BENCH_BACKINGS="${BENCH_BACKINGS:-}" \
	BENCH_MODES="${BENCH_MODES:-}" BENCH_MQ_WORKLOADS="${BENCH_MQ_WORKLOADS:-}" \
	BENCH_CLOCK="$BENCH_CLOCK" BENCH_RUST_LOOP_PARAMS="${BENCH_RUST_LOOP_PARAMS:-}" \
	BENCH_B_KO="${BENCH_B_KO:-}" BENCH_B_PARAMS="${BENCH_B_PARAMS:-}" BENCH_RUBLK="$rublk" BENCH_RUBLK_NOTE="$rublk_note" \
	BENCH_UBLK_OPTS="${BENCH_UBLK_OPTS:-}" BENCH_ACCEL="$accel" BENCH_GIT="$git_desc" \
	BENCH_OUT="$OUT" python3 scripts/guest/guest-bench.py || status=$?
vm_secs=$(($(date +%s) - vm_start))
kill "$sampler" 2>/dev/null || true
rm -f "$img"
[ -f "$OUT/bench.json" ] || die "the guest wrote no $OUT/bench.json (exit status $status)"
[ $status = 0 ] || say "bench: the guest exited with status $status; reporting what it recorded"

"$py" scripts/bench/bench-report.py "$OUT/bench.json" --vm-seconds "$vm_secs" \
	--host-load "$OUT/host-load.txt" ${BENCH_GATE:+--gate "$BENCH_GATE"} \
	${BENCH_GATE_EXEMPT:+--gate-exempt "$BENCH_GATE_EXEMPT"} || rstatus=$?
[ "${rstatus:-0}" = 0 ] || [ "${rstatus:-0}" = 3 ] || die "bench-report.py failed"
say "bench: done in $(($(date +%s) - start))s (VM ${vm_secs}s): $OUT/summary.md, $OUT/ratios.png, $OUT/bench.json"
# A MISS never fails the bench; a guest that could not finish (set-up error, crash) does, and so
# does a cell over BENCH_GATE (the report's exit status 3).
[ "${rstatus:-0}" = 0 ] || { say "bench: FAIL: rust_loop's overhead exceeds the gate (BENCH_GATE=$BENCH_GATE) in a cell, see above"; exit 1; }
exit "$status"
