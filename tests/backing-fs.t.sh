# shellcheck shell=bash
# The backing file systems (issue 15): the data path on backing files on xfs, ext4, btrfs
# and tmpfs, each in direct-I/O and in buffered mode, and on xfs, ext4 and btrfs made on another
# rust_loop device (loop on a file system on loop). Each case: fio with crc32c verification,
# libaio at depth 16 and psync (so that both queue_rq's NOWAIT path and the worker get requests),
# then the counters that show which path served them: in direct-I/O mode, NOWAIT completions
# on the file systems `nowait_fs` names (xfs, ext4) and none on the others (btrfs, tmpfs: the
# worker submits every request, still direct); in buffered mode, none anywhere.

# (TEST_DRIVER=loop: the same cases on loop.c, fio and loop/dio only.)

# backing_io DEV: verified random I/O at depth, then psync reads one at a time
backing_io() {
	local dev=$1
	fio_verify "$dev" --iodepth=16 --rw=randrw --bssplit=4k/50:64k/30:256k/20 --size=32M
	fio --name=p --filename="$dev" --direct=1 --ioengine=psync --rw=randread --bs=4k --size=32M \
		--io_size=4M --output=/dev/null || fail "psync reads failed on $dev"
}

# backing_check DEV FS MODE: the counters of DEV after backing_io, for backing FS in MODE (on|off)
backing_check() {
	local dev=$1 fs=$2 mode=$3 n dio nowait worker
	n=$(basename "$dev")
	dio=$(cat "/sys/block/$n/loop/dio")
	is_rust || { log "$fs, direct-io=$mode: loop/dio $dio"; return 0; }
	nowait=$(stat_of "$dev" nowait_completions)
	worker=$(stat_of "$dev" worker_submissions)
	log "$fs, direct-io=$mode: loop/dio $dio, rust_loop/nowait $(knob_of "$dev" nowait), nowait_completions $nowait, nowait_eagain $(stat_of "$dev" nowait_eagain), worker_submissions $worker, dio_fallbacks $(stat_of "$dev" dio_fallbacks)"
	[ "$worker" -gt 0 ] || fail "the worker served no request"
	if [ "$mode" = off ]; then
		assert_eq "$dio" 0 "loop/dio in buffered mode"
		assert_file "/sys/block/$n/rust_loop/nowait" 0
		assert_eq "$nowait" 0 "NOWAIT completions in buffered mode"
		return 0
	fi
	assert_eq "$dio" 1 "loop/dio with --direct-io=on on $fs"
	case $fs in
	xfs | ext4)
		assert_file "/sys/block/$n/rust_loop/nowait" 1
		[ "$nowait" -gt 0 ] || fail "no NOWAIT completion on $fs"
		;;
	*)
		assert_file "/sys/block/$n/rust_loop/nowait" 0
		assert_eq "$nowait" 0 "NOWAIT completions on $fs (not in nowait_fs)"
		;;
	esac
}

# backing_case FS MODE: a backing file on FS (the scratch disk, or tmpfs)
backing_case() {
	local fs=$1 mode=$2 dev
	load_rust_loop
	trap 'cleanup_loops; scratch_umount' EXIT
	scratch_fs "$fs"
	truncate -s 64M "$SCRATCH/img"
	dev=$(losetup -f --show --direct-io="$mode" "$SCRATCH/img") || fail "losetup on $fs failed"
	udevadm settle 2>/dev/null || true
	backing_io "$dev"
	backing_check "$dev" "$fs" "$mode"
	losetup -d "$dev"
}

# backing_stacked FS: the backing file on FS made on another rust_loop device (over a file on
# XFS), both in direct-I/O mode
backing_stacked() {
	local fs=$1 lower upper
	load_rust_loop
	trap 'cleanup_loops; scratch_umount' EXIT
	scratch_fs xfs
	truncate -s 512M "$SCRATCH/lower.img"
	lower=$(losetup -f --show --direct-io=on "$SCRATCH/lower.img") || fail "losetup lower failed"
	case $fs in
	xfs) mkfs.xfs -q -f "$lower" ;;
	ext4) mkfs.ext4 -q -F "$lower" ;;
	btrfs) mkfs.btrfs -q -f "$lower" >/dev/null ;;
	esac || fail "mkfs.$fs on $lower failed"
	mkdir -p "$T/upper"
	mount "$lower" "$T/upper" || fail "mounting $fs on $lower failed"
	truncate -s 64M "$T/upper/img"
	upper=$(losetup -f --show --direct-io=on "$T/upper/img") || fail "losetup upper failed"
	udevadm settle 2>/dev/null || true
	backing_io "$upper"
	backing_check "$upper" "$fs" on
	is_rust && log "lower device: nowait_completions $(stat_of "$lower" nowait_completions), worker_submissions $(stat_of "$lower" worker_submissions), nowait_skip_nested $(stat_of "$lower" nowait_skip_nested)"
	losetup -d "$upper"
	wait_for 10 umount "$T/upper" || fail "umount $T/upper failed"
	losetup -d "$lower"
}

t_xfs_dio() { backing_case xfs on; }
t_xfs_buffered() { backing_case xfs off; }
t_ext4_dio() { backing_case ext4 on; }
t_ext4_buffered() { backing_case ext4 off; }
t_btrfs_dio() { backing_case btrfs on; }
t_btrfs_buffered() { backing_case btrfs off; }
t_tmpfs_dio() { backing_case tmpfs on; }
t_tmpfs_buffered() { backing_case tmpfs off; }
t_stacked_xfs() { backing_stacked xfs; }
t_stacked_ext4() { backing_stacked ext4; }
t_stacked_btrfs() { backing_stacked btrfs; }
