#!/usr/bin/env bash
# make crashcheck: the crash tests (tests/crash.t.sh, docs/testing.md "Crash consistency") at
# full size, in one VM run (scripts/check.sh '^crash/'): loop.c's runs, then rust_loop's, each
# eight flakey runs (direct I/O and buffered, XFS and ext4 under ext4 and XFS) of CRASH_CUTS cuts
# and CRASH_POINTS points replayed from dm-log-writes' log, and two shutdown runs (direct I/O:
# the NOWAIT path) of CRASH_SHUTDOWN_CUTS cuts. Prints per driver, mode and file system on the
# loop device the points checked, the writes lost, the checks and the time to recover, and the
# ways a write ends that rust_loop's counters show taken (each required); the table is also in
# results/tests/crash/table. It reports its own run only: the results of an earlier run are
# removed first, a test that skips (no fstests source, a kernel without dm-log-writes) fails
# here, and the report checks that the runs are the matrix's, both drivers' (tests/crash.t.sh:
# crash_matrix, in results/tests/crash/matrix), each having checked objects. Exits non-zero on
# any loss, failed check, skip or missing run.
#
#   CRASH_CUTS 25, CRASH_POINTS 25, CRASH_SHUTDOWN_CUTS 25, CRASH_LOG_MB 512, CRASH_SEGMENT 2
#   (tests/crash.t.sh)
#   SCRATCH_SIZE  the scratch disk (default: what the runs take, rounded up to a GiB)
#   VM_MEM        the guest's memory (default 6G: ten runs took under 1 GiB)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
export CRASH_MATRIX=full CRASH_CUTS=${CRASH_CUTS:-25} CRASH_POINTS=${CRASH_POINTS:-25}
export CRASH_SHUTDOWN_CUTS=${CRASH_SHUTDOWN_CUTS:-25} CRASH_LOG_MB=${CRASH_LOG_MB:-512}
export CRASH_SEGMENT=${CRASH_SEGMENT:-2}
for v in CRASH_CUTS CRASH_POINTS CRASH_SHUTDOWN_CUTS CRASH_LOG_MB; do
	[[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a number"
done
# Eight flakey runs (log and replay regions; the data regions are in memory) side by side.
need=$(python3 -c 'import sys; sys.path.insert(0, "tests/crash"); import crash
print(8 * crash.region_mib("flakey", int(sys.argv[1])) + 2 * crash.region_mib("shutdown", 0))' "$CRASH_LOG_MB")
export SCRATCH_SIZE=${SCRATCH_SIZE:-$(((need + 1023) / 1024))G}
# Ten runs at once, each with its data region (null_blk, 224 MiB), page caches, fsstress and a
# RAM disk for its snapshots.
export VM_MEM=${VM_MEM:-6G} CHECK_DKMS=0
start=$SECONDS
# Only this run's results: none of an earlier one stays to be reported.
rm -rf results/tests/crash
mkdir -p results/tests/crash
# The runs this command makes: the full matrix, for loop.c and for rust_loop.
matrix=results/tests/crash/matrix
# shellcheck disable=SC2016 # expanded by the inner bash
bash -c 'fail() { echo "$*" >&2; exit 1; }; source tests/crash.t.sh
	for d in loop rust_loop; do crash_matrix | sed "s/^/$d /"; done' >"$matrix" ||
	die "the crash matrix (tests/crash.t.sh: crash_matrix) could not be listed"
# A missing prerequisite the host can see stops here, before the VM: a skipped crash test is a
# failure of this command.
bash scripts/third_party/crash-tools.sh || die "building the crash tests' tools failed (see above)"
[ ! -f tests/crash/bin.missing ] ||
	die "the crash tests cannot run (make crashcheck counts a skip as a failure): $(cat tests/crash/bin.missing)"
status=0
bash scripts/check.sh '^crash/' || status=$?
skips=$(grep '^skip crash/' results/tests/skipped 2>/dev/null || true)
report=0
python3 tests/crash/report.py results/tests/crash --runs --require-paths --cuts "$CRASH_CUTS" \
	--points "$CRASH_POINTS" --shutdown-cuts "$CRASH_SHUTDOWN_CUTS" --matrix "$matrix" \
	>results/tests/crash/table || report=$?
echo
cat results/tests/crash/table
if [ -n "$skips" ]; then
	echo "$skips" | sed 's/^/FAIL: /'
	report=1
fi
say "crashcheck: $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s (CRASH_CUTS=$CRASH_CUTS CRASH_POINTS=$CRASH_POINTS CRASH_SHUTDOWN_CUTS=$CRASH_SHUTDOWN_CUTS)"
[ "$status" != 0 ] || status=$report
exit "$status"
