# shellcheck shell=bash
# Tests that wedge a loop device when they fail (a request the driver never completes leaves the
# device bound, its users in D state and the module pinned, so every later test would fail too).
# This file sorts after the core-* files so that such a failure takes down nothing but itself
# (and module.t.sh, which needs the module unloadable).

# A flush (fsync, O_DSYNC) on a device with an offset completes, and the data is in the file.
t_hazard_flush_with_offset() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	local dev
	dev=$(attach "$T/img" -o 4096)
	dd if=/dev/urandom of="$T/chunk" bs=4k count=4 status=none
	bounded 30 dd if="$T/chunk" of="$dev" bs=4k conv=fsync status=none || fail "dd conv=fsync failed"
	bounded 30 dd if="$T/chunk" of="$dev" bs=4k seek=8 oflag=dsync status=none || fail "dd oflag=dsync failed"
	cmp -n 16384 "$T/chunk" "$T/img" 0 4096 || fail "fsynced data not in the file"
	cmp -n 16384 "$T/chunk" "$T/img" 0 $((4096 + 8 * 4096)) || fail "dsync data not in the file"
	bounded 30 sync
	detach "$dev"
}


# ext4 on a device with an offset (a partition image): journal commits are flushes.
t_hazard_ext4_with_offset() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 65M
	local dev
	dev=$(attach "$T/img" -o $((1 << 20)))
	bounded 120 mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 failed"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	head -c $((4 << 20)) /dev/urandom >"$T/mnt/f"
	sha256sum <"$T/mnt/f" >"$T/sum"
	bounded 60 sync || fail "sync failed"
	bounded 60 umount "$T/mnt" || fail "umount failed"
	bounded 120 e2fsck -fn "$dev" >"$T/fsck" 2>&1 || fail "e2fsck -fn: $(cat "$T/fsck")"
	detach "$dev"
	# The file system starts 1 MiB into the image.
	dev=$(attach "$T/img" -o $((1 << 20)) -r)
	mount -o ro "$dev" "$T/mnt"
	assert_eq "$(sha256sum <"$T/mnt/f")" "$(cat "$T/sum")" "file content"
	umount "$T/mnt"
	detach "$dev"
}
