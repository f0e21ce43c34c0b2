# shellcheck shell=bash
# Partitions and uevents: losetup -P with a GPT, max_part, LOOP_SET_STATUS64 PARTSCAN, BLKPG,
# and the "change"/"add"/"remove" uevents seen by udevadm monitor.

# gpt_image FILE: 64 MiB, GPT with p1 = 8 MiB at 1 MiB and p2 = 16 MiB right after it
gpt_image() {
	mkimg "$1" 64M
	printf 'label: gpt\nstart=2048, size=16384\nstart=18432, size=32768\n' | sfdisk -q "$1" >/dev/null ||
		fail "sfdisk failed"
}

# monitor_start: udevadm monitor of kernel block events into $T/uevents
monitor_start() {
	rm -f "$T/uevents"
	udevadm monitor --kernel --subsystem-match=block >"$T/uevents" 2>&1 &
	MONITOR_PID=$!
	# Wait until it listens (it prints a banner first).
	wait_for 10 grep -q 'KERNEL' "$T/uevents" || fail "udevadm monitor did not start"
	sleep 0.5
}
monitor_stop() {
	sleep 1
	kill "$MONITOR_PID" 2>/dev/null || true
	wait "$MONITOR_PID" 2>/dev/null || true
}
# uevent_count ACTION DEVNAME: number of kernel uevents ACTION for /devices/.../block/DEVNAME
uevent_count() { grep -cE "^KERNEL\[[0-9. ]+\] +$1 +/devices/\S*/$2 \(block\)" "$T/uevents" || true; }

# losetup -P on a GPT image: p1 and p2 appear (with add uevents), have the right geometry and
# data, and disappear after detach; the loop device gets change uevents on attach and detach.
t_part_partscan_gpt() {
	load_rust_loop
	trap 'monitor_stop; cleanup_loops' EXIT
	gpt_image "$T/img"
	local dev name
	dev=$(free_loop)
	name=$(basename "$dev")
	monitor_start
	losetup -P "$dev" "$T/img" || fail "losetup -P failed"
	udevadm settle
	wait_for 5 test -b "${dev}p2" || fail "${dev}p2 did not appear: $(ls /dev/"$name"*)"
	test -b "${dev}p1" || fail "${dev}p1 missing"
	assert_sys "$dev" loop/partscan 1
	[ -d "/sys/block/$name/${name}p1" ] || fail "/sys/block/$name/${name}p1 missing"
	assert_file "/sys/block/$name/${name}p1/start" 2048
	assert_file "/sys/block/$name/${name}p1/size" 16384
	assert_file "/sys/block/$name/${name}p2/start" 18432
	assert_file "/sys/block/$name/${name}p2/size" 32768
	assert_eq "$(devsize "${dev}p2")" $((16 << 20)) "size of p2"
	[ ! -e "${dev}p3" ] || fail "${dev}p3 exists"
	# Writing to p2 lands at 18432 * 512 in the file.
	dd if=/dev/urandom of="$T/chunk" bs=64k count=2 status=none
	dd if="$T/chunk" of="${dev}p2" bs=64k seek=3 oflag=direct status=none
	cmp -n $((128 << 10)) "$T/chunk" "$T/img" 0 $((18432 * 512 + 3 * 65536)) ||
		fail "write to p2 is not at the partition's offset in the file"
	detach "$dev"
	udevadm settle
	wait_for 5 test ! -e "/sys/block/$name/${name}p1" || fail "${name}p1 still in sysfs after detach"
	wait_for 5 test ! -b "${dev}p1" || fail "${dev}p1 still in /dev after detach"
	monitor_stop
	[ "$(uevent_count add "${name}p1")" -ge 1 ] || fail "no add uevent for ${name}p1: $(cat "$T/uevents")"
	[ "$(uevent_count add "${name}p2")" -ge 1 ] || fail "no add uevent for ${name}p2: $(cat "$T/uevents")"
	[ "$(uevent_count remove "${name}p1")" -ge 1 ] || fail "no remove uevent for ${name}p1: $(cat "$T/uevents")"
	[ "$(uevent_count remove "${name}p2")" -ge 1 ] || fail "no remove uevent for ${name}p2: $(cat "$T/uevents")"
	[ "$(uevent_count change "$name")" -ge 2 ] ||
		fail "expected change uevents for $name on attach and detach: $(cat "$T/uevents")"
}

# Without -P (and max_part=0) the table is not scanned.
t_part_no_partscan_by_default() {
	load_rust_loop
	trap cleanup_loops EXIT
	gpt_image "$T/img"
	local dev name
	dev=$(attach "$T/img")
	name=$(basename "$dev")
	assert_sys "$dev" loop/partscan 0
	sleep 0.5
	[ ! -e "/sys/block/$name/${name}p1" ] || fail "partitions scanned without -P"
	# blockdev --rereadpt is refused on a device that suppresses partition scans.
	assert_fails blockdev --rereadpt "$dev"
	[ ! -e "/sys/block/$name/${name}p1" ] || fail "partitions appeared after --rereadpt"
	detach "$dev"
}

# The change uevents of configure and detach, one device, no partitions.
t_part_uevents_change() {
	load_rust_loop
	trap 'monitor_stop; cleanup_loops' EXIT
	mkimg "$T/img" 8M
	local dev name n
	dev=$(free_loop)
	name=$(basename "$dev")
	monitor_start
	lioctl "$dev" configure "$T/img"
	sleep 1
	n=$(uevent_count change "$name")
	[ "$n" -ge 1 ] || fail "no change uevent for $name after LOOP_CONFIGURE: $(cat "$T/uevents")"
	lioctl "$dev" clr-fd
	wait_unbound "$dev"
	sleep 1
	[ "$(uevent_count change "$name")" -gt "$n" ] ||
		fail "no change uevent for $name after LOOP_CLR_FD: $(cat "$T/uevents")"
	monitor_stop
}

# LOOP_SET_STATUS64 with LO_FLAGS_PARTSCAN on a bound device scans the table.
t_part_set_status_partscan() {
	load_rust_loop
	trap cleanup_loops EXIT
	gpt_image "$T/img"
	local dev name
	dev=$(attach "$T/img")
	name=$(basename "$dev")
	assert_sys "$dev" loop/partscan 0
	lioctl "$dev" set-status64 --flags 8
	assert_sys "$dev" loop/partscan 1
	wait_for 5 test -e "/sys/block/$name/${name}p2" || fail "no partitions after SET_STATUS64 PARTSCAN"
	assert_file "/sys/block/$name/${name}p2/size" 32768
	# Now a rescan works, and sees a changed table.
	printf 'label: gpt\nstart=2048, size=8192\n' | sfdisk -q --no-reread "$dev" >/dev/null 2>&1 ||
		fail "sfdisk on the device failed"
	# BLKRRPART is EBUSY while a partition is open (udev probing them): settle and retry.
	udevadm settle
	wait_for 10 blockdev --rereadpt "$dev" || fail "blockdev --rereadpt failed: $(blockdev --rereadpt "$dev" 2>&1)"
	wait_for 5 test ! -e "/sys/block/$name/${name}p2" || fail "p2 still there after the rescan"
	assert_file "/sys/block/$name/${name}p1/size" 8192
	detach "$dev"
	wait_for 5 test ! -e "/sys/block/$name/${name}p1" || fail "p1 still there after detach"
}

# max_part=N: minors are spaced by 2^fls(N), every device scans partitions.
t_part_max_part_param() {
	load_rust_loop max_part=7
	trap cleanup_loops EXIT
	gpt_image "$T/img"
	assert_file /sys/block/loop1/dev 7:8
	assert_file /sys/block/loop2/dev 7:16
	local dev=/dev/loop1
	lioctl "$dev" set-fd "$T/img"
	assert_sys "$dev" loop/partscan 1
	wait_for 5 test -b /dev/loop1p2 || fail "/dev/loop1p2 did not appear with max_part=7"
	assert_file /sys/block/loop1/loop1p1/dev 7:9
	assert_file /sys/block/loop1/loop1p2/dev 7:10
	assert_eq "$(devsize /dev/loop1p1)" $((8 << 20)) "size of loop1p1"
	detach "$dev"
	wait_for 5 test ! -e /sys/block/loop1/loop1p1 || fail "loop1p1 still there after detach"
	# After detach the partscan flag is reset... and set again by the next bind.
	lioctl "$dev" set-fd "$T/img"
	assert_sys "$dev" loop/partscan 1
	detach "$dev"
}

# Partitions added by hand (BLKPG, partx -a) on a device without partscan are removed at detach.
t_part_blkpg_removed_at_detach() {
	load_rust_loop
	trap cleanup_loops EXIT
	gpt_image "$T/img"
	local dev name
	dev=$(attach "$T/img")
	name=$(basename "$dev")
	partx -a "$dev" || fail "partx -a failed"
	wait_for 5 test -e "/sys/block/$name/${name}p2" || fail "partx -a added no partitions"
	assert_file "/sys/block/$name/${name}p1/start" 2048
	detach "$dev"
	wait_for 5 test ! -e "/sys/block/$name/${name}p1" || fail "BLKPG partition survived detach"
	wait_for 5 test ! -e "/sys/block/$name/${name}p2" || fail "BLKPG partition survived detach"
}

# part_flaps NAME: partitions of NAME whose uevents in $T/uevents go on after their first "add"
# (a remove, or a second add: the partition vanished and came back), with their actions
part_flaps() {
	awk -v dev="$1" '
		$1 ~ /^KERNEL\[/ && $4 == "(block)" {
			n = split($3, p, "/")
			if (p[n] ~ ("^" dev "p[0-9]+$")) seq[p[n]] = seq[p[n]] " " $2
		}
		END { for (k in seq) if (seq[k] ~ /add .*(add|remove)/) print k ":" seq[k] }' "$T/uevents"
}
# part_step WHAT DEV COMMAND...: runs COMMAND under udevadm monitor; fails (rust_loop) or logs
# (loop.c) when a partition of DEV flapped; prints nothing
part_step() {
	local what=$1 dev=$2 flaps
	shift 2
	monitor_start
	"$@" || fail "$what failed"
	udevadm settle
	monitor_stop
	flaps=$(part_flaps "$(basename "$dev")")
	log "$what: $(grep -cE "^KERNEL.* (add|remove) .*/$(basename "$dev")p[0-9]+ \(block\)" "$T/uevents" || true) partition add/remove uevents${flaps:+; flapping: $flaps}"
	[ -z "$flaps" ] || ! is_rust || fail "$what: partitions removed or added again after they appeared: $flaps"
}

# Partitions appear once: while losetup -P, LOOP_CONFIGURE with LO_FLAGS_PARTSCAN,
# LOOP_CHANGE_FD and LOOP_SET_CAPACITY run, no partition is removed or added a second time
# after it was added (loop.c has been seen to scan twice, so partitions appear, vanish and
# reappear under udev and whoever mounts them).
t_part_partitions_appear_once() {
	load_rust_loop
	trap 'monitor_stop; cleanup_loops' EXIT
	gpt_image "$T/img"
	cp "$T/img" "$T/img2"
	local dev name
	dev=$(free_loop)
	name=$(basename "$dev")
	part_step "losetup -P" "$dev" losetup -P "$dev" "$T/img"
	[ "$(uevent_count add "${name}p1")" = 1 ] && [ "$(uevent_count add "${name}p2")" = 1 ] || ! is_rust ||
		fail "losetup -P: expected one add uevent for each of p1, p2: $(cat "$T/uevents")"
	# A rescan of the table just scanned is dropped (udev asks for one when losetup closes the
	# device it had open for writing, if its watch is set up by then; this asks for it always).
	local skipped=0
	is_rust && skipped=$(stat_of "$dev" partscan_skipped)
	part_step "BLKRRPART after losetup -P" "$dev" blockdev --rereadpt "$dev"
	if is_rust; then
		[ "$(uevent_count remove "${name}p1")" = 0 ] ||
			fail "BLKRRPART over an unchanged table removed p1: $(cat "$T/uevents")"
		[ "$(stat_of "$dev" partscan_skipped)" -gt "$skipped" ] ||
			fail "BLKRRPART over an unchanged table was not dropped (partscan_skipped $skipped)"
	fi
	# But a partition removed by hand (BLKPG) comes back at the next BLKRRPART, as with loop.c.
	partx -d --nr 2 "$dev" || fail "partx -d --nr 2 failed"
	wait_for 5 test ! -e "/sys/block/$name/${name}p2" || fail "partx -d left p2"
	blockdev --rereadpt "$dev" || fail "blockdev --rereadpt after partx -d failed"
	wait_for 5 test -e "/sys/block/$name/${name}p2" || fail "BLKRRPART did not bring back p2 removed with BLKPG"
	udevadm settle
	detach "$dev"
	udevadm settle
	# LOOP_CONFIGURE with LO_FLAGS_PARTSCAN | LO_FLAGS_READ_ONLY (for the LOOP_CHANGE_FD below).
	part_step "LOOP_CONFIGURE PARTSCAN" "$dev" lioctl "$dev" configure "$T/img" --flags 9 --ro-file
	[ "$(uevent_count add "${name}p2")" = 1 ] || ! is_rust ||
		fail "LOOP_CONFIGURE: expected one add uevent for p2: $(cat "$T/uevents")"
	test -b "${dev}p2" || fail "${dev}p2 missing after LOOP_CONFIGURE"
	part_step "LOOP_CHANGE_FD" "$dev" lioctl --ro "$dev" change-fd "$T/img2" --ro-file
	wait_for 5 test -b "${dev}p2" || fail "${dev}p2 missing after LOOP_CHANGE_FD"
	part_step "LOOP_SET_CAPACITY" "$dev" lioctl --ro "$dev" set-capacity
	[ "$(uevent_count remove "${name}p1")" = 0 ] || ! is_rust ||
		fail "LOOP_SET_CAPACITY removed p1: $(cat "$T/uevents")"
	wait_for 5 test -b "${dev}p2" || fail "${dev}p2 missing after LOOP_SET_CAPACITY"
	if is_rust; then
		[ "$(stat_of "$dev" partscan_skipped)" -ge 1 ] ||
			fail "no redundant rescan was dropped (partscan_skipped $(stat_of "$dev" partscan_skipped))"
		log "partscan_skipped: $(stat_of "$dev" partscan_skipped)"
	fi
	# A table changed in the backing file behind the device's back is still seen by a rescan.
	printf 'label: gpt\nstart=2048, size=8192\n' | sfdisk -q "$T/img2" >/dev/null || fail "sfdisk on the file failed"
	udevadm settle
	wait_for 10 blockdev --rereadpt "$dev" || fail "blockdev --rereadpt failed: $(blockdev --rereadpt "$dev" 2>&1)"
	wait_for 5 test ! -e "/sys/block/$name/${name}p2" || fail "p2 still there after the table changed in the file"
	assert_file "/sys/block/$name/${name}p1/size" 8192
	detach "$dev"
}

# A table written for 4096-byte sectors is found by the rescan after LOOP_SET_BLOCK_SIZE 4096:
# the entries count in logical blocks, so a rescan after a block-size change reads a different
# table even though the backing file is unchanged (rust_loop drops rescans of an unchanged
# table; the block size is part of what it compares).
t_part_rescan_after_block_size() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 64M
	local dev name skipped=0
	dev=$(free_loop)
	name=$(basename "$dev")
	# The table, written through the device at 4096-byte sectors (this sfdisk has no --sector-size).
	losetup -b 4096 "$dev" "$T/img" || fail "losetup -b 4096 failed"
	printf 'label: gpt\nstart=256, size=2048\n' | sfdisk -q "$dev" >/dev/null || fail "sfdisk at 4096-byte sectors failed"
	detach "$dev"
	udevadm settle
	losetup -P "$dev" "$T/img" || fail "losetup -P failed"
	udevadm settle
	[ ! -e "/sys/block/$name/${name}p1" ] || fail "a 4096-byte-sector GPT was found at 512-byte sectors"
	is_rust && skipped=$(stat_of "$dev" partscan_skipped)
	lioctl "$dev" set-block-size 4096 || fail "LOOP_SET_BLOCK_SIZE 4096 failed"
	udevadm settle
	wait_for 10 blockdev --rereadpt "$dev" || fail "blockdev --rereadpt failed: $(blockdev --rereadpt "$dev" 2>&1)"
	wait_for 5 test -e "/sys/block/$name/${name}p1" ||
		fail "the rescan after LOOP_SET_BLOCK_SIZE 4096 did not find p1 (partscan_skipped $(is_rust && stat_of "$dev" partscan_skipped))"
	# Sizes in sysfs count 512-byte sectors: 256 and 2048 blocks of 4096 bytes.
	assert_file "/sys/block/$name/${name}p1/start" 2048
	assert_file "/sys/block/$name/${name}p1/size" 16384
	if is_rust; then
		[ "$(stat_of "$dev" partscan_skipped)" = "$skipped" ] ||
			fail "a rescan after the block size changed was dropped"
	fi
	# And back at 512: the table is not there, the rescan drops p1.
	udevadm settle
	lioctl "$dev" set-block-size 512 || fail "LOOP_SET_BLOCK_SIZE 512 failed"
	udevadm settle
	wait_for 10 blockdev --rereadpt "$dev" || fail "blockdev --rereadpt at 512 failed"
	wait_for 5 test ! -e "/sys/block/$name/${name}p1" || fail "p1 still there at 512-byte sectors"
	detach "$dev"
}

# On a loop device over another block device (here a second loop device), a table changed on
# that device is seen by the next rescan: the i_version of the device's node does not follow its
# data, so rust_loop never drops a rescan of a block-device backing (found by
# t_ioctl_sequence_as_loop_c, seed 3146031831: a chain whose lower device's offset changed).
t_part_rescan_over_block_device() {
	load_rust_loop
	trap cleanup_loops EXIT
	gpt_image "$T/img"
	local lower dev name
	lower=$(losetup -f --show "$T/img") || fail "losetup of the lower device failed"
	dev=$(free_loop)
	name=$(basename "$dev")
	losetup -P "$dev" "$lower" || fail "losetup -P over $lower failed"
	udevadm settle
	wait_for 5 test -e "/sys/block/$name/${name}p2" || fail "${name}p2 did not appear"
	blockdev --rereadpt "$dev" || fail "blockdev --rereadpt failed"
	# The table rewritten in the lower device's file (not through the device's node, whose times a
	# write would update), the lower device's page cache dropped.
	printf 'label: gpt\nstart=2048, size=8192\n' | sfdisk -q "$T/img" >/dev/null || fail "sfdisk on the file failed"
	blockdev --flushbufs "$lower" || fail "blockdev --flushbufs $lower failed"
	udevadm settle
	wait_for 10 blockdev --rereadpt "$dev" || fail "blockdev --rereadpt failed: $(blockdev --rereadpt "$dev" 2>&1)"
	wait_for 5 test ! -e "/sys/block/$name/${name}p2" ||
		fail "p2 still there after the table changed on $lower (partscan_skipped $(is_rust && stat_of "$dev" partscan_skipped))"
	assert_file "/sys/block/$name/${name}p1/size" 8192
	detach "$dev"
	detach "$lower"
}
