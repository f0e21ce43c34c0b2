#!/usr/bin/env bash
# The rust_loop test runner; runs inside the VM as root.
#
#   tests/run.sh [REGEX]    run every test (or those whose name matches REGEX)
#
# A test is a shell function named t_* in a tests/*.t.sh file. Each runs in its own bash with
# `set -euo pipefail` and a time limit; it fails when it exits non-zero or when the kernel log
# gains a WARNING, BUG, Oops, KASAN, UBSAN, KFENCE, slub_debug, lockdep, hung-task or
# duplicate-sysfs-name report while it runs. The last line printed is "N passed, N failed"; the
# exit status is non-zero when any test failed.
# A test may ask for a longer time limit than TEST_TIMEOUT with a function timeout_<name>. A test
# that runs past its limit is killed after its blocked tasks (sysrq-w), the loop devices' blk-mq
# state and counters are saved to $RESULTS/hang-<file>-<test>.log (tests/lib.sh: dump_hang).
# TEST_BUDGET=SECONDS (optional, for CI): no test starts once that much time has passed since
# the runner started; the tests left out are listed as skipped (not counted as passed).
# A test that finds a prerequisite of the kernel missing (tests/lib.sh: need_config, skip) exits
# 77 and is reported as skipped with its reason, never as passed; the closing line is
# "N passed, N failed, N skipped" and $RESULTS/skipped lists every skipped test with its reason.
# TEST_PRIORITY=REGEX (optional): the tests it matches run before the others.
# On a kernel with kmemleak (KERNEL=debug) the run ends with one more test, kmemleak/scan: no
# suspected leak of rust_loop's after every module is unloaded (see tests/kmemleak.py).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ROOT
FILTER=${1:-${TESTS:-.}}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
TEST_BUDGET=${TEST_BUDGET:-0}
[[ "$TEST_BUDGET" =~ ^[0-9]+$ ]] || { echo "TEST_BUDGET must be a number of seconds"; exit 2; }
RESULTS=${RESULTS:-$ROOT/results/tests}
mkdir -p "$RESULTS"
: >"$RESULTS/dmesg.log"
: >"$RESULTS/tests.log"
# Every test's wall time (name, seconds, exit status), in the order run; scripts/check.sh adds
# the set-up rows and sorts it into times.tsv.
: >"$RESULTS/times.tsv"
rm -f "$RESULTS/skipped" "$RESULTS/failures"

[ "$(id -u)" = 0 ] || { echo "tests/run.sh must run as root (in the VM)"; exit 2; }
[ -f "$ROOT/rust_loop.ko" ] || { echo "rust_loop.ko not built: run make"; exit 2; }

# The kernel-report pattern (tests/kernel-reports.sh).
source "$ROOT/tests/kernel-reports.sh"

uname -r
echo "kernel: $(cat /proc/version)"
echo "command line: $(tr ' ' '\n' </proc/cmdline | grep -vE '^(virtme|init=|console=|earlyprintk=|nr_open=)' | xargs)"
# Debug kernel: kmemleak suspects present before the first test are not the tests' doing.
# rust_loop's counters are in debugfs (/sys/kernel/debug/rust_loop/loopN/).
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug ||
	{ echo "cannot mount debugfs on /sys/kernel/debug"; exit 2; }
KMEMLEAK=0
if python3 "$ROOT/tests/kmemleak.py" start | grep -q cleared; then KMEMLEAK=1; fi
# Only the debug flavour has kmemleak; its sanitizers make the kernel 3-6 times slower under
# TCG. Tests whose work is bounded by a time limit (the fuzzer) scale that limit by this.
TEST_SLOWDOWN=${TEST_SLOWDOWN:-$([ $KMEMLEAK = 1 ] && echo 4 || echo 1)}
export TEST_SLOWDOWN
# Testing rust_loop, nothing may autoload loop.c behind the tests' back: an open of a loop node or
# of /dev/loop-control while no loop driver is loaded (udev catching up on old events, a
# `losetup` between an unload and a load) would, through block-major-7-* / char-major-10-237,
# and the C driver would then hold major 7 and the control minor, so that the next insmod fails
# with EBUSY. The guest's /run is its own tmpfs; the tests load their driver explicitly.
if [ "${TEST_DRIVER:-rust_loop}" = rust_loop ] && [ "$(stat -f -c %T /run)" = tmpfs ]; then
	mkdir -p /run/modprobe.d
	echo "install loop /bin/true" >/run/modprobe.d/rust-loop-tests.conf
fi
passed=0 failed=0 failed_names=() skipped_names=() skip_lines=()
run_start=$SECONDS
# The tests to run, as "file name" lines; those matching TEST_PRIORITY (a regex, optional) first.
selected=$(for file in "$ROOT"/tests/*.t.sh; do
	names=$(bash -c 'source "$1"; declare -F' _ "$file" | awk '{print $3}' | grep '^t_' || true)
	for name in $names; do
		[[ "$(basename "$file" .t.sh)/$name" =~ $FILTER ]] && echo "$file $name"
	done
done)
if [ -n "${TEST_PRIORITY:-}" ]; then
	selected=$(echo "$selected" | while read -r file name; do
		[[ "$(basename "$file" .t.sh)/$name" =~ $TEST_PRIORITY ]] && echo "0 $file $name" || echo "1 $file $name"
	done | sort -s -k1,1 | cut -d' ' -f2-)
fi
while read -r file name; do
	[ -n "$file" ] || continue
	{
		full="$(basename "$file" .t.sh)/$name"
		if [ "$TEST_BUDGET" -gt 0 ] && [ $((SECONDS - run_start)) -ge "$TEST_BUDGET" ]; then
			skipped_names+=("$full")
			skip_lines+=("$(printf 'skip %-50s (time budget of %ss spent)' "$full" "$TEST_BUDGET")")
			echo "${skip_lines[-1]}"
			continue
		fi
		# A test may ask for a longer time limit: a function timeout_<test name> printing seconds.
		tmo=$(bash -c 'source "$ROOT/tests/lib.sh"; source "$1"
			if declare -F "timeout_$2" >/dev/null; then "timeout_$2"; fi' _ "$file" "$name" 2>/dev/null)
		[[ "$tmo" =~ ^[0-9]+$ ]] && [ "$tmo" -gt "$TEST_TIMEOUT" ] || tmo=$TEST_TIMEOUT
		dmesg -C
		start=$(date +%s.%N)
		# Output goes to a file, not a pipe: a process stuck in the kernel (D state) that keeps
		# the test's stdout open must not hang the runner after the timeout killed the test.
		timeout -k 10 "$tmo" bash -c '
			set -euo pipefail
			source "$ROOT/tests/lib.sh"
			source "$1"
			"$2"' _ "$file" "$name" >"$RESULTS/.out" 2>&1 </dev/null
		rc=$?
		if [ $rc = 124 ] || [ $rc = 137 ]; then
			# Timed out: whatever hung is still blocked; keep its stacks and the loop devices'
			# blk-mq state and counters (also in $RESULTS/hang-<file>-<test>.log).
			(source "$ROOT/tests/lib.sh"
				# shellcheck disable=SC2046 # one argument per device
				dump_hang $(ls /sys/block | grep '^loop')) >"$RESULTS/hang-${full//\//-}.log" 2>&1
			tail -n 400 "$RESULTS/hang-${full//\//-}.log" >>"$RESULTS/.out"
		fi
		out=$(cat "$RESULTS/.out")
		secs=$(echo "$(date +%s.%N) - $start" | bc)
		# Whatever the test left behind: mounts under /tmp/rust-loop*, bound loop devices.
		# With a deadline: after a deadlock, detaching a device with stuck requests never returns
		# (the test has failed already; the runner must go on to report it).
		(for m in $(awk '$2 ~ "^/tmp/rust-loop" {print $2}' /proc/mounts | sort -r); do
			umount -l "$m" 2>/dev/null || true
		done
		losetup -D 2>/dev/null || true) &
		cleanup_pid=$!
		for _ in $(seq 300); do kill -0 $cleanup_pid 2>/dev/null || break; sleep 0.1; done
		if kill -0 $cleanup_pid 2>/dev/null; then
			out="$out
runner: the clean-up after this test is stuck (devices left bound)"
		fi
		kmsg=$(dmesg)
		printf '%s\t%.1f\t%s\n' "$full" "$secs" "$rc" >>"$RESULTS/times.tsv"
		{ echo "=== $full"; echo "$kmsg"; } >>"$RESULTS/dmesg.log"
		{ echo "=== $full (rc=$rc)"; echo "$out"; } >>"$RESULTS/tests.log"
		splat=$(echo "$kmsg" | grep -E "$SPLAT" | head -5 || true)
		[ $rc = 124 ] && out="$out
timed out after ${tmo}s"
		if [ $rc = 0 ] && [ -z "$splat" ]; then
			passed=$((passed + 1))
			printf 'ok   %-50s %6.1fs\n' "$full" "$secs"
		elif [ $rc = 77 ] && [ -z "$splat" ]; then
			# The test found a prerequisite missing (tests/lib.sh: skip) and said which.
			reason=$(echo "$out" | sed -n 's/^SKIP: //p' | tail -n 1)
			skipped_names+=("$full")
			skip_lines+=("$(printf 'skip %-50s (%s)' "$full" "${reason:-no reason given}")")
			printf 'skip %-50s %6.1fs (%s)\n' "$full" "$secs" "${reason:-no reason given}"
		else
			failed=$((failed + 1))
			failed_names+=("$full")
			# Also kept in $RESULTS/failures: .ci/run repeats them after everything else.
			{
				printf 'FAIL %-50s %6.1fs (rc=%s)\n' "$full" "$secs" "$rc"
				echo "$out" | tail -n 15 | sed 's/^/     | /'
				if [ -n "$splat" ]; then
					echo "     | kernel log report:"
					echo "$kmsg" | grep -E -A12 "$SPLAT" | head -40 | sed 's/^/     | /'
				fi
			} | tee -a "$RESULTS/failures"
		fi
	} </dev/null
done <<<"$selected"
# Leave the machine clean for whatever runs next.
# In a subshell (fail() exits) and with a deadline (a wedged device can block losetup -D for
# ever): the summary below must always be printed.
source "$ROOT/tests/lib.sh"
(unload_loop_drivers) >/dev/null 2>&1 &
cleanup_pid=$!
for _ in $(seq 300); do kill -0 $cleanup_pid 2>/dev/null || break; sleep 0.1; done
# Debug kernel: with every loop module unloaded, kmemleak must suspect nothing of rust_loop's
# (tests/kmemleak.py says how suspects are attributed); counted as one more test.
if [ $KMEMLEAK = 1 ]; then
	start=$(date +%s.%N)
	out=$(python3 "$ROOT/tests/kmemleak.py" check "$RESULTS/kmemleak.log" 2>&1)
	rc=$?
	secs=$(echo "$(date +%s.%N) - $start" | bc)
	{ echo "=== kmemleak/scan (rc=$rc)"; echo "$out"; } >>"$RESULTS/tests.log"
	if [ $rc = 0 ]; then
		passed=$((passed + 1))
		printf 'ok   %-50s %6.1fs\n' "kmemleak/scan" "$secs"
	else
		failed=$((failed + 1))
		failed_names+=("kmemleak/scan")
		printf 'FAIL %-50s %6.1fs (rc=%s)\n' "kmemleak/scan" "$secs" "$rc" | tee -a "$RESULTS/failures"
	fi
	echo "$out" | sed 's/^/     | /'
	[ $rc = 0 ] || echo "$out" | tail -n 15 | sed 's/^/     | /' >>"$RESULTS/failures"
fi
if [ ${#skip_lines[@]} -gt 0 ]; then
	printf '%s\n' "${skip_lines[@]}" >"$RESULTS/skipped"
	echo "${#skipped_names[@]} skipped: ${skipped_names[*]} (reasons: $RESULTS/skipped)"
fi
[ ${#failed_names[@]} = 0 ] || echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed, ${#skipped_names[@]} skipped" | tee "$RESULTS/summary"
[ $failed = 0 ] && [ $passed -gt 0 ]
