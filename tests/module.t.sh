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

# The substitution a blktests user makes (README "From source, without the package"): modprobe.d `install loop` and
# `remove loop` directives, so that `modprobe loop` (blktests runs it before each loop test)
# loads rust_loop with the given options, a second one is a no-op, and `modprobe -r loop`
# unloads it; loop.ko stays out.
t_module_modprobe_loop_loads_rust_loop() {
	is_rust || { log "rust_loop only"; return 0; }
	unload_loop_drivers
	local conf=/run/modprobe.d/rust-loop-tests.conf dev
	[ -f "$conf" ] || fail "no $conf (tests/run.sh writes it)"
	cp "$conf" "$T/modprobe.conf.saved"
	# shellcheck disable=SC2064
	trap "cp '$T/modprobe.conf.saved' '$conf'; unload_loop_drivers" EXIT
	cat >"$conf" <<-CONF
		install loop grep -q '^rust_loop ' /proc/modules || /sbin/insmod $KO \$CMDLINE_OPTS
		remove loop /sbin/rmmod rust_loop
	CONF
	modprobe loop max_loop=2 || fail "modprobe loop failed"
	[ -d /sys/module/rust_loop ] || fail "modprobe loop did not load rust_loop"
	[ ! -d /sys/module/loop ] || fail "modprobe loop loaded loop.ko"
	[ -b /dev/loop1 ] && [ ! -e /sys/block/loop2 ] ||
		fail "max_loop=2 did not reach rust_loop: $(ls /sys/block | grep loop | xargs)"
	modprobe loop || fail "a second modprobe loop failed"
	mkimg "$T/img" 16M
	dev=$(losetup -f --show "$T/img") || fail "losetup on the modprobed rust_loop failed"
	losetup -d "$dev"
	udevadm settle 2>/dev/null || true
	wait_for 10 modprobe -r loop || fail "modprobe -r loop: $(modprobe -r loop 2>&1)"
	[ ! -d /sys/module/rust_loop ] || fail "modprobe -r loop left rust_loop loaded"
}

# The module's KUnit suites (the queue-load rule, the dev_t encoding, the old loop_info
# conversions, the counters; #[kunit_tests] in rust_loop/) run when it loads: each reports ok,
# none fails.
t_module_kunit() {
	is_rust || { log "rust_loop only"; return 0; }
	need_config CONFIG_KUNIT
	# Built in, KUnit has its parameters (kunit.enable, ...) under /sys/module/kunit.
	[ -d /sys/module/kunit ] || fail "the kernel has no KUnit (config/kernel.config asks for CONFIG_KUNIT)"
	dmesg -C
	load_rust_loop
	local log suite
	log=$(dmesg)
	for suite in rust_loop_dispatch rust_loop_device rust_loop_ioctl rust_loop_stats; do
		echo "$log" | grep -qE "^(\[[ 0-9.]+\] )? *ok [0-9]+ $suite\$" ||
			fail "KUnit suite $suite did not report ok: $(echo "$log" | grep -E "$suite|not ok" | head -5)"
	done
	! echo "$log" | grep -qE 'not ok [0-9]+ ' || fail "a KUnit case failed: $(echo "$log" | grep -E 'not ok' | head -5)"
	log "$(echo "$log" | grep -cE '^(\[[ 0-9.]+\] )? *ok [0-9]+ ') KUnit results ok"
}
