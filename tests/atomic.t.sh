# shellcheck shell=bash
# Atomic (untorn) writes (issue 55). A backing file or device may report atomic-write limits
# (statx STATX_WRITE_ATOMIC: XFS files through copy-on-write, ext4 files and block devices
# where the device below has them). rust_loop, as loop.c, advertises none: the kernels of the
# matrix take an atomic write only from a single-segment user buffer (generic_atomic_write_valid:
# iter_is_ubuf), never from the bvec iterator a loop device writes its requests with, so the
# device could not pass one down whole. These tests hold that no atomic write is accepted by a
# loop device, whatever its backing reports, and that the reason still holds; both pass with
# TEST_DRIVER=loop. tests/atomic_io.py does the statx and RWF_ATOMIC calls.

aio() { python3 "$ROOT/tests/atomic_io.py" "$@"; }

# atomic_limits_of DEV: "unit_min unit_max max" of the device's queue in sysfs
atomic_limits_of() {
	local q f out=
	q=/sys/block/$(basename "$1")/queue
	for f in unit_min_bytes unit_max_bytes max_bytes; do
		out+="${out:+ }$(cat "$q/atomic_write_$f")"
	done
	echo "$out"
}

# assert_no_atomic DEV WHAT: the loop device advertises no atomic writes (sysfs, statx) and an
# RWF_ATOMIC write to it is refused with EOPNOTSUPP (a block device without atomic-write support)
# before anything is written.
assert_no_atomic() {
	local dev=$1 what=$2 before
	assert_eq "$(atomic_limits_of "$dev")" "0 0 0" "$what: sysfs atomic_write_unit_min/unit_max/max_bytes"
	assert_eq "$(aio statx "$dev")" "0 0 0" "$what: statx(STATX_WRITE_ATOMIC) of $dev"
	before=$(region_sum "$dev" 0 65536)
	assert_eq "$(aio pwrite "$dev" 0 4096 1)" EOPNOTSUPP "$what: RWF_ATOMIC 4 KiB write at 0"
	assert_eq "$(aio pwrite "$dev" 0 65536 2)" EOPNOTSUPP "$what: RWF_ATOMIC 64 KiB write at 0"
	assert_eq "$(region_sum "$dev" 0 65536)" "$before" "$what: data after the refused writes"
}

# assert_reports_atomic PATH: statx of PATH reports atomic-write limits (the precondition of a
# test; a kernel whose file system or device reports none skips it)
assert_reports_atomic() {
	local l
	l=$(aio statx "$1")
	log "$1: atomic_write_unit_min/unit_max/segments_max $l"
	[ "${l%% *}" != 0 ] || skip "$1 reports no atomic-write limits on this kernel"
}

# An XFS file reports atomic writes of 4 KiB to 2 MiB (copy-on-write); a loop device on it,
# in direct-I/O mode or buffered, advertises none and refuses RWF_ATOMIC.
t_atomic_none_on_xfs_file() {
	load_rust_loop
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	assert_reports_atomic "$SCRATCH/img"
	local dev
	dev=$(attach "$SCRATCH/img" --direct-io=on)
	assert_no_atomic "$dev" "direct I/O"
	losetup --direct-io=off "$dev"
	assert_no_atomic "$dev" "buffered"
	detach "$dev"
}

# Why none: the backing file takes an atomic write from a single-segment buffer only. The same
# aligned 4 KiB RWF_ATOMIC write to the XFS file succeeds from one iovec and is refused with
# EINVAL from two (the loop device's bvec iterator is refused the same way). Should a kernel of
# the matrix take the second, rust_loop can pass REQ_ATOMIC down as IOCB_ATOMIC (issue 55).
t_atomic_backing_takes_single_segment_only() {
	scratch_fs xfs
	fallocate -l 64M "$SCRATCH/img"
	assert_reports_atomic "$SCRATCH/img"
	assert_eq "$(aio pwrite "$SCRATCH/img" 0 4096 3)" ok "RWF_ATOMIC from one iovec"
	cmp <(aio pattern 4096 3) <(head -c 4096 "$SCRATCH/img") || fail "the atomic write's data"
	assert_eq "$(aio pwrite "$SCRATCH/img" 8192 8192 4 2)" EINVAL \
		"RWF_ATOMIC from two iovecs (the kernel now takes multi-segment atomic writes: issue 55 can land)"
}

# sdebug_disk: the disk of scsi_debug (loaded with the given parameters)
sdebug_disk() {
	local d
	modprobe scsi_debug "$@" || skip "no scsi_debug module"
	udevadm settle 2>/dev/null || true
	for d in /sys/bus/pseudo/drivers/scsi_debug/adapter*/host*/target*/*/block/*; do
		[ -e "$d" ] && { echo "/dev/$(basename "$d")"; return 0; }
	done
	fail "scsi_debug has no disk"
}
sdebug_cleanup() {
	scratch_umount
	umount "$T/sdebug" 2>/dev/null || true
	losetup -D 2>/dev/null || true
	udevadm settle 2>/dev/null || true
	local _
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		[ -d /sys/module/scsi_debug ] || return 0
		rmmod scsi_debug 2>/dev/null && return 0
		sleep 0.3
	done
}

# A block device with atomic writes of its own (scsi_debug atomic_wr=1) and an ext4 file on it
# (ext4 does single-block atomic writes where the device can): both report limits and take an
# RWF_ATOMIC write; a loop device on either advertises none and refuses one.
t_atomic_none_on_atomic_block_device_and_ext4() {
	trap sdebug_cleanup EXIT
	load_rust_loop
	local sd dev
	sd=$(sdebug_disk atomic_wr=1 dev_size_mb=128)
	assert_reports_atomic "$sd"
	assert_eq "$(aio pwrite "$sd" 0 4096 5)" ok "RWF_ATOMIC on $sd"
	dev=$(attach "$sd" --direct-io=on)
	assert_no_atomic "$dev" "on $sd"
	detach "$dev"
	mkfs.ext4 -q -F -b 4096 "$sd" || fail "mkfs.ext4 on $sd"
	mkdir -p "$T/sdebug"
	mount "$sd" "$T/sdebug" || fail "mounting ext4 on $sd"
	fallocate -l 32M "$T/sdebug/img"
	assert_reports_atomic "$T/sdebug/img"
	dev=$(attach "$T/sdebug/img" --direct-io=on)
	assert_no_atomic "$dev" "on ext4 on $sd"
	detach "$dev"
	umount "$T/sdebug"
}
