# shellcheck shell=bash
# Crash consistency below the loop device (docs/testing.md "Crash consistency"): what a file
# system on a loop device was told is durable survives a power cut under the file system that
# holds the backing file, on rust_loop as on loop.c. tests/crash/crash.py runs one stack (a
# driver, a mode, a backing and an upper file system); each test here runs a driver's matrix,
# the runs side by side in slots of the scratch disk, and tests/crash/report.py checks the
# figures (results/tests/crash/*.json):
#
# - flakey stack, direct I/O and buffered, XFS or ext4 under ext4 or XFS: CRASH_CUTS cuts
#   (dm-flakey drops every write from a random moment) and CRASH_POINTS points replayed from
#   dm-log-writes' log, each checked: the backing file system mounts, every object acknowledged
#   durable is there with its checksum, the upper file system passes e2fsck -fn / xfs_repair -n;
# - shutdown stack (the backing file system on null_blk, which takes NOWAIT bios: rust_loop's
#   NOWAIT path), direct I/O: CRASH_SHUTDOWN_CUTS cuts by FS_IOC_SHUTDOWN of the backing file
#   system, checked the same way.
#
#   CRASH_MATRIX          short: 3 runs per driver; full: 10 (make crashcheck)   default short
#   CRASH_CUTS            cuts per flakey run (make crashcheck: 25)             default 2
#   CRASH_POINTS          replayed points per flakey run (make crashcheck: 25)  default 3
#   CRASH_SHUTDOWN_CUTS   cuts per shutdown run (make crashcheck: 25)           default 2
#   CRASH_LOG_MB          log region of a flakey run (make crashcheck: 512)     default 160
#   CRASH_SEGMENT         longest stretch of workload before a cut (s; crashcheck: 2)  default 2.5
#   CRASH_SEED            seed of the first run (the others follow); printed    default random
#
# The tools come from fstests (scripts/third_party/crash-tools.sh: replay-log, fsstress in tests/crash/bin).

CRASH_BIN=$ROOT/tests/crash/bin
CRASH_RESULTS=${RESULTS:-$ROOT/results/tests}/crash
CRASH_CG=/sys/fs/cgroup/rust-loop-crash

# The runs of a driver: stack mode backing upper. The short matrix (the suite's default) has
# each mode, each file system above and below and the shutdown stack once; the full one
# (make crashcheck) every mode, backing and upper file system on the flakey stack (so each
# mode and upper file system twice), and the shutdown stack with each upper file system. Ten
# runs side by side keep the guest's CPUs busy where six left a third of their time idle
# (each run waits on its mounts, kernel threads and I/O in turn).
crash_matrix() {
	local mode backing upper
	case "${CRASH_MATRIX:-short}" in
	short) printf '%s\n' "flakey dio xfs ext4" "flakey buffered ext4 xfs" "shutdown dio ext4 xfs" ;;
	full)
		for mode in dio buffered; do
			for backing in xfs ext4; do
				for upper in ext4 xfs; do
					echo "flakey $mode $backing $upper"
				done
			done
		done
		printf '%s\n' "shutdown dio xfs ext4" "shutdown dio ext4 xfs" ;;
	*) fail "CRASH_MATRIX must be short or full" ;;
	esac
}

# Per run, more than the runs take under TCG on a loaded 2-core host.
crash_timeout() {
	echo $(((600 + ${CRASH_CUTS:-2} * 25 + ${CRASH_POINTS:-3} * 15 + ${CRASH_SHUTDOWN_CUTS:-2} * 25) * ${TEST_SLOWDOWN:-1}))
}
timeout_t_crash_loop_c() { crash_timeout; }
timeout_t_crash_rust_loop() { crash_timeout; }

crash_prereqs() {
	need_config CONFIG_DM_LOG_WRITES CONFIG_DM_FLAKEY CONFIG_DM_SNAPSHOT CONFIG_BLK_DEV_RAM \
		CONFIG_BLK_DEV_NULL_BLK CONFIG_CONFIGFS_FS
	[ ! -f "$ROOT/tests/crash/bin.missing" ] || skip "no fstests source for replay-log: $(head -n 1 "$ROOT/tests/crash/bin.missing")"
	[ -x "$CRASH_BIN/replay-log" ] && [ -x "$CRASH_BIN/fsstress" ] ||
		fail "tests/crash/bin/replay-log or fsstress missing: run scripts/third_party/crash-tools.sh (scripts/check.sh does)"
	[ -b "${SCRATCH_DEV:-}" ] || fail "no scratch disk (SCRATCH_DEV=${SCRATCH_DEV:-unset})"
	# Started at every stretch of every run: from the guest's tmpfs, not over 9p.
	mkdir -p "$T/crash-bin" && cp "$CRASH_BIN/replay-log" "$CRASH_BIN/fsstress" "$T/crash-bin/" ||
		fail "copying the crash tools to $T failed"
	crash_devices_remove
	local m
	for m in dm-log-writes dm-flakey dm-snapshot; do
		modprobe "$m" || fail "modprobe $m failed"
	done
	# One RAM disk per run: the copy-on-write store of the snapshots the replayed points are
	# checked on.
	local runs
	runs=$(crash_matrix | wc -l)
	if [ -d /sys/module/brd ] && [ ! -b "/dev/ram$((runs - 1))" ]; then
		rmmod brd || fail "brd is loaded with fewer than $runs RAM disks and cannot be unloaded"
	fi
	modprobe brd rd_nr="$runs" rd_size=131072 || fail "modprobe brd failed"
	# The data regions: null_blk devices made through configfs (crash/crash.py: Run.regions).
	if [ -d /sys/module/null_blk ]; then
		rmmod null_blk || fail "null_blk is loaded and cannot be unloaded"
	fi
	modprobe null_blk nr_devices=0 || fail "modprobe null_blk failed"
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config ||
		fail "cannot mount configfs"
	# No udevd meanwhile (crash_cleanup restarts it): the runs bind, switch and clear devices
	# and make device-mapper devices several times a second, and udev's rules, probes and
	# dmsetup calls for their events took a seventh of the guest's CPU (perf); its probes also
	# hold devices open. The device nodes come from devtmpfs.
	udev_stop
	# fsstress runs in a child cgroup: its requests go to a per-cgroup worker.
	mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup || fail "cannot mount cgroup2"
	echo "+io +memory" >/sys/fs/cgroup/cgroup.subtree_control || fail "cannot enable the io and memory controllers"
	mkdir -p "$CRASH_CG"
	scratch_umount
}

# crash_driver DRIVER: every run of crash_matrix for DRIVER (loaded), side by side, each in its
# slot of the scratch disk; their figures in $CRASH_RESULTS/DRIVER-*.json.
crash_driver() {
	local driver=$1 slot=0 offset=0 need=0 stack mode backing upper pids=() names=() i rc=0
	local log_mb=${CRASH_LOG_MB:-160} seed=${CRASH_SEED:-$RANDOM}
	mkdir -p "$CRASH_RESULTS"
	rm -f "$CRASH_RESULTS/$driver"-*.json
	while read -r stack _ _ _; do
		need=$((need + $(crash_region "$stack" "$log_mb")))
	done < <(crash_matrix)
	[ $((need << 20)) -le "$(blockdev --getsize64 "$SCRATCH_DEV")" ] ||
		fail "the runs need $need MiB of scratch disk, $SCRATCH_DEV has $(($(blockdev --getsize64 "$SCRATCH_DEV") >> 20)) (SCRATCH_SIZE)"
	log "$driver: seed $seed, $(crash_matrix | wc -l) runs: ${CRASH_CUTS:-2} cuts and ${CRASH_POINTS:-3} replayed points per flakey run, ${CRASH_SHUTDOWN_CUTS:-2} cuts per shutdown run"
	while read -r stack mode backing upper; do
		local name="$driver-$stack-$mode-$backing-$upper" cuts=${CRASH_CUTS:-2}
		[ "$stack" = flakey ] || cuts=${CRASH_SHUTDOWN_CUTS:-2}
		python3 "$ROOT/tests/crash/crash.py" --driver "$driver" --stack "$stack" --mode "$mode" \
			--backing "$backing" --upper "$upper" --disk "$SCRATCH_DEV" --offset $((offset << 20)) \
			--log-mb "$log_mb" --slot "$slot" --cuts "$cuts" --points "${CRASH_POINTS:-3}" \
			--segment "${CRASH_SEGMENT:-2.5}" --seed $((seed + slot)) \
			--replay-log "$T/crash-bin/replay-log" --fsstress "$T/crash-bin/fsstress" \
			--cgroup "$CRASH_CG" --out "$CRASH_RESULTS/$name.json" >"$T/crash-$name.log" 2>&1 &
		pids+=($!)
		names+=("$name")
		offset=$((offset + $(crash_region "$stack" "$log_mb")))
		slot=$((slot + 1))
	done < <(crash_matrix)
	for i in "${!pids[@]}"; do
		if ! wait "${pids[$i]}"; then
			rc=1
			echo "--- ${names[$i]}:"
			tail -n 25 "$T/crash-${names[$i]}.log"
		fi
	done
	return $rc
}

# crash_region STACK LOG_MB: MiB of scratch disk a run takes.
crash_region() {
	python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import crash; print(crash.region_mib(sys.argv[2], int(sys.argv[3])))' \
		"$ROOT/tests/crash" "$1" "$2"
}

# The device-mapper and null_blk devices of runs that did not end cleanly. Without udev's
# synchronisation: udevd may be stopped, and dmsetup would wait for it for ever.
crash_devices_remove() {
	local d _
	# Twice: a device stacked on another goes first.
	for _ in 1 2; do
		for d in $(dmsetup ls 2>/dev/null | awk '$1 ~ /^crash[0-9]+-/ {print $1}'); do
			dmsetup remove --noudevsync "$d" 2>/dev/null || true
		done
	done
	for d in /sys/kernel/config/nullb/crash*; do
		[ -d "$d" ] || continue
		echo 0 >"$d/power" 2>/dev/null
		rmdir "$d" 2>/dev/null || true
	done
}

crash_cleanup() {
	cleanup_loops
	crash_devices_remove
	rmmod null_blk 2>/dev/null || true
	rmdir "$CRASH_CG" 2>/dev/null || true
	udev_restart
}

# crash_report DRIVER [report.py options]: the table of DRIVER's runs and the verdict (the runs
# must be crash_matrix's, each once).
crash_report() {
	local driver=$1
	shift
	crash_matrix | sed "s/^/$driver /" >"$T/crash-matrix"
	python3 "$ROOT/tests/crash/report.py" "$CRASH_RESULTS" --driver "$driver" \
		--cuts "${CRASH_CUTS:-2}" --points "${CRASH_POINTS:-3}" \
		--shutdown-cuts "${CRASH_SHUTDOWN_CUTS:-2}" --matrix "$T/crash-matrix" "$@"
}

# loop.c under the same runs: the reference. Any difference from it is a bug of rust_loop's.
t_crash_loop_c() {
	trap crash_cleanup EXIT
	crash_prereqs
	unload_loop_drivers
	modprobe --ignore-install loop || fail "modprobe loop.ko failed"
	local rc=0
	crash_driver loop || rc=1
	crash_report loop || fail "loop.c lost acknowledged writes or failed a check (above)"
	[ $rc = 0 ] || fail "a crash run failed (above)"
	unload_loop_drivers
}

# rust_loop under the same runs; its counters show which ways a write can end in the driver were
# taken, and the full matrix (make crashcheck) requires each (report.py --require-paths).
t_crash_rust_loop() {
	is_rust || skip "rust_loop's runs (TEST_DRIVER=loop: t_crash_loop_c runs loop.c's)"
	trap crash_cleanup EXIT
	crash_prereqs
	load_rust_loop
	local rc=0 paths=--paths
	[ "${CRASH_MATRIX:-short}" = short ] || paths=--require-paths
	crash_driver rust_loop || rc=1
	crash_report rust_loop "$paths" || fail "rust_loop lost acknowledged writes, failed a check or left a way a write ends untaken (above)"
	[ $rc = 0 ] || fail "a crash run failed (above)"
}
