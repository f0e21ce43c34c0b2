# shellcheck shell=bash
# Permissions, as loop.c: lo_ioctl checks no capability for LOOP_SET_FD / LOOP_CONFIGURE /
# LOOP_CHANGE_FD / LOOP_CLR_FD (access to the device node is the gate), and asks for a writable
# open or CAP_SYS_ADMIN for LOOP_SET_STATUS(64), LOOP_SET_CAPACITY, LOOP_SET_DIRECT_IO and
# LOOP_SET_BLOCK_SIZE; a backing file opened read-only, or a device opened read-only, makes a
# read-only device (loop_configure). The EPERM cases of a read-only open as nobody are in
# core-ioctl/t_ioctl_permissions. "nobody" (65534) is the unprivileged user.

NOBODY=65534

# as_nobody CMD...: run CMD as nobody, no supplementary groups, no capabilities.
as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups --inh-caps=-all -- "$@"; }

# nobody, given a writable descriptor of a loop device (as a member of group disk would have),
# cannot bind a file it cannot write as a writable device: opening it read-write is refused,
# and the read-only descriptor it can get binds a read-only device, through LOOP_SET_FD and
# through LOOP_CONFIGURE without LO_FLAGS_READ_ONLY. Nothing it can do afterwards (clearing the
# flags, LOOP_CHANGE_FD, BLKROSET) makes the device writable, and the file never changes.
t_perm_unprivileged_readonly_file_binds_readonly() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	chmod 0644 "$T/img"
	cp "$T/img" "$T/orig"
	cp "$T/img" "$T/img2"
	chmod 0644 "$T/img2"
	local dev
	dev=$(free_loop)
	as_nobody test -w "$T/img" && fail "nobody can write $T/img: the test needs a file it cannot write"
	# A read-write open of the file is refused before the driver is involved.
	expect_errno EACCES --user $NOBODY "$dev" set-fd "$T/img"
	[ ! -d "/sys/block/$(basename "$dev")/loop" ] || fail "$dev bound after EACCES"
	local how
	for how in set-fd configure; do
		lioctl --user $NOBODY "$dev" $how "$T/img" --ro-file || fail "nobody: $how with a read-only file"
		assert_sys "$dev" ro 1
		assert_sys "$dev" loop/backing_file "$T/img"
		assert_eq "$(($(status64 "$dev" flags) & 1))" 1 "LO_FLAGS_READ_ONLY after $how by nobody"
		# Writes through the device fail (as root, through the block layer's read-only check).
		if dd if=/dev/zero of="$dev" bs=4k count=1 oflag=direct status=none 2>"$T/err"; then
			fail "write to the read-only device succeeded"
		fi
		# nobody cannot clear LO_FLAGS_READ_ONLY (not clearable), nor BLKROSET (CAP_SYS_ADMIN).
		lioctl --user $NOBODY "$dev" set-status64 --flags 0
		assert_sys "$dev" ro 1
		python3 - "$dev" <<-'EOF' || fail "BLKROSET 0 as nobody was not refused with EACCES"
			import fcntl, os, struct, sys, errno
			fd = os.open(sys.argv[1], os.O_RDONLY)
			os.setgroups([]); os.setgid(65534); os.setuid(65534)
			try:
			    fcntl.ioctl(fd, 0x125D, struct.pack("i", 0))  # BLKROSET
			except OSError as e:
			    sys.exit(0 if e.errno == errno.EACCES else 1)
			sys.exit(1)
		EOF
		assert_sys "$dev" ro 1
		# LOOP_CHANGE_FD to another read-only file: still read-only.
		lioctl --user $NOBODY "$dev" change-fd "$T/img2" --ro-file
		assert_sys "$dev" loop/backing_file "$T/img2"
		assert_sys "$dev" ro 1
		lioctl --user $NOBODY "$dev" change-fd "$T/img" --ro-file
		# Even root's BLKROSET 0 leaves the disk read-only (set_disk_ro by the driver).
		blockdev --setrw "$dev"
		if dd if=/dev/zero of="$dev" bs=4k count=1 oflag=direct status=none 2>/dev/null; then
			fail "write after BLKROSET 0 succeeded on a device bound to a read-only file"
		fi
		cmp "$dev" "$T/orig" || fail "device content differs from the file"
		lioctl "$dev" clr-fd
		wait_unbound "$dev"
	done
	cmp "$T/img" "$T/orig" || fail "the file nobody could not write has changed"
	cmp "$T/img2" "$T/orig" || fail "the second file nobody could not write has changed"
}

# A descriptor that grants no access (O_PATH) is not a backing file: EBADF, even for a file
# nobody cannot read at all; and nobody cannot open such a file read-only either.
t_perm_unprivileged_o_path_refused() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/secret" 4
	chmod 0600 "$T/secret"
	local dev
	dev=$(free_loop)
	expect_errno EBADF --user $NOBODY "$dev" set-fd "$T/secret" --o-path
	expect_errno EBADF --user $NOBODY "$dev" configure "$T/secret" --o-path
	expect_errno EACCES --user $NOBODY "$dev" set-fd "$T/secret" --ro-file
	[ ! -d "/sys/block/$(basename "$dev")/loop" ] || fail "$dev bound to an O_PATH descriptor"
	# root's O_PATH descriptor is refused the same way.
	expect_errno EBADF "$dev" set-fd "$T/secret" --o-path
}

# The ioctls that need no capability in loop.c need none here: nobody with a read-only
# descriptor of the device may bind (read-only), change the file of, and clear a device; nobody
# with a descriptor of /dev/loop-control may add and remove devices. The reconfiguring ioctls
# through that read-only descriptor are EPERM, also for root without CAP_SYS_ADMIN; with it (or
# a writable open) they work.
t_perm_capability_matrix() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/a" 4
	fillimg "$T/b" 4
	chmod 0644 "$T/a" "$T/b"
	local dev
	dev=$(free_loop)
	lioctl --ro --user $NOBODY "$dev" configure "$T/a" --ro-file || fail "LOOP_CONFIGURE by nobody (ro open)"
	assert_sys "$dev" ro 1
	lioctl --ro --user $NOBODY "$dev" get-status64 | grep -qx "number=$(loopnr "$dev")" ||
		fail "GET_STATUS64 by nobody"
	lioctl --ro --user $NOBODY "$dev" change-fd "$T/b" --ro-file || fail "LOOP_CHANGE_FD by nobody"
	assert_sys "$dev" loop/backing_file "$T/b"
	expect_errno EPERM --ro --user $NOBODY "$dev" set-status64 --flags 4
	expect_errno EPERM --ro --user $NOBODY "$dev" set-capacity
	expect_errno EPERM --ro --user $NOBODY "$dev" set-direct-io 1
	expect_errno EPERM --ro --user $NOBODY "$dev" set-block-size 4096
	# root without CAP_SYS_ADMIN, read-only open: EPERM too (the check is the capability).
	local nocap=(setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin --)
	local out
	for op in "set-status64 --flags 4" "set-capacity" "set-block-size 4096" "set-direct-io 0"; do
		# shellcheck disable=SC2086
		out=$("${nocap[@]}" python3 -S "$ROOT/tests/loopioctl.py" --ro "$dev" $op 2>&1) &&
			fail "root without CAP_SYS_ADMIN: $op through a read-only open succeeded"
		case "$out" in *EPERM*) ;; *) fail "root without CAP_SYS_ADMIN: $op: $out" ;; esac
	done
	# The same through a writable open needs no capability.
	"${nocap[@]}" python3 -S "$ROOT/tests/loopioctl.py" "$dev" set-block-size 1024 ||
		fail "root without CAP_SYS_ADMIN: LOOP_SET_BLOCK_SIZE through a writable open"
	assert_sys "$dev" queue/logical_block_size 1024
	# root with CAP_SYS_ADMIN through a read-only open.
	lioctl --ro "$dev" set-block-size 512
	assert_sys "$dev" queue/logical_block_size 512
	lioctl --ro --user $NOBODY "$dev" clr-fd || fail "LOOP_CLR_FD by nobody (ro open)"
	wait_unbound "$dev"
	# /dev/loop-control: the node is root's, but a descriptor is all it takes.
	as_nobody python3 -S "$ROOT/tests/loopioctl.py" /dev/loop-control ctl-add 40 2>/dev/null &&
		fail "nobody opened /dev/loop-control"
	assert_eq "$(lioctl --user $NOBODY /dev/loop-control ctl-add 40)" 40 "LOOP_CTL_ADD by nobody"
	[ -b /dev/loop40 ] || wait_for 5 test -b /dev/loop40 || fail "/dev/loop40 missing"
	udevadm settle
	wait_for 5 lioctl --user $NOBODY /dev/loop-control ctl-remove 40 || fail "LOOP_CTL_REMOVE by nobody"
	[ ! -e /sys/block/loop40 ] || fail "loop40 still there"
}

# losetup run by nobody: it cannot open /dev/loop-control or the device nodes, so nothing is
# bound.
t_perm_unprivileged_losetup() {
	load_rust_loop
	trap cleanup_loops EXIT
	fillimg "$T/img" 4
	chmod 0666 "$T/img"
	if as_nobody losetup -f --show "$T/img" >"$T/out" 2>&1; then
		fail "losetup -f by nobody succeeded: $(cat "$T/out")"
	fi
	if as_nobody losetup /dev/loop0 "$T/img" >"$T/out" 2>&1; then
		fail "losetup /dev/loop0 by nobody succeeded"
	fi
	[ -z "$(losetup -l -n)" ] || fail "a device was bound: $(losetup -l -n)"
}
