# shellcheck shell=bash
# Deadlock regressions of the direct-I/O path (issue 20): a file system on a rust_loop device
# over a file on XFS, under many O_DSYNC aio writers, as fstests' generic/113 (aio-stress -O -S).
#
# The cycle these caught: a writer that finds every tag of the loop device taken runs the queue
# itself before it sleeps (blk_mq_get_tag), inside its submit_bio, where the bios the backing
# file system submitted from queue_rq were only queued on current->bio_list; the writer then
# slept holding them. The worker meanwhile ran a sub-block write of the upper file system's
# log, which XFS makes wait for every direct I/O in flight on the backing file
# (inode_dio_wait), including the one whose bios never left that list, and the requests behind
# it held the tags the writer waited for. queue_rq now sends such bios at once
# (nowait_undeferred counts the submissions made from there).

# aio_stress_rounds FS_ON_TOP ROUNDS: a file system (xfs with 512-byte sectors, or ext4) on a
# direct-I/O rust_loop device over a sparse 3 GiB file on a 4 KiB-block XFS, then ROUNDS times
# generic/113's four aio-stress runs (tests/aio-stress, built by scripts/check.sh from the
# fstests snapshot): buffered, 20 threads, 20 threads O_DIRECT, 20 threads O_DIRECT|O_SYNC (a
# log force per write: the upper file system's log writes are sub-block writes to the backing
# file). Each run must finish within its limit; a hang becomes a failure with the blocked
# tasks, the devices' blk-mq state and the counters in the test's output.
aio_stress_rounds() {
	local top=$1 rounds=$2 dev n m=$T/mnt round run files k
	local aio=$ROOT/tests/aio-stress
	# scripts/check.sh builds it from the fstests source; without that source it says why.
	[ ! -f "$aio.missing" ] || skip "no aio-stress: $(head -n 1 "$aio.missing")"
	[ -x "$aio" ] || fail "$aio missing (scripts/check.sh builds it)"
	load_rust_loop
	scratch_fs xfs
	mkimg "$SCRATCH/img" 3G
	dev=$(attach "$SCRATCH/img" --direct-io=on)
	n=$(basename "$dev")
	assert_sys "$dev" loop/dio 1
	case $top in
	xfs) mkfs.xfs -q -f -s size=512 "$dev" ;;
	ext4) mkfs.ext4 -q -F "$dev" ;;
	esac
	mkdir -p "$m"
	mount "$dev" "$m"
	for round in $(seq "$rounds"); do
		for run in "1 -s 120m" "20 -s 10m" "20 -s 10m -O" "20 -s 10m -O -S"; do
			# shellcheck disable=SC2086 # word splitting wanted
			set -- $run
			files=$m/as.1
			for ((k = 2; k <= $1; k++)); do files="$files $m/as.$k"; done
			# shellcheck disable=SC2046,SC2086 # one argument per option and file
			bounded_dump $((180 * ${TEST_SLOWDOWN:-1})) "$dev vda" "$aio" $([ "$1" -gt 1 ] && echo "-t $1") "${@:2}" \
				-I 1000 $files >/dev/null || fail "aio-stress -t $1 ${*:2} failed (round $round)"
			# shellcheck disable=SC2086
			rm -f $files
		done
	done
	log "counters: $(for c in nowait_completions nowait_eagain nowait_undeferred worker_submissions; do
		printf '%s=%s ' $c "$(cat /sys/kernel/debug/rust_loop/$n/$c 2>/dev/null)"; done)"
	bounded_dump $((120 * ${TEST_SLOWDOWN:-1})) "$dev" umount "$m" || fail "umount failed"
	case $top in
	xfs) xfs_repair -n "$dev" >/dev/null 2>&1 || fail "XFS on $dev damaged" ;;
	ext4) e2fsck -fn "$dev" >/dev/null || fail "ext4 on $dev damaged" ;;
	esac
	losetup -d "$dev"
}

t_dio_aio_stress_xfs_512_on_xfs() { aio_stress_rounds xfs 3; }
timeout_t_dio_aio_stress_xfs_512_on_xfs() { echo $((900 * ${TEST_SLOWDOWN:-1})); }
t_dio_aio_stress_ext4_on_xfs() { aio_stress_rounds ext4 1; }
timeout_t_dio_aio_stress_ext4_on_xfs() { echo $((600 * ${TEST_SLOWDOWN:-1})); }
