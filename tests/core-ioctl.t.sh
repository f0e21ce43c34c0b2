# shellcheck shell=bash
# The loop ioctls on /dev/loopN, issued raw (tests/loopioctl.py), with loop.c's errno values.

# LOOP_SET_FD / LOOP_CONFIGURE on a bound device: EBUSY, and the binding is unchanged.
t_ioctl_bind_busy() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/a" 4M
	mkimg "$T/b" 8M
	local dev
	dev=$(free_loop)
	lioctl "$dev" set-fd "$T/a"
	assert_sys "$dev" loop/backing_file "$T/a"
	expect_errno EBUSY "$dev" set-fd "$T/b"
	expect_errno EBUSY "$dev" configure "$T/b"
	assert_sys "$dev" loop/backing_file "$T/a"
	assert_eq "$(devsize "$dev")" $((4 << 20)) "size after refused rebinds"
	lioctl "$dev" clr-fd
	wait_unbound "$dev"
	# Unbound again: LOOP_CONFIGURE works.
	lioctl "$dev" configure "$T/b"
	assert_eq "$(devsize "$dev")" $((8 << 20)) "size after LOOP_CONFIGURE"
	detach "$dev"
}

# A descriptor that is not open: EBADF.
t_ioctl_bad_fd() {
	load_rust_loop
	trap cleanup_loops EXIT
	local dev
	dev=$(free_loop)
	expect_errno EBADF "$dev" set-fd fd=1000
	expect_errno EBADF "$dev" configure fd=1000
	expect_errno EBADF "$dev" set-fd fd=-1
	[ ! -d "/sys/block/$(basename "$dev")/loop" ] || fail "$dev bound after EBADF"
}

# A directory, a pipe, a socket, a character device as the backing file: EINVAL.
t_ioctl_bad_backing_type() {
	load_rust_loop
	trap cleanup_loops EXIT
	local dev
	mkdir -p "$T/dir"
	rm -f "$T/fifo"
	mkfifo "$T/fifo"
	dev=$(free_loop)
	expect_errno EINVAL "$dev" set-fd "$T/dir"
	expect_errno EINVAL "$dev" configure "$T/dir"
	expect_errno EINVAL "$dev" set-fd pipe
	expect_errno EINVAL "$dev" configure pipe
	expect_errno EINVAL "$dev" set-fd "$T/fifo"
	expect_errno EINVAL "$dev" set-fd socket
	expect_errno EINVAL "$dev" configure socket
	expect_errno EINVAL "$dev" set-fd /dev/null
	expect_errno EINVAL "$dev" configure /dev/zero
	[ ! -d "/sys/block/$(basename "$dev")/loop" ] || fail "$dev bound after EINVAL"
	expect_errno ENXIO "$dev" get-status64
	rm -f "$T/fifo"
}

# A loop device as its own backing file: EBADF.
t_ioctl_backing_self() {
	load_rust_loop
	trap cleanup_loops EXIT
	local dev
	dev=$(free_loop)
	expect_errno EBADF "$dev" set-fd "$dev"
	expect_errno EBADF "$dev" configure "$dev"
	expect_errno ENXIO "$dev" get-status64
}

# Stacked loop devices work; a cycle (loop A over loop B over loop A) is refused.
t_ioctl_loop_cycle() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/a" 4
	fillimg "$T/b" 4
	local la=/dev/loop0 lb=/dev/loop1 lc=/dev/loop2
	# loop1 (read-only) over the file; loop0 over loop1: fine, and the data passes through.
	lioctl "$lb" configure "$T/a" --flags 1
	lioctl "$la" configure "$lb" --ro-file
	cmp "$la" "$T/a" || fail "data of loop0 over loop1 differs"
	# GET_STATUS64 of a device backed by a block device: lo_rdevice is that device (7:1).
	assert_eq "$(status64 "$la" rdevice)" $(((7 << 8) | 1)) "lo_rdevice of loop0 over loop1"
	assert_eq "$(status64 "$la" inode)" "$(stat -c %i "$lb")" "lo_inode of loop0 over loop1"
	assert_sys "$la" loop/backing_file "$lb"
	# Binding over an unbound loop device: EINVAL.
	expect_errno EINVAL "$lc" set-fd /dev/loop3
	# Changing loop1's backing file to loop0 would close the cycle: EBADF (loop_validate_file).
	expect_errno EBADF "$lb" change-fd "$la" --ro-file
	assert_sys "$lb" loop/backing_file "$T/a"
	# A longer cycle: loop2 over loop0 (over loop1), then loop1 -> loop2.
	lioctl "$lc" configure "$la" --ro-file
	cmp "$lc" "$T/a" || fail "data of loop2 over loop0 over loop1 differs"
	expect_errno EBADF "$lb" change-fd "$lc" --ro-file
	# Still usable: switch loop1 to another regular file of the same size.
	lioctl "$lb" change-fd "$T/b" --ro-file
	blockdev --flushbufs "$lc" "$la" "$lb"
	cmp "$lc" "$T/b" || fail "stacked devices do not follow loop1's new backing file"
	lioctl "$lc" clr-fd
	lioctl "$la" clr-fd
	lioctl "$lb" clr-fd
	wait_unbound "$lb"
}

# LOOP_CONFIGURE with flags outside LOOP_CONFIGURE_SETTABLE_FLAGS: EINVAL, device unbound.
t_ioctl_configure_bad_flags() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	local dev f
	dev=$(free_loop)
	for f in 2 32 64 0x100 0x80000000; do
		expect_errno EINVAL "$dev" configure "$T/img" --flags $f
		expect_errno ENXIO "$dev" get-status64
	done
	# Every settable flag at once is fine (held open: autoclear unbinds at the last close).
	exec 3<"$dev"
	lioctl "$dev" configure "$T/img" --flags $((1 | 4 | 8))
	assert_sys "$dev" ro 1
	assert_sys "$dev" loop/autoclear 1
	assert_sys "$dev" loop/partscan 1
	assert_eq "$(($(status64 "$dev" flags) & 13))" 13 "lo_flags"
	exec 3<&-
	wait_unbound "$dev"
}

# Encryption (removed from loop.c): any lo_encrypt_type but 0, or a key size > 32: EINVAL.
t_ioctl_encryption_refused() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	local dev t
	dev=$(free_loop)
	for t in 1 2 5 18 19 20 255; do
		expect_errno EINVAL "$dev" configure "$T/img" --encrypt-type $t
	done
	expect_errno EINVAL "$dev" configure "$T/img" --encrypt-key-size 33
	expect_errno ENXIO "$dev" get-status64
	lioctl "$dev" configure "$T/img" --encrypt-key-size 32
	expect_errno EINVAL "$dev" set-status64 --encrypt-type 1 --offset 4096
	expect_errno EINVAL "$dev" set-status64 --encrypt-type 18
	# The old struct loop_info's encryption fields are not looked at (loop_info64_from_old).
	lioctl "$dev" set-status --encrypt-type 1 --encrypt-key-size 100
	assert_eq "$(status64 "$dev" offset)" 0 "offset after refused SET_STATUS64"
	assert_eq "$(status64 "$dev" encrypt_type)" 0 "lo_encrypt_type"
	detach "$dev"
}

# LOOP_CONFIGURE: offset, size limit, file name, block size in one call; bad values refused.
t_ioctl_configure_fields() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev
	dev=$(free_loop)
	exec 3<"$dev"
	lioctl "$dev" configure "$T/img" --offset 8192 --sizelimit $((1 << 20)) --name my-name \
		--block-size 4096 --flags 4
	assert_sys "$dev" loop/offset 8192
	assert_sys "$dev" loop/sizelimit $((1 << 20))
	assert_sys "$dev" loop/autoclear 1
	assert_sys "$dev" queue/logical_block_size 4096
	assert_eq "$(devsize "$dev")" $((1 << 20)) "size"
	assert_eq "$(status64 "$dev" file_name)" my-name "lo_file_name"
	assert_eq "$(status64 "$dev" crypt_name)" "" "lo_crypt_name"
	cmp -n $((1 << 20)) "$dev" "$T/img" 0 8192 || fail "data at offset 8192 differs"
	# Autoclear: unbound at the last close.
	exec 3<&-
	wait_unbound "$dev"
	# Invalid block sizes; above the page size, as the kernel's BLK_MAX_BLOCK_SIZE decides
	# (64 KiB with transparent huge pages, as on Debian's kernel: t_ioctl_transcript_as_loop_c).
	local bs max=4096
	[ ! -d /sys/kernel/mm/transparent_hugepage ] || max=65536
	for bs in 100 513 1000 $((max * 2)) $((max * 16)); do
		expect_errno EINVAL "$dev" configure "$T/img" --block-size $bs
		expect_errno ENXIO "$dev" get-status64
	done
	# Offsets beyond LLONG_MAX: EOVERFLOW.
	expect_errno EOVERFLOW "$dev" configure "$T/img" --offset 0x8000000000000000
	expect_errno EOVERFLOW "$dev" configure "$T/img" --sizelimit 0xffffffffffffffff
	expect_errno ENXIO "$dev" get-status64
	# A name of 64 bytes is cut to 63 (+ NUL).
	lioctl "$dev" configure "$T/img" --name "$(printf 'x%.0s' $(seq 64))"
	assert_eq "$(status64 "$dev" file_name)" "$(printf 'x%.0s' $(seq 63))" "64-byte lo_file_name"
	# An offset beyond the end of the file: size 0.
	lioctl "$dev" clr-fd
	wait_unbound "$dev"
	lioctl "$dev" configure "$T/img" --offset $((16 << 20))
	assert_eq "$(devsize "$dev")" 0 "size with the offset beyond the file"
	detach "$dev"
}

# LOOP_CLR_FD, LOOP_GET/SET_STATUS(64), SET_CAPACITY, SET_DIRECT_IO, SET_BLOCK_SIZE unbound: ENXIO.
t_ioctl_unbound_enxio() {
	load_rust_loop
	trap cleanup_loops EXIT
	local dev
	dev=$(free_loop)
	expect_errno ENXIO "$dev" clr-fd
	expect_errno ENXIO "$dev" get-status64
	expect_errno ENXIO "$dev" get-status
	expect_errno ENXIO "$dev" set-status64 --zero
	expect_errno ENXIO "$dev" set-status --zero
	expect_errno ENXIO "$dev" set-capacity
	expect_errno ENXIO "$dev" set-direct-io 1
	expect_errno ENXIO "$dev" set-direct-io 0
	expect_errno ENXIO "$dev" set-block-size 4096
	mkimg "$T/img" 4M
	expect_errno ENXIO "$dev" change-fd "$T/img" --ro-file
}

# GET_STATUS(64) with a NULL pointer: EINVAL (bound or not); SET_STATUS64/CONFIGURE: EFAULT.
t_ioctl_null_pointers() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	local dev
	dev=$(free_loop)
	expect_errno EINVAL "$dev" null-arg get-status64
	expect_errno EINVAL "$dev" null-arg get-status
	expect_errno EFAULT "$dev" null-arg configure
	lioctl "$dev" set-fd "$T/img"
	expect_errno EINVAL "$dev" null-arg get-status64
	expect_errno EINVAL "$dev" null-arg get-status
	expect_errno EFAULT "$dev" null-arg set-status64
	expect_errno EFAULT "$dev" null-arg set-status
	assert_eq "$(status64 "$dev" offset)" 0 "offset after faulting SET_STATUS64"
	detach "$dev"
}

# LOOP_SET_STATUS64 / GET_STATUS64: offset, size limit, name, settable and clearable flags.
t_ioctl_status64() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev
	dev=$(free_loop)
	lioctl "$dev" set-fd "$T/img"
	assert_eq "$(status64 "$dev" device)" "$(stat -c %d "$T/img")" "lo_device"
	assert_eq "$(status64 "$dev" inode)" "$(stat -c %i "$T/img")" "lo_inode"
	assert_eq "$(status64 "$dev" rdevice)" 0 "lo_rdevice"
	assert_eq "$(status64 "$dev" number)" "$(loopnr "$dev")" "lo_number"
	# Offset and size limit: the device moves and shrinks.
	lioctl "$dev" set-status64 --offset 65536 --sizelimit $((2 << 20)) --name renamed
	assert_eq "$(status64 "$dev" offset)" 65536 "lo_offset"
	assert_eq "$(status64 "$dev" sizelimit)" $((2 << 20)) "lo_sizelimit"
	assert_eq "$(status64 "$dev" file_name)" renamed "lo_file_name"
	assert_sys "$dev" loop/offset 65536
	assert_sys "$dev" loop/sizelimit $((2 << 20))
	assert_eq "$(devsize "$dev")" $((2 << 20)) "size after SET_STATUS64"
	cmp -n $((2 << 20)) "$dev" "$T/img" 0 65536 || fail "data after SET_STATUS64 offset change"
	# Back to the whole file.
	lioctl "$dev" set-status64 --offset 0 --sizelimit 0
	assert_eq "$(devsize "$dev")" $((8 << 20)) "size after resetting offset/limit"
	cmp "$dev" "$T/img" || fail "data after resetting offset"
	# AUTOCLEAR can be set and cleared; PARTSCAN set; READ_ONLY and DIRECT_IO are ignored.
	# Held open: with autoclear set, loopioctl's own close would otherwise unbind the device.
	exec 3<"$dev"
	lioctl "$dev" set-status64 --flags 4
	assert_sys "$dev" loop/autoclear 1
	lioctl "$dev" set-status64 --flags 0
	assert_sys "$dev" loop/autoclear 0
	lioctl "$dev" set-status64 --flags 1
	assert_sys "$dev" ro 0
	assert_eq "$(status64 "$dev" flags)" 0 "lo_flags after SET_STATUS64 READ_ONLY"
	lioctl "$dev" set-status64 --flags 8
	assert_sys "$dev" loop/partscan 1
	lioctl "$dev" set-status64 --flags 0
	assert_sys "$dev" loop/partscan 1
	assert_eq "$(status64 "$dev" flags)" 8 "PARTSCAN is not clearable"
	exec 3<&-
	# Autoclear was cleared: still bound after every descriptor is closed.
	sleep 0.2
	assert_sys "$dev" loop/backing_file "$T/img"
	# EOVERFLOW for an offset beyond LLONG_MAX; nothing changes.
	expect_errno EOVERFLOW "$dev" set-status64 --offset 0x8000000000000000
	assert_eq "$(status64 "$dev" offset)" 0 "lo_offset after EOVERFLOW"
	detach "$dev"
}

# The old LOOP_GET_STATUS / LOOP_SET_STATUS (struct loop_info) work, with their limits.
t_ioctl_old_status() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev
	dev=$(free_loop)
	exec 3<"$dev"
	lioctl "$dev" configure "$T/img" --offset 4096 --sizelimit $((1 << 20)) --name oldname --flags 4
	lioctl "$dev" get-status >"$T/st"
	grep -qx "number=$(loopnr "$dev")" "$T/st" || fail "old lo_number: $(cat "$T/st")"
	grep -qx "offset=4096" "$T/st" || fail "old lo_offset: $(cat "$T/st")"
	grep -qx "flags=4" "$T/st" || fail "old lo_flags: $(cat "$T/st")"
	grep -qx "file_name=oldname" "$T/st" || fail "old lo_name: $(cat "$T/st")"
	grep -qx "inode=$(stat -c %i "$T/img")" "$T/st" || fail "old lo_inode: $(cat "$T/st")"
	grep -qx "device=$(stat -c %d "$T/img")" "$T/st" || fail "old lo_device: $(cat "$T/st")"
	# The old structure has no size limit: LOOP_SET_STATUS resets it to 0.
	lioctl "$dev" set-status --offset 8192 --flags 0
	assert_eq "$(status64 "$dev" offset)" 8192 "offset after old SET_STATUS"
	assert_eq "$(status64 "$dev" sizelimit)" 0 "sizelimit after old SET_STATUS"
	assert_sys "$dev" loop/autoclear 0
	assert_eq "$(devsize "$dev")" $(((8 << 20) - 8192)) "size after old SET_STATUS"
	cmp -n "$(devsize "$dev")" "$dev" "$T/img" 0 8192 || fail "data after old SET_STATUS"
	# A negative old lo_offset becomes a huge 64-bit one: EOVERFLOW.
	expect_errno EOVERFLOW "$dev" set-status --offset -512
	assert_eq "$(status64 "$dev" offset)" 8192 "offset after refused old SET_STATUS"
	# An offset that does not fit the old structure's int: GET_STATUS says EOVERFLOW.
	lioctl "$dev" set-status64 --offset $((3 << 30))
	expect_errno EOVERFLOW "$dev" get-status
	assert_eq "$(status64 "$dev" offset)" $((3 << 30)) "GET_STATUS64 of a large offset"
	assert_eq "$(devsize "$dev")" 0 "size with an offset beyond the file"
	exec 3<&-
	detach "$dev"
}

# LOOP_SET_BLOCK_SIZE: 512/1024/4096 accepted; invalid sizes EINVAL; 0 means the default.
t_ioctl_set_block_size() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev bs max=4096 large=
	# The kernel's BLK_MAX_BLOCK_SIZE: 64 KiB with transparent huge pages (Debian's kernel),
	# else the page size (the project's own kernels).
	if [ -d /sys/kernel/mm/transparent_hugepage ]; then max=65536 large="8192 65536"; fi
	dev=$(free_loop)
	lioctl "$dev" set-fd "$T/img"
	for bs in 1024 4096 512 $large 4096; do
		lioctl "$dev" set-block-size $bs
		assert_sys "$dev" queue/logical_block_size $bs
		assert_sys "$dev" queue/physical_block_size $bs
		assert_sys "$dev" queue/minimum_io_size $bs
		cmp "$dev" "$T/img" || fail "data with block size $bs"
	done
	for bs in 100 513 2000 $((max * 2)) $((1 << 20)); do
		expect_errno EINVAL "$dev" set-block-size $bs
		assert_sys "$dev" queue/logical_block_size 4096
	done
	# Same size again: a no-op success.
	lioctl "$dev" set-block-size 4096
	# 0: loop_update_limits() picks the default block size (512 in buffered mode).
	lioctl "$dev" set-block-size 0
	assert_sys "$dev" queue/logical_block_size 512
	cmp "$dev" "$T/img" || fail "data after block size 0"
	detach "$dev"
}

# The same ABI as loop.c in this kernel: a transcript of ioctls, status fields, sysfs values and
# block-device reads and writes (tests/abi_transcript.py) run against loop.ko and rust_loop must
# be the same line for line. It covers what a kernel's configuration decides (block sizes above
# the page size on a kernel with transparent huge pages) and the read-only state the device
# keeps when unbound: the one its last binding or failed LOOP_CONFIGURE decided (loop.c's
# set_disk_ro comes after the flag and status checks and before the queue limits that refuse a
# block size; neither LOOP_CLR_FD nor a later failure resets it), so a write to the unbound
# device gets EPERM after a read-only binding and ENOSPC after a writable one.
t_ioctl_transcript_as_loop_c() {
	trap cleanup_loops EXIT
	unload_loop_drivers
	modprobe --ignore-install loop || fail "modprobe loop.ko failed"
	udevadm settle
	python3 "$ROOT/tests/abi_transcript.py" /dev/loop0 "$T" >"$T/loop_c.txt" ||
		fail "transcript on loop.c failed: $(tail -n 3 "$T/loop_c.txt")"
	unload_loop_drivers
	load_rust_loop
	python3 "$ROOT/tests/abi_transcript.py" /dev/loop0 "$T" >"$T/rust_loop.txt" ||
		fail "transcript on rust_loop failed: $(tail -n 3 "$T/rust_loop.txt")"
	[ "$(wc -l <"$T/loop_c.txt")" -ge 40 ] || fail "transcript too short: $(cat "$T/loop_c.txt")"
	diff -u "$T/loop_c.txt" "$T/rust_loop.txt" >"$T/diff" ||
		fail "rust_loop differs from loop.c (- loop.c, + rust_loop):"$'\n'"$(cat "$T/diff")"
	log "$(wc -l <"$T/loop_c.txt") steps, identical; $(grep -c ': ok' "$T/loop_c.txt") succeeded"
}

# The same ABI as loop.c over generated sequences: tests/abi_sequence.py runs, for each of three
# seeds (random, printed; ABI_SEQ_SEEDS=a,b,c reproduces them), at least ABI_SEQ_CALLS (3000)
# calls on loop0-3 and /dev/loop-control (every loop ioctl with good and bad arguments, failures
# at each of loop.c's checks, descriptors held and closed in random order so that autoclear and
# LOOP_CLR_FD fire at the last close, chains of loop devices, LOOP_CTL_ADD/REMOVE/GET_FREE,
# block-device reads and writes, backing files on tmpfs and on XFS grown, shrunk and replaced)
# against loop.ko and then rust_loop, printing each call's result and the devices' state after
# it; the two outputs must be equal line for line. The generator normalises the deliberate
# differences (README "Differences from loop.c": direct I/O below the backing file's alignment,
# reads past its end, writes past a backing device's end) and nothing else.
# udev is stopped for the duration (tests/lib.sh: udev_stop) and started again afterwards, also
# when the test fails: its opens after each uevent change the openers' count, which decides
# whether LOOP_CLR_FD clears at once and when autoclear fires, and its exclusive claims make
# binds and LOOP_SET_BLOCK_SIZE fail with EBUSY, at moments no sequence can predict.
timeout_t_ioctl_sequence_as_loop_c() { echo $((900 * ${TEST_SLOWDOWN:-1})); }
t_ioctl_sequence_as_loop_c() {
	local seeds calls drv n
	seeds=${ABI_SEQ_SEEDS:-$(for n in 1 2 3; do od -An -N4 -tu4 /dev/urandom | tr -d ' '; done | paste -sd,)}
	calls=${ABI_SEQ_CALLS:-3000}
	log "seeds $seeds, $calls calls each (ABI_SEQ_SEEDS=$seeds reproduces them)"
	trap sequence_cleanup EXIT
	udev_stop
	scratch_fs xfs
	mkdir -p "$SCRATCH/seq" "$T/seq-tmpfs"
	mount -t tmpfs -o size=512M none "$T/seq-tmpfs" || fail "mounting a tmpfs failed"
	for drv in loop_c rust_loop; do
		if [ $drv = loop_c ]; then
			unload_loop_drivers
			modprobe --ignore-install loop || fail "modprobe loop.ko failed"
		else
			load_rust_loop
		fi
		python3 "$ROOT/tests/abi_sequence.py" --tmpfs "$T/seq-tmpfs" --disk "$SCRATCH/seq" \
			--disk-dev "$(basename "$SCRATCH_DEV")" --seeds "$seeds" --calls "$calls" \
			>"$T/$drv.txt" 2>"$T/$drv.err" ||
			fail "the sequence failed on $drv: $(tail -n 5 "$T/$drv.err")"
	done
	unload_loop_drivers
	# Each seed ran its calls.
	n=$(awk -v c="$calls" '/ finished: [0-9]+ calls/ && $4 >= c {n++} END {print n + 0}' "$T/loop_c.txt")
	[ "$n" = "$(echo "$seeds" | tr ',' '\n' | wc -l)" ] ||
		fail "fewer than $calls calls in a seed: $(grep ' finished: ' "$T/loop_c.txt")"
	if ! diff -u "$T/loop_c.txt" "$T/rust_loop.txt" >"$T/diff"; then
		mkdir -p "$ROOT/results/tests"
		cp "$T/loop_c.txt" "$ROOT/results/tests/abi-sequence-loop_c.txt" 2>/dev/null || true
		cp "$T/rust_loop.txt" "$ROOT/results/tests/abi-sequence-rust_loop.txt" 2>/dev/null || true
		fail "rust_loop differs from loop.c (seeds $seeds; - loop.c, + rust_loop; both outputs in" \
			"results/tests/abi-sequence-*.txt):"$'\n'"$(head -n 40 "$T/diff")"
	fi
	log "$(wc -l <"$T/loop_c.txt") lines, identical: $(grep ' finished: ' "$T/loop_c.txt" | cut -d' ' -f4- | paste -sd';')"
}
# sequence_cleanup: what t_ioctl_sequence_as_loop_c set up goes, udevd runs again.
sequence_cleanup() {
	cleanup_loops
	unload_loop_drivers
	scratch_umount
	udev_restart
}

# LOOP_CHANGE_FD: only on a read-only device, only to a file of the same size.
t_ioctl_change_fd() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/a" 8
	fillimg "$T/b" 8
	fillimg "$T/c" 4
	local dev
	dev=$(free_loop)
	# Writable device: EINVAL.
	lioctl "$dev" set-fd "$T/a"
	expect_errno EINVAL "$dev" change-fd "$T/b"
	expect_errno EINVAL "$dev" change-fd "$T/b" --ro-file
	assert_sys "$dev" loop/backing_file "$T/a"
	detach "$dev"
	# Read-only device.
	lioctl "$dev" configure "$T/a" --flags 1
	expect_errno EINVAL "$dev" change-fd "$T/c" --ro-file
	expect_errno EBADF "$dev" change-fd fd=1000
	mkdir -p "$T/dir"
	expect_errno EINVAL "$dev" change-fd "$T/dir"
	expect_errno EINVAL "$dev" change-fd pipe
	assert_sys "$dev" loop/backing_file "$T/a"
	cmp "$dev" "$T/a" || fail "data before LOOP_CHANGE_FD"
	lioctl "$dev" change-fd "$T/b" --ro-file
	assert_sys "$dev" loop/backing_file "$T/b"
	assert_eq "$(status64 "$dev" inode)" "$(stat -c %i "$T/b")" "lo_inode after LOOP_CHANGE_FD"
	assert_sys "$dev" ro 1
	# The page cache of the loop device was invalidated (disk_force_media_change).
	cmp "$dev" "$T/b" || fail "data after LOOP_CHANGE_FD is not the new file's"
	# And back, with a writable descriptor (the device stays read-only).
	lioctl "$dev" change-fd "$T/a"
	cmp "$dev" "$T/a" || fail "data after changing back"
	assert_sys "$dev" ro 1
	detach "$dev"
	# With an offset: the sizes compared are those after the offset.
	truncate -s $((8 << 20)) "$T/c"
	lioctl "$dev" configure "$T/a" --flags 1 --offset $((1 << 20))
	lioctl "$dev" change-fd "$T/c" --ro-file
	cmp "$dev" "$T/c" 0 $((1 << 20)) || fail "data after LOOP_CHANGE_FD with an offset"
	detach "$dev"
}

# LOOP_SET_CAPACITY: the device follows the file's new size (and still honours the size limit).
t_ioctl_set_capacity() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	local dev
	dev=$(free_loop)
	lioctl "$dev" set-fd "$T/img"
	truncate -s 12M "$T/img"
	assert_eq "$(devsize "$dev")" $((4 << 20)) "size before LOOP_SET_CAPACITY"
	lioctl "$dev" set-capacity
	assert_eq "$(devsize "$dev")" $((12 << 20)) "size after LOOP_SET_CAPACITY"
	assert_sys "$dev" size $((12 * 2048))
	# The new part reads as the file's (sparse, zero) content; writes there reach the file.
	dd if=/dev/urandom of="$T/chunk" bs=1M count=1 status=none
	dd if="$T/chunk" of="$dev" bs=1M seek=10 oflag=direct status=none
	cmp -n $((1 << 20)) "$T/chunk" "$T/img" 0 $((10 << 20)) || fail "write to the grown part"
	lioctl "$dev" set-status64 --sizelimit $((6 << 20))
	truncate -s 16M "$T/img"
	lioctl "$dev" set-capacity
	assert_eq "$(devsize "$dev")" $((6 << 20)) "size limit after LOOP_SET_CAPACITY"
	detach "$dev"
}

# LOOP_SET_DIRECT_IO: ENXIO unbound; switching keeps data intact; nomerges follows the mode.
t_ioctl_set_direct_io() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 8
	local dev
	dev=$(free_loop)
	expect_errno ENXIO "$dev" set-direct-io 1
	lioctl "$dev" set-fd "$T/img"
	assert_sys "$dev" loop/dio 0
	# nomerges follows the mode in rust_loop (2 buffered, 0 direct), as loop.c did up to 6.x;
	# loop.c of 7.3 leaves it alone.
	is_rust && assert_sys "$dev" queue/nomerges 2
	lioctl "$dev" set-direct-io 0
	assert_sys "$dev" loop/dio 0
	local dio_ok=0
	if lioctl "$dev" set-direct-io 1 2>"$T/err"; then
		dio_ok=1
		assert_sys "$dev" loop/dio 1
		assert_eq "$(($(status64 "$dev" flags) & 16))" 16 "LO_FLAGS_DIRECT_IO"
		is_rust && assert_sys "$dev" queue/nomerges 0
		cmp "$dev" "$T/img" || fail "data in direct-I/O mode"
		lioctl "$dev" set-direct-io 0
		assert_sys "$dev" loop/dio 0
		is_rust && assert_sys "$dev" queue/nomerges 2
	else
		# The backing filesystem cannot do direct I/O: EINVAL, nothing changes.
		grep -q EINVAL "$T/err" || fail "LOOP_SET_DIRECT_IO 1: $(cat "$T/err")"
		assert_sys "$dev" loop/dio 0
		log "backing file system has no direct I/O"
	fi
	# With an offset that is not block aligned loop.c refuses direct I/O (EINVAL); rust_loop
	# keeps it on wherever the file can do direct I/O at all, those requests going buffered.
	lioctl "$dev" set-status64 --offset 1000
	if is_rust && [ $dio_ok = 1 ]; then
		lioctl "$dev" set-direct-io 1 || fail "LOOP_SET_DIRECT_IO 1 at offset 1000 failed"
		assert_sys "$dev" loop/dio 1
		cmp -n "$(devsize "$dev")" "$dev" "$T/img" 0 1000 || fail "data with offset 1000 in direct-I/O mode"
		[ "$(stat_of "$dev" dio_fallbacks)" -gt 0 ] || fail "dio_fallbacks did not count the unaligned reads"
		lioctl "$dev" set-direct-io 0
	else
		expect_errno EINVAL "$dev" set-direct-io 1
	fi
	assert_sys "$dev" loop/dio 0
	cmp -n "$(devsize "$dev")" "$dev" "$T/img" 0 1000 || fail "data with offset 1000"
	detach "$dev"
}

# An unknown ioctl number on /dev/loopN: EINVAL, as loop.c's lo_simple_ioctl (callers test it).
t_ioctl_unknown() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	local dev want=EINVAL n
	dev=$(free_loop)
	for n in 0x4C0B 0x4C0F 0x4C80 0x4CFF 0x12345678; do
		expect_errno $want "$dev" raw $n 0
	done
	lioctl "$dev" set-fd "$T/img"
	expect_errno $want "$dev" raw 0x4C0B 0
	# Generic block ioctls still work: BLKSSZGET via blockdev.
	assert_eq "$(blockdev --getss "$dev")" 512 "BLKSSZGET"
	detach "$dev"
}

# Read-only open as an unprivileged user: reconfiguring ioctls EPERM, GET_STATUS64 allowed;
# root may reconfigure through a read-only open (CAP_SYS_ADMIN).
t_ioctl_permissions() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	local dev
	dev=$(free_loop)
	lioctl "$dev" set-fd "$T/img"
	expect_errno EPERM --ro --user 65534 "$dev" set-status64 --offset 4096
	expect_errno EPERM --ro --user 65534 "$dev" set-status --offset 4096
	expect_errno EPERM --ro --user 65534 "$dev" set-capacity
	expect_errno EPERM --ro --user 65534 "$dev" set-direct-io 0
	expect_errno EPERM --ro --user 65534 "$dev" set-block-size 1024
	assert_eq "$(status64 "$dev" offset)" 0 "offset after EPERM"
	assert_sys "$dev" queue/logical_block_size 512
	lioctl --ro --user 65534 "$dev" get-status64 | grep -qx "offset=0" || fail "GET_STATUS64 as nobody"
	lioctl --ro --user 65534 "$dev" get-status | grep -qx "offset=0" || fail "GET_STATUS as nobody"
	# A writable open needs no capability.
	lioctl --user 65534 "$dev" set-status64 --offset 4096 2>/dev/null ||
		log "(nobody cannot open $dev read-write; skipped the writable-open case)"
	# Root through a read-only open.
	lioctl --ro "$dev" set-status64 --offset 8192
	assert_eq "$(status64 "$dev" offset)" 8192 "offset set by root through a read-only open"
	lioctl --ro "$dev" set-block-size 1024
	assert_sys "$dev" queue/logical_block_size 1024
	detach "$dev"
}

# Exclusive openers: LOOP_CONFIGURE through an O_EXCL descriptor works; while another process
# holds the device exclusively (a mount), LOOP_SET_BLOCK_SIZE from a plain open is EBUSY.
t_ioctl_exclusive_claim() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 32M
	local dev
	dev=$(free_loop)
	lioctl --excl "$dev" configure "$T/img"
	mkfs.ext4 -q -F "$dev"
	mkdir -p "$T/mnt"
	mount "$dev" "$T/mnt"
	expect_errno EBUSY "$dev" set-block-size 4096
	assert_sys "$dev" queue/logical_block_size 512
	umount "$T/mnt"
	lioctl "$dev" set-block-size 4096
	assert_sys "$dev" queue/logical_block_size 4096
	detach "$dev"
}
