#!/usr/bin/env bash
# Host-side test of the hang detection of scripts/guest/guest-fstests.sh's batches (no kernel, no VM;
# scripts/check.sh runs it before the VM):
#
#   bash tests/scripts/fstests-hang-detect.sh
#
# A batch whose ./check output has not moved for FSTESTS_TIMEOUT seconds counts as hung, unless
# it still works (CPU, I/O): then it is slow (fstests' generic/037 ran 913 s without output
# under TCG beside a second VM and was killed as hung; the kill hit the next test). The
# functions of guest-fstests.sh run here against a stub ./check, with its kernel-facing
# helpers (kernel log, counters, the state dump) stubbed. Checks: a test that computes past the
# limit passes (slow, not hung); one that sleeps past it fails as hung and is killed, and the
# tests after it are left for the next batch; one that computes past the slow limit fails too;
# a test that ends while the state is dumped is not counted as hung; ./check is asked to keep
# the batch's order (it sorts the tests otherwise, and the verdicts are read in that order).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# The functions of the guest script (not its top level, which wants a VM).
funcs=$tmp/funcs.sh
for f in log bounded stop_check activity overdue batch_verdict record_batch_verdict run_batch delta; do
	awk -v f="$f() {" 'index($0, f) == 1 { on = 1; print; if (/}$/) on = 0; next } on { print } on && /^}/ { on = 0 }' \
		scripts/guest/guest-fstests.sh
done >"$funcs"
grep -q '^run_batch() {' "$funcs" || { echo "FAIL: run_batch not found in scripts/guest/guest-fstests.sh"; exit 1; }

# A stub ./check: prints fstests' header, then per test its name, runs the test's action and
# prints its time, as ./check does ("generic/001 5s"). Actions, by test name: spin-N computes
# for N seconds, sleep-N sleeps, dumpend ends while the state is dumped.
fst=$tmp/fst
mkdir -p "$fst"
cat >"$fst/check" <<'EOF'
#!/usr/bin/env bash
echo "FSTYP -- stub"
[ "${1:-}" = --exact-order ] && shift || { echo "want --exact-order first"; exit 1; }
for t in "$@"; do
	printf '%s ' "$t"
	a=${t#*/}
	case "$a" in
	spin-*) end=$((SECONDS + ${a#spin-})); while [ $SECONDS -lt "$end" ]; do :; done ;;
	sleep-*) sleep "${a#sleep-}" ;;
	dumpend) while [ ! -e "$DUMPING" ]; do sleep 0.2; done ;;
	esac
	echo " 1s"
done
echo "Passed all $# tests"
EOF
chmod +x "$fst/check"

# run CASE LIMIT SLOW_LIMIT TEST...: run_batch in a subshell with the stubs; prints the
# verdicts (test verdict) and the tests left.
run() {
	local case=$1 limit=$2 slow=$3
	shift 3
	(
		RES=$tmp/$case FST=$fst LIMIT=$limit SLOW_LIMIT=$slow SPLAT='WARNING:' wedged=0
		export DUMPING=$tmp/$case.dumping
		mkdir -p "$RES"
		# shellcheck source=/dev/null
		source "$funcs"
		dmesg() { :; }
		counters() { :; }
		dump_hang() { mkdir -p "$1" && touch "$DUMPING" && sleep 2; }
		run_batch stub fs /dev/null /dev/null "$@" >"$tmp/$case.log" 2>&1
		cut -f1,4 "$RES/verdicts.tsv" | tr '\t' ' '
		echo "left: ${left[*]}"
	)
}

# Computes for 7 s without output, limit 3 s: slow, not hung; the next test runs too.
out=$(run slow 3 20 t/spin-7 t/sleep-0)
[ "$out" = "t/spin-7 pass
t/sleep-0 pass
left: " ] || fail "a computing test past the limit: want both passed, got: $out"
grep -q "slow, not hung" "$tmp/slow.log" || fail "a computing test past the limit: no 'slow' line in the log"

# Sleeps (no CPU, no I/O) past the limit: hung, killed, the rest left for another batch.
start=$SECONDS
out=$(run hung 3 20 t/sleep-0 t/sleep-60 t/sleep-1)
[ "$out" = "t/sleep-0 pass
t/sleep-60 fail
left: t/sleep-1" ] || fail "a sleeping test past the limit: want pass, fail, one left, got: $out"
[ $((SECONDS - start)) -lt 30 ] || fail "a sleeping test past the limit was not killed in time"
pgrep -f "$fst/check" >/dev/null && fail "the hung ./check is still running after the kill"

# Computes past the slow limit: hung all the same.
out=$(run spinning 2 6 t/spin-40)
[ "$out" = "t/spin-40 fail
left: " ] || fail "a test computing past the slow limit: want fail, got: $out"
pkill -f "$fst/check" 2>/dev/null || true

# Ends while the state is dumped (output moves during the dump): not hung.
out=$(run dumpend 3 20 t/dumpend t/sleep-0)
[ "$out" = "t/dumpend pass
t/sleep-0 pass
left: " ] || fail "a test that ends during the dump: want both passed, got: $out"

[ "$failed" = 0 ] && echo "fstests-hang-detect: ok"
exit "$failed"
