# shellcheck shell=bash
# /dev/loop-control: LOOP_CTL_ADD, LOOP_CTL_REMOVE, LOOP_CTL_GET_FREE, with loop.c's errno values.

CTL=/dev/loop-control

t_ctl_node() {
	load_rust_loop
	[ -c $CTL ] || fail "$CTL is not a character device"
	assert_eq "$(stat -c '%t:%T' $CTL)" "a:ed" "$CTL major:minor (hex)"
	assert_file /sys/class/misc/loop-control/dev 10:237
	# Eight devices at load (CONFIG_BLK_DEV_LOOP_MIN_COUNT).
	local i
	for i in 0 1 2 3 4 5 6 7; do
		[ -b /dev/loop$i ] || fail "/dev/loop$i missing"
		assert_file /sys/block/loop$i/dev "7:$i"
	done
	[ ! -e /sys/block/loop8 ] || fail "loop8 exists at load"
}

# ADD of a new index creates the device; of an existing one: EEXIST. REMOVE deletes it.
t_ctl_add_remove() {
	load_rust_loop
	trap cleanup_loops EXIT
	assert_eq "$(lioctl $CTL ctl-add 42)" 42 "LOOP_CTL_ADD 42"
	udevadm settle
	[ -b /dev/loop42 ] || fail "/dev/loop42 missing after LOOP_CTL_ADD"
	assert_file /sys/block/loop42/dev 7:42
	expect_errno EEXIST $CTL ctl-add 42
	expect_errno EEXIST $CTL ctl-add 0
	# The new device works.
	fillimg "$T/img" 4
	lioctl /dev/loop42 set-fd "$T/img"
	cmp /dev/loop42 "$T/img" || fail "data through loop42"
	lioctl /dev/loop42 clr-fd
	wait_unbound /dev/loop42
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-remove 42)" 0 "LOOP_CTL_REMOVE 42"
	udevadm settle
	[ ! -e /sys/block/loop42 ] || fail "loop42 still in sysfs after LOOP_CTL_REMOVE"
	expect_errno ENODEV $CTL ctl-remove 42
	# And can be added again.
	assert_eq "$(lioctl $CTL ctl-add 42)" 42 "LOOP_CTL_ADD 42 again"
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-remove 42)" 0 "LOOP_CTL_REMOVE 42 again"
}

# LOOP_CTL_REMOVE leaves the end of the teardown (freeing the tag set and the disk, stopping the
# workers of the last binding) to the module's release queue: when the call returns the device
# is gone from sysfs and its number can be added again at once, and unloading the module right
# after runs what is still queued (a teardown left behind would run the module's code after it
# is gone: an oops, which the runner catches in the kernel log).
t_ctl_remove_then_unload() {
	load_rust_loop max_loop=0
	trap cleanup_loops EXIT
	fillimg "$T/img" 1
	local round n
	for round in 1 2 3; do
		assert_eq "$(lioctl $CTL ctl-add 40 41 42 | xargs)" "40 41 42" "LOOP_CTL_ADD (round $round)"
		for n in 40 41 42; do
			losetup "/dev/loop$n" "$T/img" || fail "losetup loop$n (round $round)"
			cmp "/dev/loop$n" "$T/img" || fail "data through loop$n (round $round)"
			losetup -d "/dev/loop$n"
			wait_unbound "/dev/loop$n"
		done
		udevadm settle
		assert_eq "$(lioctl $CTL ctl-remove 40 41 42 | xargs)" "0 0 0" "LOOP_CTL_REMOVE (round $round)"
		for n in 40 41 42; do
			[ ! -e "/sys/block/loop$n" ] || fail "loop$n in sysfs after LOOP_CTL_REMOVE returned"
		done
	done
	# Added again at once, bound, removed, and the module unloaded at once.
	assert_eq "$(lioctl $CTL ctl-add 40)" 40 "LOOP_CTL_ADD 40 right after its removal"
	losetup /dev/loop40 "$T/img" || fail "losetup loop40 after re-adding"
	losetup -d /dev/loop40
	wait_unbound /dev/loop40
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-remove 40)" 0 "LOOP_CTL_REMOVE 40"
	rmmod rust_loop || fail "rmmod right after LOOP_CTL_REMOVE failed"
	[ ! -d /sys/module/rust_loop ] || fail "rust_loop still loaded"
}

# ADD with a negative index picks the lowest free number.
t_ctl_add_any() {
	load_rust_loop
	trap cleanup_loops EXIT
	local n
	n=$(lioctl $CTL ctl-add -1)
	assert_eq "$n" 8 "LOOP_CTL_ADD -1 with loop0..7 present"
	udevadm settle
	[ -b /dev/loop8 ] || fail "/dev/loop8 missing"
	lioctl $CTL ctl-remove 3 >/dev/null
	assert_eq "$(lioctl $CTL ctl-add -1)" 3 "LOOP_CTL_ADD -1 after removing loop3"
	udevadm settle
	lioctl $CTL ctl-remove 8 >/dev/null
}

# Adds from many tasks at once, as container hosts make them: the number is chosen under the
# table's lock, the disk added outside it (loop.c's loop_add), so the tasks run side by side and
# still never get the same number; adds of the same explicit number: one wins, the others EEXIST.
t_ctl_add_parallel() {
	load_rust_loop
	trap cleanup_loops EXIT
	local k
	# 8 tasks x 5 adds of any number, and 8 tasks adding 100..104 (each number wins once); one
	# process per task, one ioctl after the other.
	for k in 0 1 2 3 4 5 6 7; do
		lioctl $CTL ctl-add -1 -1 -1 -1 -1 >"$T/any.$k" 2>&1 &
		lioctl $CTL ctl-add 100 101 102 103 104 >"$T/fixed.$k" 2>/dev/null &
	done
	wait
	cat "$T"/any.* | sort -n >"$T/any"
	assert_eq "$(wc -l <"$T/any")" 40 "numbers returned by 40 adds of any number"
	assert_eq "$(sort -n "$T/any" | uniq -d | xargs)" "" "numbers returned twice"
	grep -vqE '^[0-9]+$' "$T/any" && fail "an add of any number failed: $(grep -vE '^[0-9]+$' "$T/any" | head -3)"
	assert_eq "$(sort -n "$T/any" | head -1)-$(sort -n "$T/any" | tail -1)" "8-47" \
		"the 40 numbers: the lowest free ones, 8..47"
	local n wins
	for n in 100 101 102 103 104; do
		wins=$(cat "$T"/fixed.* | grep -cx "$n" || true)
		assert_eq "$wins" 1 "adds of loop$n that succeeded (of 8)"
	done
	assert_eq "$(cat "$T"/fixed.* | wc -l)" 40 "results of the 40 adds of fixed numbers"
	assert_eq "$(cat "$T"/fixed.* | grep -cv -e '^10[0-4]$' -e '^EEXIST$' || true)" 0 \
		"adds of a taken number that failed otherwise than EEXIST"
	udevadm settle
	for n in $(cat "$T/any") 100 101 102 103 104; do
		assert_file "/sys/block/loop$n/dev" "7:$n"
	done
	# Removes from many tasks at once: each device goes exactly once.
	for k in 0 1 2 3 4 5 6 7; do
		# shellcheck disable=SC2046 # one argument per number
		lioctl $CTL ctl-remove $(sed -n "$((k * 5 + 1)),$((k * 5 + 5))p" "$T/any") >"$T/rm.$k" 2>&1 &
	done
	wait
	assert_eq "$(cat "$T"/rm.* | grep -cx 0 || true)" 40 "removes that succeeded (of 40)"
	udevadm settle
	for n in $(cat "$T/any"); do
		[ ! -e "/sys/block/loop$n" ] || fail "loop$n still in sysfs after its removal"
	done
	for n in 100 101 102 103 104; do lioctl $CTL ctl-remove $n >/dev/null; done
}

# REMOVE: missing index ENODEV, negative EINVAL, bound or open device EBUSY.
t_ctl_remove_errors() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	expect_errno ENODEV $CTL ctl-remove 999
	expect_errno ENODEV $CTL ctl-remove 8
	expect_errno EINVAL $CTL ctl-remove -1
	expect_errno EINVAL $CTL ctl-remove -100
	# Bound.
	lioctl /dev/loop2 set-fd "$T/img"
	udevadm settle
	expect_errno EBUSY $CTL ctl-remove 2
	assert_sys /dev/loop2 loop/backing_file "$T/img"
	lioctl /dev/loop2 clr-fd
	wait_unbound /dev/loop2
	udevadm settle
	# Open (unbound).
	exec 3</dev/loop2
	expect_errno EBUSY $CTL ctl-remove 2
	exec 3<&-
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-remove 2)" 0 "LOOP_CTL_REMOVE after close"
	[ ! -e /sys/block/loop2 ] || fail "loop2 still there"
	# A refused removal leaves the device visible to GET_FREE and REMOVE.
	exec 3</dev/loop1
	expect_errno EBUSY $CTL ctl-remove 1
	exec 3<&-
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-get-free)" 0 "GET_FREE"
	assert_eq "$(lioctl $CTL ctl-remove 1)" 0 "LOOP_CTL_REMOVE 1 after a refused one"
}

# Unknown commands on /dev/loop-control: ENOSYS.
t_ctl_unknown_cmd() {
	load_rust_loop
	local n
	for n in 0x4C83 0x4C00 0x4C05 0x1234 0; do
		expect_errno ENOSYS $CTL raw $n 0
	done
}

# GET_FREE: the lowest unbound device; a new one when all are bound; never a removed one.
t_ctl_get_free() {
	load_rust_loop
	trap cleanup_loops EXIT
	mkimg "$T/img" 4M
	assert_eq "$(lioctl $CTL ctl-get-free)" 0 "GET_FREE with all unbound"
	lioctl /dev/loop0 set-fd "$T/img"
	lioctl /dev/loop1 set-fd "$T/img"
	assert_eq "$(lioctl $CTL ctl-get-free)" 2 "GET_FREE with loop0, loop1 bound"
	udevadm settle # udev may still be probing the devices (an open device refuses removal)
	assert_eq "$(lioctl $CTL ctl-remove 2)" 0 "LOOP_CTL_REMOVE 2"
	assert_eq "$(lioctl $CTL ctl-get-free)" 3 "GET_FREE after removing loop2"
	local i
	for i in 3 4 5 6 7; do lioctl /dev/loop$i set-fd "$T/img"; done
	# All bound: a new device (the lowest free index, 2).
	assert_eq "$(lioctl $CTL ctl-get-free)" 2 "GET_FREE with every device bound"
	udevadm settle
	[ -b /dev/loop2 ] || fail "GET_FREE did not create /dev/loop2"
	# GET_FREE does not bind: asking again gives the same device.
	assert_eq "$(lioctl $CTL ctl-get-free)" 2 "GET_FREE twice"
	# losetup -f agrees.
	assert_eq "$(losetup -f)" /dev/loop2 "losetup -f"
	losetup -D
}

# Opening /dev/loopN of a device that does not exist creates it (loop_probe).
t_ctl_probe_on_open() {
	load_rust_loop
	trap 'rm -f "$T/loop77"; cleanup_loops' EXIT
	[ ! -e /sys/block/loop77 ] || fail "loop77 exists before the open"
	rm -f "$T/loop77"
	mknod "$T/loop77" b 7 77
	exec 3<"$T/loop77" || fail "open of a node for a missing loop device failed"
	exec 3<&-
	udevadm settle
	[ -e /sys/block/loop77 ] || fail "opening 7:77 did not create loop77"
	assert_eq "$(lioctl $CTL ctl-remove 77)" 0 "remove loop77"
}

# max_loop=N: N devices at load, none created by opening an index >= N; CTL_ADD still works.
t_ctl_max_loop_param() {
	load_rust_loop max_loop=2
	trap 'rm -f "$T/loop5"; cleanup_loops' EXIT
	[ -e /sys/block/loop1 ] || fail "loop1 missing with max_loop=2"
	[ ! -e /sys/block/loop2 ] || fail "loop2 exists with max_loop=2"
	rm -f "$T/loop5"
	mknod "$T/loop5" b 7 5
	if exec 3<"$T/loop5"; then exec 3<&-; fi 2>/dev/null
	udevadm settle
	[ ! -e /sys/block/loop5 ] || fail "opening 7:5 created loop5 despite max_loop=2"
	assert_eq "$(lioctl $CTL ctl-add 5)" 5 "LOOP_CTL_ADD 5 with max_loop=2"
	udevadm settle
	assert_eq "$(lioctl $CTL ctl-remove 5)" 0 "remove loop5"
}
