# shellcheck shell=bash
# The module loads, unloads and loads again; params are visible.

t_module_loads() {
	load_rust_loop
	[ -d /sys/module/rust_loop ] || fail "/sys/module/rust_loop missing"
	dmesg | grep -q 'rust_loop: module loaded' || fail "no load message in the kernel log"
}

t_module_unloads_and_reloads() {
	load_rust_loop
	rmmod rust_loop || fail "rmmod failed"
	[ ! -d /sys/module/rust_loop ] || fail "/sys/module/rust_loop still there after rmmod"
	insmod "$KO" || fail "second insmod failed"
	[ -d /sys/module/rust_loop ] || fail "/sys/module/rust_loop missing after reload"
	# udev opens the new devices to probe them (slowly on the debug kernel): retry while it does.
	udevadm settle 2>/dev/null || true
	wait_for 10 rmmod rust_loop || fail "rmmod after reload: $(rmmod rust_loop 2>&1)"
}
