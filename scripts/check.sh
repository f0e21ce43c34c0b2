#!/usr/bin/env bash
# The test command: set-up, the scripts' own tests on the host (tests/scripts/*.sh), kernel,
# module, then tests/run.sh inside a VM.
#
#   scripts/check.sh [REGEX]     (make check; KERNEL=debug for the sanitizer kernel)
#
# REGEX selects guest tests by "file/test" and host tests by "scripts/NAME". Prints "N passed,
# N failed" over both as its last line (also into results/tests/summary, which .ci/run reads)
# and exits non-zero on any failure.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ]; then
	bash scripts/setup.sh
fi

# The scripts' own tests first: they need neither the kernel nor a VM, and fail fast. Their
# output goes to results/tests/scripts.log; their failures are added to results/tests/failures
# after the VM run (tests/run.sh starts that file afresh).
say "tests: the scripts' tests on the host (tests/scripts)"
mkdir -p results/tests
: >results/tests/scripts.log
host_passed=0 host_failed=0 host_failures=
for t in tests/scripts/*.sh; do
	[ -f "$t" ] || continue
	name=scripts/$(basename "$t" .sh)
	[[ "$name" =~ ${1:-.} ]] || continue
	t0=$SECONDS rc=0
	out=$(bash "$t" 2>&1 </dev/null) || rc=$?
	{ echo "=== $name (rc=$rc)"; echo "$out"; } >>results/tests/scripts.log
	if [ $rc = 0 ]; then
		host_passed=$((host_passed + 1))
		printf 'ok   %-50s %5ss\n' "$name" "$((SECONDS - t0))"
	else
		host_failed=$((host_failed + 1))
		text=$(printf 'FAIL %-50s %5ss (rc=%s)\n' "$name" "$((SECONDS - t0))" "$rc"
			echo "$out" | tail -n 15 | sed 's/^/     | /')
		echo "$text"
		host_failures+="$text"$'\n'
	fi
done

bash scripts/kernel.sh >/dev/null
say "module: building rust_loop.ko"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -s modules 2>&1 | tee "$log" >&2
[ "${PIPESTATUS[0]}" = 0 ] || die "module build failed (see above)"
! grep -qiE '^(warning|.*: warning)' "$log" || die "module build produced warnings (see above); the build must stay warning-free"
[ -f rust_loop.ko ] || die "module build produced no rust_loop.ko"
say "tests: building the test helper modules (tests/kmod)"
kdir=$(bash scripts/kernel.sh)
make -s -C "$kdir" M="$ROOT/tests/kmod" LLVM="$(kernel_llvm "$kdir")" modules >&2 || die "building tests/kmod failed"
say "tests: building the 32-bit compat ioctl program (tests/compat)"
gcc -m32 -static -O2 -Wall -o tests/compat/loop32 tests/compat/loop32.c ||
	die "building tests/compat/loop32 failed (needs gcc-multilib: scripts/setup.sh installs it)"
# aio-stress, the load of fstests' generic/113 (tests/dio-hang), compiled from the fstests
# snapshot in ../shared/third_party (its source is not copied into the project).
say "tests: building aio-stress from the fstests snapshot (tests/dio-hang)"
fstests_tar=$(ls "$ROOT"/../shared/third_party/fstests-*.tar.gz 2>/dev/null | head -n 1)
[ -n "$fstests_tar" ] || die "no fstests snapshot in $ROOT/../shared/third_party (see ../shared/README.md)"
aio_dir=$CACHE/aio-stress-$(sha256sum "$fstests_tar" | cut -c1-12)
if [ ! -x "$aio_dir/aio-stress" ]; then
	rm -rf "$aio_dir" && mkdir -p "$aio_dir"
	tar -xzf "$fstests_tar" -C "$aio_dir" --wildcards --no-anchored 'ltp/aio-stress.c' ||
		die "ltp/aio-stress.c not found in $fstests_tar"
	gcc -O2 -w -o "$aio_dir/aio-stress.tmp" "$(find "$aio_dir" -name aio-stress.c | head -n 1)" -laio -lpthread ||
		die "building aio-stress failed (needs libaio-dev: scripts/setup.sh installs it)"
	mv "$aio_dir/aio-stress.tmp" "$aio_dir/aio-stress"
fi
cp "$aio_dir/aio-stress" tests/aio-stress

mkdir -p results/tests
rm -f results/tests/summary
# A scratch disk for tests that need a real filesystem under the backing file (XFS, ext4):
# /dev/vda in the guest, zeroed for every run; one per checkout so that two checkouts can test
# at the same time.
scratch=${SCRATCH_IMG:-$CACHE/scratch-$(printf %s "$ROOT" | sha256sum | cut -c1-8).img}
rm -f "$scratch" && truncate -s "${SCRATCH_SIZE:-4G}" "$scratch"
say "tests: running in the VM (filter: ${1:-all})"
# Test variables reach the guest only through its command line.
pass=()
for v in TEST_DRIVER TEST_TIMEOUT TEST_BUDGET TEST_PRIORITY FUZZ_ITERS FUZZ_MIN_ITERS FUZZ_SEED FUZZ_PROCS FUZZ_THREADS FUZZ_TIME RELOAD_CYCLES; do
	[ -z "${!v:-}" ] || pass+=("$v=${!v}")
done
status=0
# 4 vCPUs: the multi-queue tests run 4 hardware queues (TCG runs them on however many host cores).
VM_CPUS=${VM_CPUS:-4} bash scripts/vm.sh --disk "$scratch" -- env TESTS="${1:-.}" SCRATCH_DEV=/dev/vda "${pass[@]}" bash tests/run.sh ||
	status=$?
[ -z "$host_failures" ] || printf '%s' "$host_failures" >>results/tests/failures
summary=$(cat results/tests/summary 2>/dev/null) || die "the VM produced no test summary (status $status)"
# The host's tests count too: the summary file gets the sums, so that .ci/run adds them up.
read -r guest_passed _ guest_failed _ <<<"$summary"
summary="$((guest_passed + host_passed)) passed, $((guest_failed + host_failed)) failed"
echo "$summary" >results/tests/summary
[ "$host_failed" = 0 ] || [ "$status" != 0 ] || status=1
echo "$summary"
exit "$status"
