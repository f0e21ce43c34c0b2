# shellcheck shell=bash
# File systems on loop devices: mkfs, mount, write, umount, fsck; online growth after losetup -c.

# fill_tree DIR: writes a few files (random content, assorted sizes) and records their sums
fill_tree() {
	local d=$1 i
	mkdir -p "$d/sub"
	for i in 1 2 3 4 5; do
		head -c $((i * 777777)) /dev/urandom >"$d/f$i"
		head -c $((i * 1000 + 1)) /dev/urandom >"$d/sub/s$i"
	done
	(cd "$d" && find . -type f | sort | xargs sha256sum) >"$T/sums"
}
check_tree() { (cd "$1" && sha256sum --quiet -c "$T/sums") || fail "file contents differ in $1"; }

t_fs_ext4() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 128M
	local dev
	dev=$(attach "$T/img")
	bounded 120 mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 failed"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	fill_tree "$T/mnt"
	bounded 60 sync
	umount "$T/mnt"
	bounded 120 e2fsck -fn "$dev" >"$T/fsck" 2>&1 || fail "e2fsck -fn: $(cat "$T/fsck")"
	mount -o ro "$dev" "$T/mnt"
	check_tree "$T/mnt"
	umount "$T/mnt"
	detach "$dev"
	# The file system is in the file: fsck the image itself, and mount it again through a new
	# loop device.
	e2fsck -fn "$T/img" >"$T/fsck" 2>&1 || fail "e2fsck of the image: $(cat "$T/fsck")"
	dev=$(attach "$T/img")
	mount "$dev" "$T/mnt"
	check_tree "$T/mnt"
	umount "$T/mnt"
	detach "$dev"
}

t_fs_xfs() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 320M
	local dev
	dev=$(attach "$T/img")
	bounded 120 mkfs.xfs -q -f "$dev" || fail "mkfs.xfs failed: $(cat "$T/bounded.out")"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	fill_tree "$T/mnt"
	umount "$T/mnt"
	bounded 120 xfs_repair -n "$dev" >"$T/fsck" 2>&1 || fail "xfs_repair -n: $(cat "$T/fsck")"
	mount "$dev" "$T/mnt"
	check_tree "$T/mnt"
	umount "$T/mnt"
	detach "$dev"
}

# ext4 with 4096-byte loop blocks.
t_fs_ext4_block_size_4096() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 64M
	local dev
	dev=$(attach "$T/img" -b 4096)
	bounded 120 mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 failed"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	fill_tree "$T/mnt"
	umount "$T/mnt"
	bounded 120 e2fsck -fn "$dev" >"$T/fsck" 2>&1 || fail "e2fsck -fn: $(cat "$T/fsck")"
	detach "$dev"
}

# Grow the backing file under a mounted ext4, losetup -c, resize2fs: the mounted fs grows.
t_fs_ext4_grow_online() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 64M
	local dev blocks1 blocks2
	dev=$(attach "$T/img")
	bounded 120 mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 failed"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	fill_tree "$T/mnt"
	blocks1=$(stat -f -c %b "$T/mnt")
	truncate -s 160M "$T/img"
	losetup -c "$dev"
	assert_eq "$(devsize "$dev")" $((160 << 20)) "device size after losetup -c"
	bounded 120 resize2fs "$dev" >"$T/resize" 2>&1 || fail "resize2fs: $(cat "$T/resize")"
	blocks2=$(stat -f -c %b "$T/mnt")
	log "fs blocks $blocks1 -> $blocks2"
	[ "$blocks2" -gt $((blocks1 * 2)) ] || fail "ext4 did not grow: $blocks1 -> $blocks2 blocks"
	head -c $((80 << 20)) /dev/zero >"$T/mnt/big" || fail "cannot use the grown space"
	check_tree "$T/mnt"
	umount "$T/mnt"
	bounded 120 e2fsck -fn "$dev" >"$T/fsck" 2>&1 || fail "e2fsck -fn after growing: $(cat "$T/fsck")"
	detach "$dev"
}

# The same with XFS and xfs_growfs.
t_fs_xfs_grow_online() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 320M
	local dev blocks1 blocks2
	dev=$(attach "$T/img")
	bounded 120 mkfs.xfs -q -f "$dev" || fail "mkfs.xfs failed"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	fill_tree "$T/mnt"
	blocks1=$(stat -f -c %b "$T/mnt")
	truncate -s 640M "$T/img"
	losetup -c "$dev"
	assert_eq "$(devsize "$dev")" $((640 << 20)) "device size after losetup -c"
	bounded 120 xfs_growfs "$T/mnt" >"$T/grow" 2>&1 || fail "xfs_growfs: $(cat "$T/grow")"
	blocks2=$(stat -f -c %b "$T/mnt")
	log "fs blocks $blocks1 -> $blocks2"
	[ "$blocks2" -gt $((blocks1 * 3 / 2)) ] || fail "xfs did not grow: $blocks1 -> $blocks2 blocks"
	check_tree "$T/mnt"
	umount "$T/mnt"
	bounded 120 xfs_repair -n "$dev" >"$T/fsck" 2>&1 || fail "xfs_repair -n after growing: $(cat "$T/fsck")"
	detach "$dev"
}

# mount -o loop: util-linux sets up an autoclear device, gone after umount.
t_fs_mount_o_loop_autoclear() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 32M
	mkfs.ext4 -q -F "$T/img"
	mkdir -p "$T/mnt"
	mount -o loop "$T/img" "$T/mnt" || fail "mount -o loop failed"
	local dev
	dev=$(findmnt -n -o SOURCE "$T/mnt")
	[[ "$dev" =~ ^/dev/loop[0-9]+$ ]] || fail "mount source is '$dev'"
	assert_sys "$dev" loop/autoclear 1
	assert_sys "$dev" loop/backing_file "$T/img"
	echo hello >"$T/mnt/hello"
	umount "$T/mnt"
	wait_unbound "$dev"
	assert_sys "$dev" size 0
	# Read-only: mount -o loop,ro gives a read-only device.
	mount -o loop,ro "$T/img" "$T/mnt" || fail "mount -o loop,ro failed"
	dev=$(findmnt -n -o SOURCE "$T/mnt")
	assert_sys "$dev" ro 1
	assert_eq "$(cat "$T/mnt/hello")" hello "file content through a read-only loop mount"
	umount "$T/mnt"
	wait_unbound "$dev"
}

# A read-only loop device cannot be mounted read-write.
t_fs_readonly_device_mount() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 32M
	mkfs.ext4 -q -F "$T/img"
	local dev
	dev=$(attach "$T/img" -r)
	mkdir -p "$T/mnt"
	if mount -o rw "$dev" "$T/mnt" 2>/dev/null; then
		# Some mount versions retry read-only: the mount must then be read-only.
		findmnt -n -o OPTIONS "$T/mnt" | grep -qw ro || fail "read-only device mounted read-write"
		umount "$T/mnt"
	fi
	mount -o ro "$dev" "$T/mnt" || fail "read-only mount of a read-only device failed"
	if touch "$T/mnt/x" 2>/dev/null; then fail "wrote to a read-only mount"; fi
	umount "$T/mnt"
	detach "$dev"
}
