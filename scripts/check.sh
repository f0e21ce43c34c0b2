#!/usr/bin/env bash
# The test command: set-up, the scripts' own tests on the host (tests/scripts/*.sh), kernel,
# module, then tests/run.sh inside a VM.
#
#   scripts/check.sh [REGEX]     (make check; KERNEL=debug for the sanitizer kernel)
#
# REGEX selects guest tests by "file/test" and host tests by "scripts/NAME". Prints "N passed,
# N failed, N skipped" over both as its last line (also into results/tests/summary, which .ci/run
# reads; results/tests/skipped says why each was skipped) and exits non-zero on any failure.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
# Where the time goes: "seconds<TAB>kind<TAB>name" rows, sorted into results/tests/times.tsv at
# the end with the guest's per-test rows (docs/testing.md "Where the time goes").
times_rows=
phase_start=$SECONDS
phase() {
	times_rows+="$((SECONDS - phase_start))"$'\t'"set-up"$'\t'"$1"$'\n'
	phase_start=$SECONDS
}
if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ]; then
	bash scripts/setup.sh
fi
phase "scripts/setup.sh (packages, toolchain)"

# The scripts' own tests first: they need neither the kernel nor a VM, and fail fast. Their
# output goes to results/tests/scripts.log; their failures are added to results/tests/failures
# after the VM run (tests/run.sh starts that file afresh).
say "tests: the scripts' tests on the host (tests/scripts)"
mkdir -p results/tests
: >results/tests/scripts.log
host_passed=0 host_failed=0 host_skipped=0 host_failures= host_skips=
# host_test NAME COMMAND...: runs one host-side test and records it: exit 0 passes, 77 is a
# missing prerequisite (skipped, with its last "SKIP: " line as the reason, as tests/lib.sh's
# skip), anything else fails.
host_test() {
	local name=$1 t0=$SECONDS rc=0 out text
	shift
	out=$("$@" 2>&1 </dev/null) || rc=$?
	{ echo "=== $name (rc=$rc)"; echo "$out"; } >>results/tests/scripts.log
	times_rows+="$((SECONDS - t0))"$'\t'"host test"$'\t'"$name"$'\n'
	if [ $rc = 0 ]; then
		host_passed=$((host_passed + 1))
		printf 'ok   %-50s %5ss\n' "$name" "$((SECONDS - t0))"
	elif [ $rc = 77 ]; then
		host_skipped=$((host_skipped + 1))
		text=$(printf 'skip %-50s (%s)' "$name" "$(echo "$out" | sed -n 's/^SKIP: //p' | tail -n 1)")
		echo "$text"
		host_skips+="$text"$'\n'
	else
		host_failed=$((host_failed + 1))
		text=$(printf 'FAIL %-50s %5ss (rc=%s)\n' "$name" "$((SECONDS - t0))" "$rc"
			echo "$out" | tail -n 15 | sed 's/^/     | /')
		echo "$text"
		host_failures+="$text"$'\n'
	fi
}
for t in tests/scripts/*.sh; do
	[ -f "$t" ] || continue
	name=scripts/$(basename "$t" .sh)
	[[ "$name" =~ ${1:-.} ]] || continue
	host_test "$name" bash "$t"
done

phase_start=$SECONDS
# What the results stand for (a kernel of the matrix's: the suite's or subset's row below, the
# install test's): the commit and tree the module is built from now.
run_provenance
bash scripts/kernels/kernel.sh >/dev/null
phase "kernel ($KERNEL: scripts/kernels/$(is_stock && echo stock || echo kernel).sh)"
say "module: building rust_loop.ko"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -s modules 2>&1 | tee "$log" >&2
[ "${PIPESTATUS[0]}" = 0 ] || die "module build failed (see above)"
! grep -qiE '^(warning|.*: warning)' "$log" || die "module build produced warnings (see above); the build must stay warning-free"
[ -f rust_loop.ko ] || die "module build produced no rust_loop.ko"
phase "module build (rust_loop.ko)"
say "tests: building the test helper modules (tests/kmod)"
bash scripts/kernels/kmake.sh -s M="$ROOT/tests/kmod" modules >&2 || die "building tests/kmod failed"
say "tests: building the 32-bit compat ioctl program (tests/compat)"
gcc -m32 -static -O2 -Wall -o tests/compat/loop32 tests/compat/loop32.c ||
	die "building tests/compat/loop32 failed (needs gcc-multilib: scripts/setup.sh installs it)"
# aio-stress (tests/dio-hang), from the fstests source; without it, those tests are skipped.
bash scripts/third_party/aio-stress.sh || die "building aio-stress failed (see above)"
# replay-log and fsstress (tests/crash), from the same source; without it, those tests are skipped.
bash scripts/third_party/crash-tools.sh || die "building the crash tests' tools failed (see above)"
# blktests (tests/blktests.t.sh: its loop group), from its source; without it, that test is skipped.
bash scripts/third_party/blktests.sh || die "building blktests failed (see above)"
phase "test helpers (tests/kmod, tests/compat, aio-stress, crash tools, blktests)"

mkdir -p results/tests
rm -f results/tests/summary
# A scratch disk for tests that need a real filesystem under the backing file (XFS, ext4):
# /dev/vda in the guest, zeroed for every run; one per checkout so that two checkouts can test
# at the same time.
scratch=${SCRATCH_IMG:-$CACHE/scratch-$(printf %s "$ROOT" | sha256sum | cut -c1-8).img}
rm -f "$scratch" && truncate -s "${SCRATCH_SIZE:-4G}" "$scratch"
say "tests: running in the VM (filter: ${1:-all})"
# TEST_DEADLINE=EPOCH-SECONDS (for CI): the tests' TEST_BUDGET is what is left of it now, less a
# minute for the VM's boot; the set-up above (a kernel's build root, say) does not eat into it
# unseen. At least 1 s: the first test always starts.
if [ -n "${TEST_DEADLINE:-}" ]; then
	[[ "$TEST_DEADLINE" =~ ^[0-9]+$ ]] || die "TEST_DEADLINE must be seconds since the epoch"
	TEST_BUDGET=$((TEST_DEADLINE - $(date +%s) - 60))
	[ "$TEST_BUDGET" -ge 1 ] || TEST_BUDGET=1
	say "tests: ${TEST_BUDGET} s for the tests (TEST_DEADLINE): none starts after that"
fi
# Test variables reach the guest only through its command line.
pass=()
for v in TEST_DRIVER TEST_TIMEOUT TEST_BUDGET TEST_PRIORITY FUZZ_ITERS FUZZ_MIN_ITERS FUZZ_SEED FUZZ_PROCS FUZZ_THREADS FUZZ_TIME RELOAD_CYCLES \
	BLKTESTS_TIMEOUT ABI_SEQ_SEEDS ABI_SEQ_CALLS CRASH_MATRIX CRASH_CUTS CRASH_POINTS CRASH_SHUTDOWN_CUTS CRASH_LOG_MB CRASH_SEGMENT CRASH_SEED; do
	[ -z "${!v:-}" ] || pass+=("$v=${!v}")
done
# The kernel's configuration, for the tests that need an option (tests/lib.sh: need_config).
if is_stock; then
	stock_paths
	pass+=("KERNEL_CONFIG=$CACHE/stock/image-$STOCK_KREL/lib/modules/$STOCK_KREL/config")
else
	pass+=("KERNEL_CONFIG=$(kernel_dir)/.config")
fi
status=0
# 4 vCPUs: the multi-queue tests run 4 hardware queues (TCG runs them on however many host cores).
VM_CPUS=${VM_CPUS:-4} bash scripts/vm/vm.sh --disk "$scratch" -- env TESTS="${1:-.}" SCRATCH_DEV=/dev/vda "${pass[@]}" bash tests/run.sh ||
	status=$?
[ -z "$host_failures" ] || printf '%s' "$host_failures" >>results/tests/failures
vm_secs=$((SECONDS - phase_start))
# The DKMS package as a user installs it (scripts/pkg/dkms-test.sh: a root of the kernel's suite,
# offline install, DKMS build, the kernel booted on it, purge), on a kernel of the matrix whose
# row runs `package` (config/kernels.conf): one host-side test.
if is_stock && [[ "scripts/dkms-install" =~ ${1:-.} ]] && [ "${CHECK_DKMS:-1}" = 1 ] &&
	stock_row && stock_names package | grep -qxF "$STOCK_NAME"; then
	say "tests: the DKMS package as a user installs it (scripts/pkg/dkms-test.sh)"
	host_test scripts/dkms-install bash -c 'make -s deb >/dev/null && bash scripts/pkg/dkms-test.sh'
fi
summary=$(cat results/tests/summary 2>/dev/null) || die "the VM produced no test summary (status $status)"
# The VM's own rows: its boot, the runner and shutdown are what the tests' times do not cover.
tests_secs=$(awk -F'\t' '{s += $2} END {printf "%d", s}' results/tests/times.tsv 2>/dev/null || echo 0)
{
	printf '%s' "$times_rows"
	echo "$((vm_secs - tests_secs))"$'\t'"set-up"$'\t'"VM boot, runner and shutdown (VM $vm_secs s, tests $tests_secs s)"
	awk -F'\t' '{printf "%.1f\tguest test%s\t%s\n", $2, ($3 == 0 ? "" : " (rc=" $3 ")"), $1}' results/tests/times.tsv 2>/dev/null
} | sort -t$'\t' -k1,1 -rn >results/tests/times.sorted.tsv
mv results/tests/times.sorted.tsv results/tests/times.tsv
# The host's tests count too: the summary file gets the sums, so that .ci/run adds them up.
read -r guest_passed _ guest_failed _ guest_skipped _ <<<"$summary"
[ -z "$host_skips" ] || printf '%s' "$host_skips" >>results/tests/skipped
summary="$((guest_passed + host_passed)) passed, $((guest_failed + host_failed)) failed, $((${guest_skipped:-0} + host_skipped)) skipped"
echo "$summary" >results/tests/summary
[ "$host_failed" = 0 ] || [ "$status" != 0 ] || status=1
# On a kernel of the matrix, the suite's result (or the subset's: CHECK_STEP=subset, make subset)
# goes to results/matrix/results.tsv, for README's "Supported kernels" table: whole, or partial
# when REGEX chose some of the suite's tests (make subset: CHECK_SCOPE=partial, SUBSET_TESTS); a
# run of the host's tests alone (REGEX 'scripts/') records nothing.
if is_stock && { [ -z "${1:-}" ] || [ -n "${CHECK_STEP:-}" ] || [ $((guest_passed + guest_failed)) -gt 0 ]; }; then
	stock_row
	scope=whole
	if [ -n "${CHECK_STEP:-}" ]; then
		scope=${CHECK_SCOPE:-whole}
	elif [ -n "${1:-}" ]; then
		scope=partial
	fi
	result_row "$STOCK_NAME" "${CHECK_STEP:-suite}" "$([ "$status" = 0 ] && echo ok || echo FAIL)" "$summary" "$scope"
fi
echo "$summary"
exit "$status"
