# shellcheck shell=bash
# The 32-bit compat ioctls: tests/compat/loop32 (built with gcc -m32 by scripts/check.sh) runs
# every loop ioctl as a 32-bit program would, against rust_loop (or loop.ko: TEST_DRIVER=loop).

t_compat_32bit_ioctls() {
	local prog=$ROOT/tests/compat/loop32
	[ -x "$prog" ] || fail "$prog not built (scripts/check.sh builds it with gcc -m32)"
	load_rust_loop max_loop=1
	mkimg "$T/img" 1M
	"$prog" /dev/loop0 "$T/img" || fail "32-bit loop ioctls failed (see above)"
	# The device is unbound again, and works for a 64-bit user.
	[ ! -d /sys/block/loop0/loop ] || fail "loop0 still bound after the 32-bit program"
	local dev
	dev=$(attach "$T/img")
	assert_eq "$dev" /dev/loop0 "64-bit attach after the 32-bit program"
	detach "$dev"
}
