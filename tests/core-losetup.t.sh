# shellcheck shell=bash
# Unmodified util-linux losetup drives the device: every form of the command, and the device state
# (sysfs, LOOP_GET_STATUS64, data) that results.

# losetup -f --show: a free device, bound with default settings; -d unbinds it.
t_losetup_find_show() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 16
	local dev n
	dev=$(attach "$T/img")
	[[ "$dev" =~ ^/dev/loop[0-9]+$ ]] || fail "losetup --show printed '$dev'"
	n=$(loopnr "$dev")
	assert_sys "$dev" loop/backing_file "$T/img"
	assert_sys "$dev" loop/offset 0
	assert_sys "$dev" loop/sizelimit 0
	assert_sys "$dev" loop/autoclear 0
	assert_sys "$dev" loop/partscan 0
	assert_sys "$dev" loop/dio 0
	assert_sys "$dev" ro 0
	assert_sys "$dev" queue/logical_block_size 512
	assert_sys "$dev" size $((16 * 2048))
	assert_sys "$dev" dev "7:$n"
	assert_eq "$(devsize "$dev")" $((16 << 20)) "device size"
	assert_eq "$(status64 "$dev" number)" "$n" "lo_number"
	assert_eq "$(status64 "$dev" flags)" 0 "lo_flags"
	assert_eq "$(status64 "$dev" file_name)" "$T/img" "lo_file_name"
	assert_eq "$(status64 "$dev" inode)" "$(stat -c %i "$T/img")" "lo_inode"
	assert_eq "$(status64 "$dev" device)" "$(stat -c %d "$T/img")" "lo_device"
	cmp "$dev" "$T/img" || fail "device data differs from the file"
	# Writes land in the file.
	dd if=/dev/urandom of="$T/chunk" bs=64k count=3 status=none
	dd if="$T/chunk" of="$dev" bs=64k seek=5 conv=fsync status=none
	cmp -n $((3 * 65536)) "$T/chunk" "$T/img" 0 $((5 * 65536)) || fail "written data not in the file"
	[ "$(losetup -f)" != "$dev" ] || fail "losetup -f offers the bound device $dev"
	detach "$dev"
	assert_sys "$dev" size 0
	[ ! -e "/sys/block/loop$n/loop" ] || fail "loop/ sysfs directory still there after -d"
	expect_errno ENXIO "$dev" get-status64
}

# losetup -r: a read-only device; writes fail and leave the file unchanged.
t_losetup_readonly() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 16
	local dev sum
	sum=$(sha256sum <"$T/img")
	dev=$(attach "$T/img" -r)
	assert_sys "$dev" ro 1
	assert_eq "$(blockdev --getro "$dev")" 1 "blockdev --getro"
	assert_eq "$(status64 "$dev" flags)" 1 "lo_flags (LO_FLAGS_READ_ONLY)"
	losetup -l -n -O RO "$dev" | grep -qw 1 || fail "losetup -l does not show RO"
	cmp "$dev" "$T/img" || fail "read-only device data differs"
	if dd if=/dev/zero of="$dev" bs=4k count=1 oflag=direct status=none 2>"$T/err"; then
		fail "write to a read-only device succeeded"
	fi
	grep -qE 'Read-only|Operation not permitted|Permission denied|Input/output error' "$T/err" ||
		fail "unexpected write error: $(cat "$T/err")"
	assert_eq "$(sha256sum <"$T/img")" "$sum" "file after refused write"
	detach "$dev"
}

# A file opened read-only (no write permission for the caller) gives a read-only device.
t_losetup_readonly_file_forces_ro() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev sum
	sum=$(sha256sum <"$T/img")
	dev=$(free_loop)
	# LOOP_CONFIGURE with a descriptor opened O_RDONLY and no READ_ONLY flag.
	lioctl "$dev" configure "$T/img" --ro-file
	assert_sys "$dev" ro 1
	assert_eq "$(status64 "$dev" flags)" 1 "lo_flags with an O_RDONLY backing file"
	if dd if=/dev/zero of="$dev" bs=4k count=1 oflag=direct status=none 2>/dev/null; then
		fail "write to a device over an O_RDONLY file succeeded"
	fi
	assert_eq "$(sha256sum <"$T/img")" "$sum" "file after refused write"
	# Opening the loop device read-only while binding also makes it read-only.
	lioctl "$dev" clr-fd
	wait_unbound "$dev"
	lioctl --ro "$dev" set-fd "$T/img"
	assert_sys "$dev" ro 1
	assert_eq "$(status64 "$dev" flags)" 1 "lo_flags when bound through a read-only open"
	detach "$dev"
}

# losetup -o: the device starts at the offset in the file.
t_losetup_offset() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 16
	local dev off=$((3 << 20))
	dev=$(attach "$T/img" -o $off)
	assert_sys "$dev" loop/offset $off
	assert_eq "$(devsize "$dev")" $(((16 << 20) - off)) "size with offset"
	assert_eq "$(status64 "$dev" offset)" $off "lo_offset"
	cmp "$dev" "$T/img" 0 $off || fail "device data != file data from the offset"
	dd if=/dev/urandom of="$T/chunk" bs=4k count=1 status=none
	# (no fsync here: flushes with an offset are zz-core-hazard/t_hazard_flush_with_offset)
	dd if="$T/chunk" of="$dev" bs=4k oflag=direct status=none
	cmp -n 4096 "$T/chunk" "$T/img" 0 $off || fail "write at device offset 0 not at file offset $off"
	detach "$dev"
	# An offset that is not a multiple of 512.
	dev=$(attach "$T/img" -o 1000)
	assert_sys "$dev" loop/offset 1000
	assert_eq "$(devsize "$dev")" $((((16 << 20) - 1000) / 512 * 512)) "size with offset 1000"
	cmp -n $((1 << 20)) "$dev" "$T/img" 0 1000 || fail "device data != file data from offset 1000"
	detach "$dev"
}

# losetup --sizelimit: the device ends at offset + limit; writes past it fail.
t_losetup_sizelimit() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 16
	local dev sum
	dev=$(attach "$T/img" -o $((1 << 20)) --sizelimit $((8 << 20)))
	assert_sys "$dev" loop/offset $((1 << 20))
	assert_sys "$dev" loop/sizelimit $((8 << 20))
	assert_eq "$(devsize "$dev")" $((8 << 20)) "size with sizelimit"
	assert_eq "$(status64 "$dev" sizelimit)" $((8 << 20)) "lo_sizelimit"
	cmp -n $((8 << 20)) "$dev" "$T/img" 0 $((1 << 20)) || fail "device data differs"
	sum=$(region_sum "$T/img" $((9 << 20)) $((7 << 20)))
	if dd if=/dev/zero of="$dev" bs=4k seek=2048 count=1 oflag=direct status=none 2>/dev/null; then
		fail "write past the size limit succeeded"
	fi
	assert_eq "$(region_sum "$T/img" $((9 << 20)) $((7 << 20)))" "$sum" "file past the limit"
	detach "$dev"
	# A limit larger than the file: the file size wins.
	dev=$(attach "$T/img" --sizelimit $((64 << 20)))
	assert_eq "$(devsize "$dev")" $((16 << 20)) "size with a limit beyond the file"
	detach "$dev"
}

# losetup -b: the logical (and physical) block size; data unchanged; reset after detach.
t_losetup_block_size() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev bs
	for bs in 512 1024 4096; do
		dev=$(attach "$T/img" -b $bs)
		assert_sys "$dev" queue/logical_block_size $bs
		assert_sys "$dev" queue/physical_block_size $bs
		assert_eq "$(blockdev --getss "$dev")" $bs "blockdev --getss"
		losetup -l -n -O LOG-SEC "$dev" | grep -qw $bs || fail "losetup -l LOG-SEC != $bs"
		cmp "$dev" "$T/img" || fail "data differs with block size $bs"
		dd if=/dev/urandom of="$T/chunk" bs=$bs count=3 status=none
		dd if="$T/chunk" of="$dev" bs=$bs seek=7 oflag=direct status=none ||
			fail "aligned direct write with block size $bs failed"
		cmp -n $((3 * bs)) "$T/chunk" "$T/img" 0 $((7 * bs)) || fail "write with bs $bs misplaced"
		if [ $bs -gt 512 ]; then
			# A direct I/O smaller than the logical block size is refused by the block layer.
			if dd if="$dev" of=/dev/null bs=512 count=1 iflag=direct status=none 2>/dev/null; then
				fail "512-byte direct read on a $bs-byte-block device succeeded"
			fi
		fi
		detach "$dev"
		assert_sys "$dev" queue/logical_block_size 512
	done
}

# losetup -c: the device follows the backing file's new size.
t_losetup_capacity() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev
	dev=$(attach "$T/img")
	assert_eq "$(devsize "$dev")" $((8 << 20)) "initial size"
	dd if=/dev/urandom of="$T/img" bs=1M seek=8 count=4 conv=notrunc status=none
	assert_eq "$(devsize "$dev")" $((8 << 20)) "size before losetup -c"
	losetup -c "$dev"
	assert_eq "$(devsize "$dev")" $((12 << 20)) "size after growing the file and losetup -c"
	blockdev --flushbufs "$dev"
	cmp "$dev" "$T/img" || fail "data of the grown device differs"
	truncate -s 6M "$T/img"
	losetup -c "$dev"
	assert_eq "$(devsize "$dev")" $((6 << 20)) "size after shrinking the file and losetup -c"
	detach "$dev"
}

# losetup -d on a device that is still open: detached at the last close (autoclear).
t_losetup_detach_while_open() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	local dev
	dev=$(attach "$T/img")
	exec 3<"$dev"
	losetup -d "$dev" || fail "losetup -d of an open device failed"
	assert_sys "$dev" loop/autoclear 1
	assert_eq "$(status64 "$dev" flags)" 4 "lo_flags after LOOP_CLR_FD while open"
	cmp <(head -c 4096 <&3) <(head -c 4096 "$T/img") || fail "open descriptor cannot read"
	exec 3<&-
	wait_unbound "$dev"
	assert_sys "$dev" size 0
	# A second clear of the now unbound device.
	assert_fails losetup -d "$dev"
	expect_errno ENXIO "$dev" clr-fd
}

# losetup -D detaches every device.
t_losetup_detach_all() {
	load_rust_loop
	trap cleanup_loops EXIT
	local i devs=()
	for i in 1 2 3; do
		mkimg "$T/img$i" 4M
		devs+=("$(attach "$T/img$i")")
	done
	[ "$(losetup -l -n | wc -l)" = 3 ] || fail "losetup -l does not list 3 devices"
	losetup -D
	udevadm settle
	for i in "${devs[@]}"; do wait_unbound "$i"; done
	[ -z "$(losetup -l -n)" ] || fail "devices left after -D: $(losetup -l -n)"
}

# losetup -l, --json, -j FILE [-o OFFSET]: the listing matches the configuration.
t_losetup_list_json_associated() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/a" 16M
	mkimg "$T/b" 16M
	local d1 d2 d3 line
	d1=$(attach "$T/a")
	d2=$(attach "$T/a" -o 4096 --sizelimit $((1 << 20)) -r)
	d3=$(attach "$T/b" -b 4096)
	line=$(losetup -l -n --raw -O NAME,BACK-FILE,OFFSET,SIZELIMIT,RO,LOG-SEC,AUTOCLEAR,PARTSCAN,DIO "$d2")
	assert_eq "$line" "$d2 $T/a 4096 1048576 1 512 0 0 0" "losetup -l of $d2"
	line=$(losetup -l -n --raw -O NAME,BACK-FILE,OFFSET,SIZELIMIT,RO,LOG-SEC "$d3")
	assert_eq "$line" "$d3 $T/b 0 0 0 4096" "losetup -l of $d3"
	losetup --json >"$T/json"
	python3 - "$T/json" "$d1" "$d2" "$d3" "$T" <<-'EOF' || fail "losetup --json is wrong: $(cat "$T/json")"
		import json, sys
		path, d1, d2, d3, t = sys.argv[1:]
		devs = {d["name"]: d for d in json.load(open(path))["loopdevices"]}
		assert set(devs) == {d1, d2, d3}, devs
		def num(v): return int(v)
		def flag(v): return v in (True, 1, "1")
		assert devs[d1]["back-file"] == t + "/a" and num(devs[d1]["offset"]) == 0
		assert not flag(devs[d1]["ro"]) and not flag(devs[d1]["autoclear"])
		assert devs[d2]["back-file"] == t + "/a" and num(devs[d2]["offset"]) == 4096
		assert num(devs[d2]["sizelimit"]) == 1 << 20 and flag(devs[d2]["ro"])
		assert devs[d3]["back-file"] == t + "/b" and num(devs[d3]["log-sec"]) == 4096
	EOF
	assert_eq "$(losetup -j "$T/a" | cut -d: -f1 | sort | xargs)" "$(printf '%s\n' "$d1" "$d2" | sort | xargs)" "losetup -j a"
	assert_eq "$(losetup -j "$T/b" | cut -d: -f1)" "$d3" "losetup -j b"
	assert_eq "$(losetup -j "$T/a" -o 4096 | cut -d: -f1)" "$d2" "losetup -j a -o 4096"
	losetup -a | grep -q "^$d3: .*($T/b)" || fail "losetup -a: $(losetup -a)"
	losetup -D
}

# losetup -P: the partition table is scanned (see core-part for the details).
t_losetup_partscan_flag() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 32M
	printf 'label: gpt\n,8M\n,\n' | sfdisk -q "$T/img" >/dev/null
	local dev
	dev=$(attach "$T/img" -P)
	assert_sys "$dev" loop/partscan 1
	assert_eq "$(($(status64 "$dev" flags) & 8))" 8 "LO_FLAGS_PARTSCAN"
	wait_for 5 test -b "${dev}p2" || fail "${dev}p2 did not appear"
	assert_eq "$(devsize "${dev}p1")" $((8 << 20)) "size of p1"
	detach "$dev"
}

# Attach and detach many times with losetup; the device comes back clean every time.
t_losetup_attach_detach_cycles() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	local i dev
	for i in $(seq 30); do
		dev=$(losetup -f --show -o $((i * 4096)) "$T/img") || fail "attach #$i failed"
		[ "$(sysblk "$dev" loop/offset)" = $((i * 4096)) ] || fail "offset of attach #$i"
		cmp -n 4096 "$dev" "$T/img" 0 $((i * 4096)) || fail "data of attach #$i"
		losetup -d "$dev" || fail "detach #$i failed"
	done
	udevadm settle
	wait_unbound "$dev"
}

# The backing file is deleted while bound: the device keeps working; sysfs and losetup -l say
# "(deleted)", as file_path() does for loop.c.
t_losetup_deleted_backing_file() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	cp "$T/img" "$T/copy"
	local dev
	dev=$(attach "$T/img")
	rm "$T/img"
	assert_sys "$dev" loop/backing_file "$T/img (deleted)"
	losetup -l -n -O BACK-FILE "$dev" | grep -qF "$T/img (deleted)" ||
		fail "losetup -l: $(losetup -l -n -O BACK-FILE "$dev")"
	cmp "$dev" "$T/copy" || fail "data after the file was deleted"
	detach "$dev"
}

# A path with spaces and a long path (> 64 bytes: lo_file_name is cut, sysfs has it whole).
t_losetup_long_and_odd_paths() {
	load_rust_loop
	trap cleanup_loops EXIT
	local d="$T/a dir with spaces/$(printf 'n%.0s' $(seq 80))"
	mkdir -p "$d"
	mkimg "$d/img file" 4M
	local dev
	dev=$(attach "$d/img file")
	assert_sys "$dev" loop/backing_file "$d/img file"
	assert_eq "$(status64 "$dev" file_name)" "$(printf '%s' "$d/img file" | head -c 63)" "lo_file_name (63 bytes)"
	assert_eq "$(losetup -l -n -O BACK-FILE "$dev" | sed 's/ *$//')" "$d/img file" "losetup -l BACK-FILE"
	detach "$dev"
	rm -rf "$T/a dir with spaces"
}
