#!/usr/bin/env bash
# The guest half of scripts/third_party/fstests.sh (runs inside the VM as root): fstests on loop devices.
#
# For each driver of FSTESTS_DRIVERS (rust_loop: insmod rust_loop.ko; loop: modprobe loop) and
# each file system of FSTESTS_FS: two sparse backing files on the scratch disk's file system
# (FSTESTS_BACKING on SCRATCH_DEV) are attached with `losetup --direct-io=$FSTESTS_DIO` as
# fstests' TEST_DEV and SCRATCH_DEV, and ./check runs each test of FSTESTS_LIST on its own,
# FSTESTS_ITER times (up to the first run that does not pass), so that every run has its own
# time limit and kernel log, and every verdict its counters.
#
# A ./check that has not finished after FSTESTS_TIMEOUT seconds counts as failed, as
# hung: before killing it, the blocked tasks (sysrq w; every task too with FSTESTS_SYSRQ_T=1),
# the kernel stacks of the tasks in D state, the blk-mq debugfs state of the loop devices and of
# the scratch disk, and rust_loop's counters go to <test dir>/hang/. If the killed test or the
# devices cannot be cleaned up (a deadlock leaves tasks in D state for ever), the run stops
# there; the host lists what was not reached. In a batch (FSTESTS_BATCH) the limit is on
# ./check's output: FSTESTS_TIMEOUT seconds without output, unless the batch still works (its
# loop devices complete I/O or its tasks use CPU: slow under TCG, not hung), then up to
# FSTESTS_SLOW_TIMEOUT (4 x FSTESTS_TIMEOUT); output during the dump means it was slow too.
#
# Results (written as they come, the project directory is writable: a wedged or killed VM
# leaves everything up to the test that hung), in $ROOT/results/fstests/:
#   verdicts.tsv   test fs driver verdict seconds nowait_completions worker_submissions
#                  nowait_eagain note (counter deltas over TEST_DEV + SCRATCH_DEV; "-" for loop)
#   current        the test running now (left behind if the VM dies during it)
#   guest.log      this script's progress
#   <driver>-<fs>/<test>/   counters.before/after, and per ./check run (in <test>/<n>/ when
#                  FSTESTS_ITER > 1): check.out (its output), check.log, the test's .out.bad,
#                  .dmesg, .notrun (and .full when it failed), dmesg, hang/ (see above)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RES=$ROOT/results/fstests
DRIVERS=${FSTESTS_DRIVERS:-rust_loop loop}
FSLIST=${FSTESTS_FS:-xfs ext4}
LIST=${FSTESTS_LIST:-generic/013 generic/113}
ITER=${FSTESTS_ITER:-1}
BACKING=${FSTESTS_BACKING:-xfs}
BACKING_OPTS=${FSTESTS_BACKING_OPTS:-}
DIO=${FSTESTS_DIO:-on}
LIMIT=${FSTESTS_TIMEOUT:-900}
# A batch whose output has not moved for LIMIT seconds but which still works (its loop devices
# complete I/O or its tasks use CPU) is slow, not hung: it gets up to SLOW_LIMIT seconds without
# output before it counts as hung all the same.
SLOW_LIMIT=${FSTESTS_SLOW_TIMEOUT:-$((LIMIT * 4))}
BUDGET=${FSTESTS_BUDGET:-0}
BATCH=${FSTESTS_BATCH:-1}
FILE_SIZE=${FSTESTS_FILE_SIZE:-3G}
DISK=${SCRATCH_DEV:-/dev/vda}
SRC=${FSTESTS_SRC:?FSTESTS_SRC: the built fstests tree, as a tar (scripts/third_party/fstests.sh sets it)}
# Everything the run writes outside the results: the guest's /tmp is a tmpfs (the root file
# system is the host's, read-only).
W=/tmp/rust-loop-fstests
FST=$W/fstests
# The kernel-report pattern.
source "$ROOT/tests/kernel-reports.sh"
MODPROBE_CONF=/run/modprobe.d/rust-loop-fstests.conf

mkdir -p "$RES"
log() { echo "fstests: $*" | tee -a "$RES/guest.log"; }
fatal() { log "error: $*"; exit 2; }

[ "$(id -u)" = 0 ] || fatal "must run as root (in the VM)"
[ -b "$DISK" ] || fatal "no scratch disk $DISK"
[ -f "$SRC" ] || fatal "no built fstests at $SRC"
[[ " $DRIVERS " != *" rust_loop "* ]] || [ -f "$ROOT/rust_loop.ko" ] || fatal "rust_loop.ko not built: run make"
log "kernel $(uname -r); drivers: $DRIVERS; file systems: $FSLIST; tests: $LIST (x$ITER);" \
	"backing: $BACKING${BACKING_OPTS:+ -o $BACKING_OPTS} on $DISK, direct-io=$DIO; limit ${LIMIT}s per ./check"

# ./check runs in a session keyring of its own, as it would in a login session (pam_keyinit):
# the guest's init gives its processes none, so each `keyctl` of a test would get a new anonymous
# one that dies with it, and a test that adds a key to a keyring it created a moment before
# (fscrypt v1 policies: common/encrypt's _init_session_keyring, then `keyctl padd ... $ring`)
# failed with ENOKEY ("Required key not available") on any block device.
SESSION_KEYRING=()
if command -v keyctl >/dev/null 2>&1; then
	SESSION_KEYRING=(keyctl session -)
else
	log "note: no keyctl: the fscrypt tests that need a session keyring cannot run"
fi

# fstests writes into its own tree (results/, local.config): it runs from a copy in the tmpfs.
touch /tmp/.rust-loop-w 2>/dev/null && rm -f /tmp/.rust-loop-w || mount -t tmpfs tmpfs /tmp ||
	fatal "/tmp is not writable and no tmpfs could be mounted on it"
rm -rf "$W" && mkdir -p "$W/backing" "$W/test" "$W/scratch"
{ mkdir -p "$FST" && tar -xf "$SRC" -C "$FST"; } || fatal "unpacking $SRC into $FST failed"
log "fstests unpacked into $FST; making $BACKING on $DISK"
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true

# bounded SECONDS COMMAND...: runs COMMAND in the background and gives up on it after SECONDS
# (a device with a request stuck in the driver blocks umount and losetup -d for ever).
bounded() {
	local secs=$1 pid i
	shift
	"$@" </dev/null &
	pid=$!
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 $pid 2>/dev/null || { wait $pid; return; }
		sleep 0.1
	done
	local what="$*"
	log "'${what:0:100}' did not finish within ${secs}s"
	return 124
}

# show FILE...: "== FILE" and its content, for each that exists; read by the shell itself, no
# fork per file (hundreds of debugfs files; a fork costs tens of ms under TCG). After a deadlock a
# sysfs or debugfs read may wait for ever on a lock a hung task holds: callers run it under
# `bounded`.
show() {
	local f lines
	for f in "$@"; do
		[ -f "$f" ] || continue
		mapfile -t lines <"$f"
		echo "== ${f#/sys/kernel/debug/block/}"
		[ ${#lines[@]} = 0 ] || printf '%s\n' "${lines[@]}"
	done 2>&1
}

# The scratch disk's file system, which holds the backing files.
case "$BACKING" in
xfs) mkfs.xfs -q -f "$DISK" ;;
ext4) mkfs.ext4 -q -F "$DISK" ;;
*) fatal "FSTESTS_BACKING=$BACKING: xfs or ext4" ;;
esac || fatal "mkfs.$BACKING $DISK failed"
mount ${BACKING_OPTS:+-o "$BACKING_OPTS"} "$DISK" "$W/backing" || fatal "mount $DISK failed"

# Loads a driver; nothing else may hold block major 7. Testing rust_loop, an open of a loop node
# while no driver is loaded must not autoload loop.ko behind our back (as tests/run.sh does).
load_driver() {
	unload_drivers || return 1
	case "$1" in
	rust_loop)
		mkdir -p /run/modprobe.d && echo "install loop /bin/true" >"$MODPROBE_CONF"
		insmod "$ROOT/rust_loop.ko" || return 1
		;;
	loop)
		rm -f "$MODPROBE_CONF"
		modprobe loop || return 1
		;;
	esac
	udevadm settle -t 10 2>/dev/null || true
}
unload_drivers() {
	local m i
	for m in rust_loop loop; do
		[ -d /sys/module/$m ] || continue
		for i in $(seq 20); do
			rmmod $m 2>/dev/null && break
			sleep 0.5
		done
		[ ! -d /sys/module/$m ] || { log "cannot unload $m: $(rmmod $m 2>&1)"; return 1; }
	done
}

# counters FILE DEV...: rust_loop's counters of the devices, "loopN name value" lines (bounded:
# see show).
counters() {
	local out=$1
	shift
	bounded 30 counters_of "$@" >"$out"
}
counters_of() {
	local d f v
	for d in "$@"; do
		for f in /sys/kernel/debug/rust_loop/"${d##*/}"/*; do
			[ -f "$f" ] && read -r v <"$f" && echo "${d##*/} ${f##*/} $v"
		done
	done 2>/dev/null
	return 0
}
# delta BEFORE AFTER NAME: the growth of counter NAME summed over the devices ("-" without it)
delta() {
	awk -v n="$3" 'FNR == NR { if ($2 == n) b[$1] = $3; next }
		$2 == n { d += $3 - b[$1]; seen = 1 }
		END { if (seen) print d; else print "-" }' "$1" "$2"
}

# The kernel stacks of the tasks in D state (user tasks and kernel threads), without a fork per
# task: a deadlock can leave a thousand of them, and a fork costs tens of ms under TCG.
d_state_stacks() {
	local p st comm lines
	for p in /proc/[0-9]*; do
		read -r st <"$p/stat" || continue
		st=${st##*) }
		[ "${st%% *}" = D ] || continue
		read -r comm <"$p/comm"
		mapfile -t lines <"$p/stack"
		echo "== ${p#/proc/} $comm"
		printf '%s\n' "${lines[@]}"
	done 2>/dev/null
}

# dump_hang DIR: what a hang looks like from inside, before the test is killed. Every read
# that could block on a hung task's lock is bounded.
dump_hang() {
	local dir=$1 d
	mkdir -p "$dir"
	# ps reads /proc/PID/cmdline, which waits for the process's mmap lock.
	bounded 20 ps -eo pid,ppid,stat,wchan:32,etime,args >"$dir/ps.txt" 2>&1
	bounded 120 d_state_stacks >"$dir/d-state-stacks.txt" 2>&1
	dmesg >>"$dir/dmesg-before.txt"
	dmesg -C
	echo w >/proc/sysrq-trigger
	sleep 2
	dmesg >"$dir/sysrq-w.txt"
	if [ "${FSTESTS_SYSRQ_T:-0}" = 1 ]; then
		dmesg -C
		echo t >/proc/sysrq-trigger
		sleep 5
		dmesg >"$dir/sysrq-t.txt"
	fi
	# blk-mq state: the loop devices and the disk under them.
	local files=()
	for d in /sys/kernel/debug/block/loop* "/sys/kernel/debug/block/${DISK##*/}"; do
		files+=("$d"/state "$d"/requeue_list "$d"/pm_only "$d"/hctx*/{state,flags,busy,dispatch,dispatched,queued,run,active,tags,tags_bitmap,sched_tags,sched_tags_bitmap} "$d"/hctx*/cpu*/*)
	done
	bounded 120 show "${files[@]}" >"$dir/blk-mq-debugfs.txt"
	# The loop devices: backing file, direct I/O, requests in flight, rust_loop's counters.
	files=()
	for d in /sys/block/loop*; do
		[ -d "$d/loop" ] && files+=("$d"/loop/{backing_file,dio} "$d"/inflight "$d"/rust_loop/* /sys/kernel/debug/rust_loop/"${d##*/}"/*)
	done
	bounded 60 show "${files[@]}" >"$dir/loop-devices.txt"
}

# stop_check PID: ends a ./check (its own session) and everything it started. Fails if
# something is left: a task in D state does not die.
stop_check() {
	local pid=$1 i
	kill -TERM -- "-$pid" 2>/dev/null
	for i in $(seq 30); do pgrep -s "$pid" >/dev/null || return 0; sleep 1; done
	kill -KILL -- "-$pid" 2>/dev/null
	for i in $(seq 30); do pgrep -s "$pid" >/dev/null || return 0; sleep 1; done
	return 1
}

# activity PID: a number that grows while the ./check of session PID works: the I/Os its
# loop devices completed and the CPU ticks of the session's tasks, their reaped children's
# included (a test that runs many short commands, as generic/037's xattr loop, shows there).
activity() {
	local sum=0 f p st r w
	for f in /sys/block/loop*/stat; do
		read -r r _ _ _ w _ <"$f" 2>/dev/null || continue
		sum=$((sum + r + w))
	done
	for p in $(pgrep -s "$1"); do
		read -r st <"/proc/$p/stat" 2>/dev/null || continue
		# Fields after "(comm) ": state is 1, utime 12, stime 13, cutime 14, cstime 15.
		set -- ${st##*) }
		sum=$((sum + ${12:-0} + ${13:-0} + ${14:-0} + ${15:-0}))
	done
	echo "$sum"
}

# overdue PID SINCE WHAT: whether the ./check of session PID, quiet since SINCE (its start, or
# its last output), counts as hung now: LIMIT seconds past SINCE with no work (I/O, CPU) over
# the last LIMIT seconds, or SLOW_LIMIT past SINCE. Slow but working, it logs so (as WHAT). Reads
# and updates the caller's `work` and `work_at` (the last activity sample and when it was taken).
overdue() {
	local pid=$1 since=$2 what=$3 now s
	now=$(date +%s)
	[ $((now - since)) -ge "$LIMIT" ] && [ $((now - work_at)) -ge "$LIMIT" ] || return 1
	s=$(activity "$pid")
	if [ "$s" != "$work" ] && [ $((now - since)) -lt "$SLOW_LIMIT" ]; then
		log "$what: quiet for $((now - since))s but still doing I/O or using CPU: slow, not hung (limit ${SLOW_LIMIT}s)"
		work=$s work_at=$now
		return 1
	fi
}

wedged=0
# kill_hung DIR PID: a ./check that stopped moving: the state to DIR/hang, then the kill. Fails
# (and marks the machine wedged) when tasks stay behind in D state.
kill_hung() {
	local dir=$1 pid=$2
	dump_hang "$dir/hang"
	stop_check "$pid" && return 0
	bounded 20 ps -eo pid,ppid,stat,wchan:32,args >"$dir/hang/ps-after-kill.txt" 2>&1
	wedged=1
	return 1
}

# run_check DRIVER/FS TEST DIR: one ./check of TEST with its evidence in DIR; sets verdict and
# note.
run_check() {
	local what=$1 t=$2 dir=$3 pid start rc=0 splat base=$FST/results/$2 f
	mkdir -p "$dir"
	rm -rf "$FST/results"
	dmesg -C
	start=$(date +%s)
	note=""
	# Its own session, so that a hung test can be killed with everything it started; output to
	# a file, not a pipe (a task in D state holding a pipe open would block the reader).
	(cd "$FST" && exec setsid "${SESSION_KEYRING[@]}" ./check "$t" >"$dir/check.out" 2>&1 </dev/null) &
	pid=$!
	local work work_at=$start
	work=$(activity "$pid")
	while kill -0 "$pid" 2>/dev/null; do
		if overdue "$pid" "$start" "$what: $t"; then
			log "$what: $t has not finished after $(($(date +%s) - start))s: dumping state to $dir/hang"
			rc=124
			note="timed out after $(($(date +%s) - start))s (hung? dumps in results/fstests/${dir#"$RES"/}/hang)"
			kill_hung "$dir" "$pid" || note="$note; tasks left in D state after kill"
			break
		fi
		sleep 1
	done
	[ $rc = 124 ] || { wait "$pid"; rc=$?; }
	dmesg >"$dir/dmesg"
	cp "$FST/results/check.log" "$dir/" 2>/dev/null
	for f in out.bad dmesg notrun; do cp "$base.$f" "$dir/" 2>/dev/null; done
	splat=$(grep -E "$SPLAT" "$dir/dmesg" | head -3)
	if [ $rc = 124 ]; then
		verdict=fail
	elif grep -q '^Failures:' "$dir/check.out"; then
		verdict=fail
		# "generic/013 - output mismatch (see ...)", "generic/013 _check_dmesg: ...".
		note=$(grep -m1 "^$t " "$dir/check.out" | cut -d' ' -f2- | sed 's/^ *//' | cut -c1-100)
	elif grep -q '^Not run:' "$dir/check.out"; then
		# (./check also says "Passed all 1 tests" for a test that did not run.)
		verdict=notrun
		note=$(head -1 "$base.notrun" 2>/dev/null | cut -c1-100)
	elif grep -qE '^Passed all [1-9]' "$dir/check.out"; then
		verdict=pass
	else
		verdict=fail
		note="no verdict from ./check (rc=$rc): $(tail -1 "$dir/check.out" | cut -c1-80)"
	fi
	if [ -n "$splat" ] && [ $rc != 124 ]; then
		verdict=fail
		note="kernel log: $(echo "$splat" | head -1 | cut -c1-80)${note:+; $note}"
	fi
	[ $verdict != fail ] || cp "$base.full" "$dir/" 2>/dev/null
}

# run_test DRIVER FS TEST TEST_DEV SCRATCH_DEV: the test's ITER runs of ./check, each with its
# own time limit (evidence in <test>/, or <test>/<n>/ for several), up to the first that does not
# pass; one verdict line with the counters' growth over all of them.
run_test() {
	local drv=$1 fs=$2 t=$3 tdev=$4 sdev=$5
	local dir=$RES/$drv-$fs/${t//\//-} start secs verdict note it idir
	mkdir -p "$dir"
	echo "$t	$fs	$drv	$(date +%s)" >"$RES/current"
	counters "$dir/counters.before" "$tdev" "$sdev"
	start=$(date +%s)
	for ((it = 1; it <= ITER; it++)); do
		idir=$dir
		[ "$ITER" = 1 ] || idir=$dir/$it
		log "$drv/$fs: ./check $t$([ "$ITER" = 1 ] || echo " (run $it of $ITER)")"
		run_check "$drv/$fs" "$t" "$idir"
		[ "$verdict" = pass ] || break
	done
	secs=$(($(date +%s) - start))
	if [ "$ITER" != 1 ]; then
		if [ "$verdict" = pass ]; then note="$ITER iterations"; else note="iteration $it of $ITER${note:+: $note}"; fi
	fi
	counters "$dir/counters.after" "$tdev" "$sdev"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$fs" "$drv" "$verdict" "$secs" \
		"$(delta "$dir/counters.before" "$dir/counters.after" nowait_completions)" \
		"$(delta "$dir/counters.before" "$dir/counters.after" worker_submissions)" \
		"$(delta "$dir/counters.before" "$dir/counters.after" nowait_eagain)" \
		"${note:-}" >>"$RES/verdicts.tsv"
	rm -f "$RES/current"
	log "$drv/$fs: $t: $verdict (${secs}s)${note:+: $note}"
}

# batch_verdict T LINE: the verdict and note of test T from its line in ./check's output
# ("T 3s ...  4s" or "T  4s" passed, "T [not run] why", "T - output mismatch ...",
# "T [failed, ...]", "T _check_dmesg: ..."); fails while T has no line or is still running
# (its name alone).
batch_verdict() {
	local t=$1 line=$2 rest
	rest=$(echo "${line#"$t"}" | sed 's/^ *//; s/ *$//')
	[ -n "$line" ] && [ -n "$rest" ] || return 1
	case "$rest" in
	*"[not run]"* | *"[expunged]"*) verdict=notrun note=$(echo "$rest" | sed 's/^\[[a-z ]*\] *//' | cut -c1-100) ;;
	*"output mismatch"* | *"[failed"* | *_check_*) verdict=fail note=$(echo "$rest" | cut -c1-100) ;;
	*[0-9]s) verdict=pass note="" ;;
	*) return 1 ;;
	esac
}

# record_batch_verdict DRIVER FS DIR T: appends T's verdict line (set by batch_verdict).
record_batch_verdict() {
	local drv=$1 fs=$2 dir=$3 t=$4 line secs f
	line=$(grep -E "^$t( |\$)" "$dir/check.out" | tail -1)
	secs=$(echo "$line" | grep -oE '[0-9]+s$' | tr -d s)
	if [ "$verdict" = fail ]; then
		for f in out.bad dmesg full; do cp "$FST/results/$t.$f" "$dir/" 2>/dev/null; done
	fi
	printf '%s\t%s\t%s\t%s\t%s\t-\t-\t-\t%s\n' "$t" "$fs" "$drv" "$verdict" "${secs:--}" \
		"${note:-}" >>"$RES/verdicts.tsv"
	log "$drv/$fs: $t: $verdict${note:+: $note}"
}

# run_batch DRIVER FS TEST_DEV SCRATCH_DEV TEST...: one ./check of several tests, which pays
# ./check's own set-up (a scratch mkfs, mounts: 40-50 s under TCG) once for all of them. Each
# verdict is recorded as soon as ./check prints it (a VM killed at its deadline keeps them). A
# test whose output has not moved for FSTESTS_TIMEOUT seconds counts as hung (dump, kill;
# verdict fail) and the caller runs the rest in a new batch. The counters cover the batch (in
# its directory, not per test). Sets `left` to the tests not reached.
run_batch() {
	local drv=$1 fs=$2 tdev=$3 sdev=$4
	shift 4
	local dir=$RES/$drv-$fs/batch-$(date +%s) pid start last size s t line splat tests=("$@")
	local done_n=0 hung=0
	mkdir -p "$dir"
	rm -rf "$FST/results"
	dmesg -C
	printf '%s\n' "$@" >"$dir/tests"
	counters "$dir/counters.before" "$tdev" "$sdev"
	log "$drv/$fs: ./check of $# tests ($1 .. ${!#})"
	# --exact-order: in the batch's order, which report_done assumes (./check sorts otherwise).
	(cd "$FST" && exec setsid "${SESSION_KEYRING[@]}" ./check --exact-order "$@" >"$dir/check.out" 2>&1 </dev/null) &
	pid=$!
	start=$(date +%s) last=$start size=0
	local work work_at=$start
	work=$(activity "$pid")
	# report_done: records the verdicts printed since the last call, in the batch's order (a
	# test's line is complete once the next test has started or the run has ended).
	report_done() {
		while [ "$done_n" -lt ${#tests[@]} ]; do
			t=${tests[$done_n]}
			line=$(grep -E "^$t( |\$)" "$dir/check.out" | tail -1)
			batch_verdict "$t" "$line" || return 0
			record_batch_verdict "$drv" "$fs" "$dir" "$t"
			done_n=$((done_n + 1))
		done
	}
	while kill -0 "$pid" 2>/dev/null; do
		s=$(stat -c %s "$dir/check.out" 2>/dev/null || echo 0)
		if [ "$s" != "$size" ]; then
			size=$s last=$(date +%s)
			report_done
			[ "$done_n" -ge ${#tests[@]} ] ||
				echo "${tests[$done_n]}	$fs	$drv	$(date +%s)" >"$RES/current"
		fi
		if overdue "$pid" "$last" "$drv/$fs: ${tests[$done_n]:-the batch}"; then
			log "$drv/$fs: ${tests[$done_n]:-the batch} shows no progress for $(($(date +%s) - last))s: dumping state to $dir/hang"
			dump_hang "$dir/hang"
			# Output during the dump: the test ended or moved on meanwhile, it was slow.
			s=$(stat -c %s "$dir/check.out" 2>/dev/null || echo 0)
			if [ "$s" != "$size" ]; then
				log "$drv/$fs: output moved during the dump: slow, not hung; going on"
				continue
			fi
			hung=1
			stop_check "$pid" || {
				bounded 20 ps -eo pid,ppid,stat,wchan:32,args >"$dir/hang/ps-after-kill.txt" 2>&1
				wedged=1
			}
			break
		fi
		sleep 1
	done
	[ "$hung" = 1 ] || wait "$pid"
	dmesg >"$dir/dmesg"
	counters "$dir/counters.after" "$tdev" "$sdev"
	cp "$FST/results/check.log" "$dir/" 2>/dev/null
	report_done
	if [ "$hung" = 1 ] && [ "$done_n" -lt ${#tests[@]} ]; then
		verdict=fail note="no progress for ${LIMIT}s (hung? dumps in results/fstests/${dir#"$RES"/}/hang)"
		[ "$wedged" = 0 ] || note="$note; tasks left in D state after kill"
		record_batch_verdict "$drv" "$fs" "$dir" "${tests[$done_n]}"
		done_n=$((done_n + 1))
	fi
	left=("${tests[@]:$done_n}")
	rm -f "$RES/current"
	# fstests checks each test's kernel log itself (_check_dmesg); what it does not look for
	# (hung-task reports) fails the batch as a whole.
	# (A dump clears the kernel log: what it held before is in hang/dmesg-before.txt.)
	splat=$(cat "$dir/hang/dmesg-before.txt" "$dir/dmesg" 2>/dev/null | grep -E "$SPLAT" | head -1)
	if [ -n "$splat" ]; then
		printf '%s\t%s\t%s\tfail\t%s\t-\t-\t-\tkernel log: %s\n' "batch:$1" "$fs" "$drv" \
			"$(($(date +%s) - start))" "$(echo "$splat" | cut -c1-80)" >>"$RES/verdicts.tsv"
	fi
	log "$drv/$fs: batch done in $(($(date +%s) - start))s; nowait_completions +$(delta "$dir/counters.before" "$dir/counters.after" nowait_completions), worker_submissions +$(delta "$dir/counters.before" "$dir/counters.after" worker_submissions)"
}

# mkfs_dev FS DEV: the file system under test (fstests expects TEST_DEV made already).
mkfs_dev() {
	case "$1" in
	xfs) mkfs.xfs -q -f "$2" ;;
	ext4) mkfs.ext4 -q -F "$2" ;;
	btrfs) mkfs.btrfs -q -f "$2" ;;
	*) mkfs -t "$1" "$2" ;;
	esac >/dev/null
}

# teardown TEST_DEV SCRATCH_DEV: unmount what fstests left mounted, detach both.
teardown() {
	local m ok=0
	for m in "$W/test" "$W/scratch"; do
		! mountpoint -q "$m" || bounded 60 umount "$m" || bounded 10 umount -l "$m" || ok=1
	done
	for m in "$@"; do
		[ -n "$m" ] || continue
		bounded 60 losetup -d "$m" || ok=1
	done
	udevadm settle -t 10 2>/dev/null || true
	return $ok
}

# fs_list FS: the tests for file system FS: the host's expansion of FSTESTS_LIST (list-FS, groups
# expanded), or FSTESTS_LIST itself.
fs_list() {
	if [ -f "$RES/list-$1" ]; then cat "$RES/list-$1"; else echo $LIST; fi
}

started=$(date +%s)
for drv in $DRIVERS; do
	[ $wedged = 0 ] || break
	if ! load_driver "$drv"; then
		log "error: loading $drv failed"
		for fs in $FSLIST; do for t in $(fs_list "$fs"); do
			printf '%s\t%s\t%s\tfail\t0\t-\t-\t-\tloading the driver failed\n' "$t" "$fs" "$drv" >>"$RES/verdicts.tsv"
		done; done
		continue
	fi
	log "$drv loaded"
	for fs in $FSLIST; do
		[ $wedged = 0 ] || break
		tdev="" sdev=""
		rm -f "$W/backing/test.img" "$W/backing/scratch.img"
		truncate -s "$FILE_SIZE" "$W/backing/test.img" "$W/backing/scratch.img"
		tdev=$(losetup -f --show --direct-io="$DIO" "$W/backing/test.img") &&
			sdev=$(losetup -f --show --direct-io="$DIO" "$W/backing/scratch.img") &&
			udevadm settle -t 10 2>/dev/null
		if [ -z "$sdev" ] || ! mkfs_dev "$fs" "$tdev"; then
			log "error: $drv/$fs: attaching the backing files or mkfs.$fs failed"
			for t in $(fs_list "$fs"); do
				printf '%s\t%s\t%s\tfail\t0\t-\t-\t-\tlosetup or mkfs.%s failed\n' "$t" "$fs" "$drv" "$fs" >>"$RES/verdicts.tsv"
			done
			teardown "$tdev" "$sdev" || wedged=1
			continue
		fi
		log "$drv/$fs: TEST_DEV=$tdev SCRATCH_DEV=$sdev" \
			"(dio=$(cat "/sys/block/$(basename "$tdev")/loop/dio")/$(cat "/sys/block/$(basename "$sdev")/loop/dio"))"
		cat >"$FST/local.config" <<-EOF
			export FSTYP=$fs
			export TEST_DEV=$tdev
			export TEST_DIR=$W/test
			export SCRATCH_DEV=$sdev
			export SCRATCH_MNT=$W/scratch
		EOF
		# The runs without a verdict yet (the host's FSTESTS_RESUME keeps earlier ones); one awk
		# for the list (a fork costs tens of ms under TCG).
		touch "$RES/verdicts.tsv"
		mapfile -t todo < <(fs_list "$fs" | tr ' ' '\n' | awk -v fs="$fs" -v drv="$drv" \
			-v v="$RES/verdicts.tsv" 'BEGIN { while ((getline l < v) > 0) {
				split(l, f, "\t"); if (f[2] == fs && f[3] == drv) done[f[1]] = 1 } }
			NF && !($1 in done)')
		while [ ${#todo[@]} -gt 0 ] && [ $wedged = 0 ]; do
			if [ "$BUDGET" != 0 ] && [ $(($(date +%s) - started)) -ge "$BUDGET" ]; then
				log "$drv/$fs: FSTESTS_BUDGET (${BUDGET}s) spent: no further test"
				break
			fi
			if [ "$BATCH" -le 1 ] || [ "$ITER" != 1 ]; then
				run_test "$drv" "$fs" "${todo[0]}" "$tdev" "$sdev"
				todo=("${todo[@]:1}")
				continue
			fi
			run_batch "$drv" "$fs" "$tdev" "$sdev" "${todo[@]:0:$BATCH}"
			if [ ${#left[@]} = "$(printf '%s\n' "${todo[@]:0:$BATCH}" | wc -l)" ]; then
				log "$drv/$fs: the batch reached no test (see its check.out): stopping this file system"
				break
			fi
			todo=("${left[@]}" "${todo[@]:$BATCH}")
		done
		[ $wedged = 1 ] || teardown "$tdev" "$sdev" || {
			log "error: $drv/$fs: the loop devices cannot be detached"
			wedged=1
		}
	done
	[ $wedged = 1 ] || unload_drivers || wedged=1
done
rm -f "$MODPROBE_CONF"
if [ $wedged = 1 ]; then
	log "stopped: the machine is wedged after a hang (tasks in D state or devices that cannot be detached)"
	# The guest's shutdown syncs, which blocks for ever on a wedged device: power off without
	# it shortly after this script has returned its status.
	setsid bash -c 'sleep 15; echo o >/proc/sysrq-trigger' </dev/null >/dev/null 2>&1 &
fi
# Verdicts: the host prints the table. Non-zero on any failure, or if the run stopped early.
[ $wedged = 0 ] && ! awk -F'\t' '$4 == "fail" { f = 1 } END { exit !f }' "$RES/verdicts.tsv" 2>/dev/null
