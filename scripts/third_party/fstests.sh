#!/usr/bin/env bash
# fstests (xfstests) on file systems on loop devices, in a VM: rust_loop and the C loop.ko.
#
#   scripts/third_party/fstests.sh          (make fstests)
#   FSTESTS_LIST="generic/013 generic/113" FSTESTS_DRIVERS=rust_loop FSTESTS_FS=xfs scripts/third_party/fstests.sh
#
# On the host (idempotent): the Debian packages fstests builds with and runs with, its users and
# groups (fsgqa, fsgqa2, 123456-fsgqa; the guest shares the host's /etc), and fstests itself,
# built from the fstests source at its pinned commit (scripts/third_party/third_party.sh: $RUST_LOOP_THIRD_PARTY,
# ../shared/third_party, or fetched upstream into the cache; CI reaches only the package registries,
# so there the snapshot is used) into $CACHE/fstests-<tarball hash>, marked built by .rust-loop-built.
# Then the kernel and rust_loop.ko, and a VM with a sparse scratch disk (/dev/vda) that runs
# scripts/guest/guest-fstests.sh: per driver (FSTESTS_DRIVERS) and file system under test (FSTESTS_FS)
# two backing files on the scratch disk's file system (FSTESTS_BACKING) become TEST_DEV and
# SCRATCH_DEV through `losetup --direct-io=$FSTESTS_DIO`, and fstests' ./check runs each test of
# FSTESTS_LIST, FSTESTS_ITER times, each run under a time limit (see the guest script for the
# hang dumps).
#
#   FSTESTS_DRIVERS   "rust_loop loop"   drivers, one after the other in the same boot
#   FSTESTS_FS        "xfs ext4"         file systems under test (FSTYP; btrfs works too)
#   FSTESTS_LIST      "generic/013 generic/113"   fstests tests: names, group:NAME for every
#                                        test of an fstests group (generic/ and the file
#                                        system's own folder, e.g. group:quick), or list:NAME
#                                        for the tests in tests/fstests/NAME.list
#   FSTESTS_RESUME    0                  1: keep results/fstests/ and skip the runs that have a
#                                        verdict there already (a long list over several calls)
#   FSTESTS_BUDGET    0                  seconds after which the guest starts no further test
#                                        (0: no limit); the rest shows as not reached
#   FSTESTS_BATCH     1                  tests per ./check run: ./check's own set-up (40-50 s
#                                        under TCG) is paid once per batch; a test whose output
#                                        does not move for FSTESTS_TIMEOUT counts as hung
#                                        (unless it still works: FSTESTS_SLOW_TIMEOUT); the
#                                        counters are per batch then, not per test
#   FSTESTS_ITER      1                  ./check runs of each test (up to the first that fails)
#   FSTESTS_BACKING   xfs                file system of the scratch disk (xfs or ext4)
#   FSTESTS_BACKING_OPTS ""              its mount options (e.g. lazytime)
#   FSTESTS_DIO       on                 losetup --direct-io=on|off
#   FSTESTS_TIMEOUT   900                seconds per ./check run before it counts as hung
#   FSTESTS_SLOW_TIMEOUT 4 x TIMEOUT     batches: seconds without output that a batch still
#                                        doing I/O or using CPU gets before it counts as hung
#   FSTESTS_SYSRQ_T   0                  1: a hang also dumps every task (sysrq t), not only
#                                        the blocked ones (sysrq w)
#   FSTESTS_DISK_SIZE 12G                the scratch disk (sparse)
#   FSTESTS_FILE_SIZE 3G                 each backing file (sparse)
#   FSTESTS_DEADLINE  (computed)         seconds after which the host kills the VM: by default
#                                        the boot's limit + every run's limit + a margin
#
# Results in results/fstests/ (see docs/testing.md "fstests"). The last line is "N passed, N failed"
# (a test that did not run on a driver, _notrun, is neither); the exit status is non-zero on a
# failure, a hang, a guest error, or when nothing passed.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"

# The fstests source at its pinned commit: scripts/third_party/third_party.sh says where it looked and how to
# provide it when it finds none.
if [ -z "${FSTESTS_TARBALL:-}" ]; then
	FSTESTS_TARBALL=$(bash scripts/third_party/third_party.sh fstests) ||
		die "make fstests needs the fstests source (see above)"
fi
FSTESTS_DRIVERS=${FSTESTS_DRIVERS:-rust_loop loop}
FSTESTS_FS=${FSTESTS_FS:-xfs ext4}
FSTESTS_LIST=${FSTESTS_LIST:-generic/013 generic/113}
FSTESTS_ITER=${FSTESTS_ITER:-1}
FSTESTS_TIMEOUT=${FSTESTS_TIMEOUT:-900}
export FSTESTS_DRIVERS FSTESTS_FS FSTESTS_LIST FSTESTS_ITER FSTESTS_TIMEOUT
[[ "$FSTESTS_ITER" =~ ^[1-9][0-9]*$ ]] || die "FSTESTS_ITER must be a positive number"
[[ "$FSTESTS_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "FSTESTS_TIMEOUT must be a number of seconds"
[[ "${FSTESTS_SLOW_TIMEOUT:-1}" =~ ^[1-9][0-9]*$ ]] || die "FSTESTS_SLOW_TIMEOUT must be a number of seconds"
[[ "${FSTESTS_DEADLINE:-1}" =~ ^[1-9][0-9]*$ ]] || die "FSTESTS_DEADLINE must be a number of seconds"
[[ "${FSTESTS_BUDGET:-0}" =~ ^[0-9]+$ ]] || die "FSTESTS_BUDGET must be a number of seconds"
[[ "${FSTESTS_BATCH:-1}" =~ ^[1-9][0-9]*$ ]] || die "FSTESTS_BATCH must be a positive number"
case "${FSTESTS_RESUME:-0}" in 0 | 1) ;; *) die "FSTESTS_RESUME must be 0 or 1" ;; esac
case "${FSTESTS_DIO:-on}" in on | off) ;; *) die "FSTESTS_DIO must be on or off" ;; esac
for d in $FSTESTS_DRIVERS; do
	case "$d" in rust_loop | loop) ;; *) die "FSTESTS_DRIVERS: unknown driver '$d' (rust_loop, loop)" ;; esac
done

# shellcheck source=fstests-build.sh
source "$ROOT/scripts/third_party/fstests-build.sh"

# The users and groups some tests switch to (fstests' README). The guest sees the host's /etc.
fstests_users() {
	local u opts
	for u in fsgqa fsgqa2 123456-fsgqa; do
		getent passwd "$u" >/dev/null && continue
		say "fstests: adding user $u"
		# useradd makes a group of the user's name, unless one exists already.
		opts=(-m)
		! getent group "$u" >/dev/null || opts+=(-g "$u")
		# A name starting with a digit needs --badname on newer shadow versions.
		useradd "${opts[@]}" "$u" 2>/dev/null || useradd "${opts[@]}" --badname "$u" ||
			die "useradd $u failed"
	done
	getent group fsgqa >/dev/null || groupadd fsgqa || die "groupadd fsgqa failed"
}

if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ]; then
	bash scripts/setup.sh
fi
fstests_packages
[ "$(id -u)" != 0 ] || fstests_users
fst=$(fstests_build)
[ "${FSTESTS_BUILD_ONLY:-0}" = 0 ] || exit 0

bash scripts/kernels/kernel.sh >/dev/null
if [[ " $FSTESTS_DRIVERS " == *" rust_loop "* ]]; then
	say "module: building rust_loop.ko"
	make -s modules >&2 || die "module build failed"
fi

res=$ROOT/results/fstests
if [ "${FSTESTS_RESUME:-0}" = 1 ]; then
	mkdir -p "$res" && rm -f "$res/table" "$res/summary"
else
	rm -rf "$res" && mkdir -p "$res"
fi
# The scratch disk (/dev/vda in the guest) holds the backing files; sparse, zeroed for every
# run, one per checkout so that two checkouts can run at the same time.
scratch=${SCRATCH_IMG:-$CACHE/fstests-scratch-$(printf %s "$ROOT" | sha256sum | cut -c1-8).img}
rm -f "$scratch" && truncate -s "${FSTESTS_DISK_SIZE:-12G}" "$scratch"
trap 'rm -f "$scratch"' EXIT

# expand_list FS: FSTESTS_LIST for file system FS, one test a line, groups expanded from the
# tests' own `_begin_fstest GROUP...` lines (generic/ and FS's folder, as ./check -g does).
expand_list() {
	local fs=$1 item tests=$(dirname "$fst")/src/tests
	for item in $FSTESTS_LIST; do
		case "$item" in
		group:*)
			grep -lE "^_begin_fstest( .*)? ${item#group:}( |\$)" "$tests"/{generic,"$fs"}/[0-9]* 2>/dev/null |
				sed "s|^$tests/||" | sort -t/ -k1,1 -k2,2n ;;
		list:*)
			[ -f "$ROOT/tests/fstests/${item#list:}.list" ] ||
				die "FSTESTS_LIST: no list tests/fstests/${item#list:}.list"
			sed 's/#.*//' "$ROOT/tests/fstests/${item#list:}.list" | xargs -n1 ;;
		*) echo "$item" ;;
		esac
	done
}
# Every combination, in the guest's order: what the table lists. The guest reads each file
# system's list from list-<fs>; the runs with a verdict already (FSTESTS_RESUME) are skipped.
planned=()
todo=0
for f in $FSTESTS_FS; do
	expand_list "$f" >"$res/list-$f"
	[ -s "$res/list-$f" ] || die "FSTESTS_LIST names no test for $f: $FSTESTS_LIST"
done
touch "$res/verdicts.tsv"
for d in $FSTESTS_DRIVERS; do for f in $FSTESTS_FS; do while read -r t; do
	planned+=("$t	$f	$d")
	awk -F'\t' -v k="$t	$f	$d" '$1 "\t" $2 "\t" $3 == k { f = 1 } END { exit f }' "$res/verdicts.tsv" &&
		todo=$((todo + 1))
done <"$res/list-$f"; done; done
[ "$todo" -gt 0 ] || say "fstests: every planned run has a verdict already (FSTESTS_RESUME)"
# The VM's own deadline, for a guest that cannot end a hung test or shut down: the boot, each
# test's limit plus a few minutes of ./check's own set-up and clean-up, each driver/fs pair's
# mkfs and detach.
n_pairs=$(($(wc -w <<<"$FSTESTS_DRIVERS") * $(wc -w <<<"$FSTESTS_FS")))
deadline=${FSTESTS_DEADLINE:-$((${VM_BOOT_TIMEOUT:-300} * ${VM_BOOT_TRIES:-3} +
	todo * (FSTESTS_TIMEOUT * FSTESTS_ITER + 180) + n_pairs * 180 + 300))}
[ "${FSTESTS_BUDGET:-0}" = 0 ] || [ -n "${FSTESTS_DEADLINE:-}" ] ||
	deadline=$((${VM_BOOT_TIMEOUT:-300} * ${VM_BOOT_TRIES:-3} + FSTESTS_BUDGET + ${FSTESTS_SLOW_TIMEOUT:-$((FSTESTS_TIMEOUT * 4))} + n_pairs * 180 + 300))

pass=()
for v in FSTESTS_DRIVERS FSTESTS_FS FSTESTS_LIST FSTESTS_ITER FSTESTS_TIMEOUT FSTESTS_SLOW_TIMEOUT FSTESTS_BACKING FSTESTS_BACKING_OPTS \
	FSTESTS_DIO FSTESTS_SYSRQ_T FSTESTS_FILE_SIZE FSTESTS_BUDGET FSTESTS_BATCH; do
	[ -z "${!v:-}" ] || pass+=("$v=${!v}")
done
say "fstests: ${#planned[@]} runs, $todo to do (drivers: $FSTESTS_DRIVERS; fs: $FSTESTS_FS; tests: $FSTESTS_LIST; x$FSTESTS_ITER)," \
	"${FSTESTS_TIMEOUT}s limit per ./check, VM deadline ${deadline}s"
status=0
# -k: vm.sh kills the guest (its EXIT trap) when timeout's TERM reaches it.
timeout -k 60 "$deadline" bash scripts/vm/vm.sh --disk "$scratch" -- \
	env FSTESTS_SRC="$fst" SCRATCH_DEV=/dev/vda "${pass[@]}" bash scripts/guest/guest-fstests.sh || status=$?
[ "$status" != 124 ] || say "fstests: the VM did not finish within ${deadline}s: killed"

# A test the VM died or was killed in (it records "current" before each test).
if [ -s "$res/current" ]; then
	IFS=$'\t' read -r t f d started <"$res/current"
	printf '%s\t%s\t%s\tfail\t%s\t-\t-\t-\t%s\n' "$t" "$f" "$d" "$(($(date +%s) - started))" \
		"the VM died or was killed during the test (status $status)" >>"$res/verdicts.tsv"
	rm -f "$res/current"
fi
touch "$res/verdicts.tsv"
# The table: every planned run, "notrun" with a note when the guest never reached it.
{
	printf '%-16s %-6s %-10s %-7s %6s %10s %10s %8s  %s\n' test fs driver verdict seconds \
		nowait_ok worker eagain note
	for p in "${planned[@]}"; do
		line=$(awk -F'\t' -v k="$p" '$1 "\t" $2 "\t" $3 == k' "$res/verdicts.tsv" | tail -1)
		[ -n "$line" ] || line="$p	notrun	-	-	-	-	not reached (an earlier hang, a guest error, the VM deadline or FSTESTS_BUDGET)"
		IFS=$'\t' read -r t f d v s nc ws ea note <<<"$line"
		printf '%-16s %-6s %-10s %-7s %6s %10s %10s %8s  %s\n' "$t" "$f" "$d" "$v" "$s" "$nc" "$ws" "$ea" "$note"
	done
} >"$res/table"
passed=$(awk '$4 == "pass"' "$res/table" | wc -l)
failed=$(awk '$4 == "fail"' "$res/table" | wc -l)
# Not reached: the note the table gives above (a _notrun test of a batch has no seconds either).
unreached=$(awk '$4 == "notrun" && $9 == "not" && $10 == "reached"' "$res/table" | wc -l)
notrun=$(($(awk '$4 == "notrun"' "$res/table" | wc -l) - unreached))
cat "$res/table"
echo "(nowait_ok, worker, eagain: rust_loop's nowait_completions, worker_submissions and nowait_eagain" \
	"during the test, TEST_DEV + SCRATCH_DEV; results and evidence in results/fstests/)"
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
	echo "the guest run failed (status $status): see results/fstests/guest.log and the console above"
elif [ "$passed" = 0 ] && [ "$failed" = 0 ]; then
	echo "nothing passed: no test ran (see the notes above)"
fi
[ "$notrun" = 0 ] && [ "$unreached" = 0 ] ||
	echo "$notrun not run (fstests' _notrun: the test does not apply), $unreached not reached"
echo "$passed passed, $failed failed" | tee "$res/summary"
[ "$status" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
