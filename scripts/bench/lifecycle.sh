#!/usr/bin/env bash
# The lifecycle benchmark (make lifecycle): how fast devices come and go, and what an idle one
# costs, for loop.ko and rust_loop.ko in one VM (udev running). See BENCHMARKS.md "Lifecycle".
#
#   scripts/bench/lifecycle.sh
#   LIFECYCLE_N=1000 LIFECYCLE_TASKS=8 LIFECYCLE_IDLE=1000 scripts/bench/lifecycle.sh
#   LIFECYCLE_NUMBERS=lowest scripts/bench/lifecycle.sh   # distinct (each device its own number), lowest
#                                                   # (the lowest free one), or both (default)
#   LIFECYCLE_RUST_LOOP_PARAMS="worker_linger_ms=0" scripts/bench/lifecycle.sh   # rust_loop's insmod parameters
#   LIFECYCLE_PROFILE=1 scripts/bench/lifecycle.sh   # perf record each run: CPU per device by command,
#                                               # module, symbol (results/lifecycle/profile-*.txt)
#
# Results in results/lifecycle/: lifecycle.json, summary.md.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
for v in LIFECYCLE_N LIFECYCLE_TASKS LIFECYCLE_IDLE; do
	[[ "${!v:-1}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive number"
done
[[ "${LIFECYCLE_NUMBERS:-distinct}" =~ ^(distinct|lowest)(,(distinct|lowest))*$ ]] ||
	die "LIFECYCLE_NUMBERS must be distinct, lowest or both, comma-separated"
if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ] && [ "${BENCH_NO_SETUP:-0}" != 1 ]; then
	bash scripts/setup.sh
fi
bash scripts/kernels/kernel.sh >/dev/null
make -s modules >&2 || die "module build failed"
mkdir -p results/lifecycle
bash scripts/vm/vm.sh -- env LIFECYCLE_N="${LIFECYCLE_N:-1000}" LIFECYCLE_TASKS="${LIFECYCLE_TASKS:-8}" \
	LIFECYCLE_IDLE="${LIFECYCLE_IDLE:-1000}" LIFECYCLE_DRIVERS="${LIFECYCLE_DRIVERS:-loop,rust_loop}" \
	LIFECYCLE_NUMBERS="${LIFECYCLE_NUMBERS:-distinct,lowest}" \
	LIFECYCLE_RUST_LOOP_PARAMS="${LIFECYCLE_RUST_LOOP_PARAMS:-}" \
	LIFECYCLE_PROFILE="${LIFECYCLE_PROFILE:-0}" LIFECYCLE_OUT="${LIFECYCLE_OUT:-$ROOT/results/lifecycle}" \
	python3 scripts/guest/guest-lifecycle.py || die "the lifecycle benchmark failed (see above)"
