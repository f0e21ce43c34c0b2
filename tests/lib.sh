# shellcheck shell=bash
# Helpers for the in-VM tests. Sourced by tests/run.sh before each test file.

KO=${KO:-$ROOT/rust_loop.ko}
T=${T:-/tmp/rust-loop-test}
mkdir -p "$T"

fail() { echo "FAIL: $*" >&2; exit 1; }
# skip REASON: the test cannot run here (a kernel option or tool it needs is missing); the runner
# reports it as skipped with REASON, never as passed.
skip() { echo "SKIP: $*"; exit 77; }
# need_config CONFIG_X...: skips the test unless the running kernel has each option (=y or =m),
# read from its config (KERNEL_CONFIG, passed by scripts/check.sh: the project kernel's .config
# or the stock kernel's /lib/modules/<release>/config). Options Debian's kernel lacks are why
# some tests run only on the project's kernels (docs/development.md "Which kernel runs what").
need_config() {
	local cfg=${KERNEL_CONFIG:-/lib/modules/$(uname -r)/config} o
	[ -r "$cfg" ] || fail "no kernel config to check $* against ($cfg)"
	for o in "$@"; do
		grep -qE "^$o=[ym]$" "$cfg" || skip "the kernel has no $o (KERNEL=default has it)"
	done
}
log() { echo "  # $*"; }

# assert_eq ACTUAL EXPECTED MESSAGE
assert_eq() { [ "$1" == "$2" ] || fail "$3: got '$1', expected '$2'"; }
# assert_file FILE EXPECTED: the file's content (one line) equals EXPECTED
assert_file() { local v; v=$(cat "$1") || fail "cannot read $1"; assert_eq "$v" "$2" "$1"; }
# assert_fails COMMAND...: the command must exit non-zero
assert_fails() { if "$@" >/dev/null 2>&1; then fail "expected failure: $*"; fi; }

# ioctl helper: tests/loopioctl.py CMD... (prints results, exits with errno on error)
lioctl() {
	local rc=0
	python3 -S "$ROOT/tests/loopioctl.py" "$@" || rc=$?
	[ $rc = 0 ] || echo "(loopioctl $* exited $rc)" >&2
	return $rc
}
# expect_errno ERRNO-NAME ARGS...: loopioctl.py ARGS must fail with that errno
expect_errno() {
	local want=$1 out
	shift
	out=$(lioctl "$@" 2>&1) && fail "loopioctl $* succeeded, expected $want"
	case "$out" in *"$want"*) ;; *) fail "loopioctl $*: expected $want, got: $out" ;; esac
}

# Loads rust_loop with the given parameters (unloading loop.ko or a previous rust_loop first).
load_rust_loop() {
	unload_loop_drivers
	insmod "$KO" "$@" || fail "insmod $KO $* failed"
	udevadm settle 2>/dev/null || true
	[ -d /sys/module/rust_loop ] || fail "/sys/module/rust_loop missing after insmod"
}

# Detaches every loop device and unloads whichever loop driver is loaded.
unload_loop_drivers() {
	losetup -D 2>/dev/null || true
	udevadm settle 2>/dev/null || true
	local m
	for m in rust_loop loop; do
		if [ -d /sys/module/$m ]; then
			local i
			for i in 1 2 3 4 5 6 7 8 9 10; do
				rmmod $m 2>/dev/null && break
				sleep 0.3
			done
			[ ! -d /sys/module/$m ] || fail "cannot unload $m: $(rmmod $m 2>&1)"
		fi
	done
}

# mkimg PATH SIZE: a sparse image file
mkimg() { rm -f "$1"; truncate -s "$2" "$1"; }
# fillimg PATH SIZE_MIB: an image filled with random data
fillimg() { dd if=/dev/urandom of="$1" bs=1M count="$2" status=none; }

# Number of the loop device in /dev/loopN
loopnr() { echo "${1#/dev/loop}"; }

# scratch_fs xfs|ext4: a fresh filesystem on the scratch disk, mounted at $SCRATCH (echoed).
SCRATCH=/tmp/rust-loop-scratch
# scratch_fs FS [MOUNT_OPTIONS]: a fresh FS (xfs, ext4, btrfs) on the scratch disk, or a 1 GiB
# tmpfs (tmpfs), mounted at $SCRATCH
scratch_fs() {
	local fs=$1 opts=${2:-}
	scratch_umount
	mkdir -p "$SCRATCH"
	if [ "$fs" = tmpfs ]; then
		mount -t tmpfs -o "size=1G${opts:+,$opts}" none "$SCRATCH" || fail "mounting tmpfs failed"
		return 0
	fi
	[ -b "${SCRATCH_DEV:-}" ] || fail "no scratch disk (SCRATCH_DEV=${SCRATCH_DEV:-unset})"
	case "$fs" in
	xfs) mkfs.xfs -q -f "$SCRATCH_DEV" ;;
	ext4) mkfs.ext4 -q -F "$SCRATCH_DEV" ;;
	btrfs) mkfs.btrfs -q -f "$SCRATCH_DEV" >/dev/null ;;
	*) fail "scratch_fs: unknown filesystem $fs" ;;
	esac
	mount ${opts:+-o "$opts"} "$SCRATCH_DEV" "$SCRATCH" || fail "mounting $fs on $SCRATCH_DEV failed"
}
scratch_umount() { if mountpoint -q "$SCRATCH" 2>/dev/null; then umount "$SCRATCH"; fi; }

# stat_of DEV NAME: a counter of rust_loop's DEV, /sys/kernel/debug/rust_loop/loopN/NAME
stat_of() { cat "/sys/kernel/debug/rust_loop/$(basename "$1")/$2"; }
# knob_of DEV NAME: a file of rust_loop's DEV in sysfs, /sys/block/loopN/rust_loop/NAME
knob_of() { cat "/sys/block/$(basename "$1")/rust_loop/$2"; }
# ---------------------------------------------------------------------------------------------
# Helpers of the core-* tests.

# fio_verify DEV [fio args...]: direct I/O with crc32c verification of everything written
# (libaio, depth 32; the arguments give the pattern: --rw, --bs/--bssplit, --size, ...); fails
# on any I/O error or mismatch. The one fio verification helper of the suite.
fio_verify() {
	local dev=$1 out
	shift
	out=$(fio --output-format=normal --name=verify --filename="$dev" --direct=1 --ioengine=libaio \
		--iodepth=32 --verify=crc32c --verify_fatal=1 --do_verify=1 "$@" 2>&1) ||
		fail "fio verify failed on $dev ($*): $(echo "$out" | grep -iE 'err|verify|bad' | head -5)"
	echo "$out" | grep -qE 'err= *0' || fail "fio reported errors on $dev: $(echo "$out" | grep -E 'err=' | head -3)"
}

# TEST_DRIVER=loop runs the tests against the C driver (loop.ko) instead of rust_loop, to check
# that a test asserts loop.c's behaviour. Tests that check a deliberate difference use is_rust.
TEST_DRIVER=${TEST_DRIVER:-rust_loop}
is_rust() { [ "$TEST_DRIVER" = rust_loop ]; }
if [ "$TEST_DRIVER" = loop ]; then
	load_rust_loop() {
		unload_loop_drivers
		modprobe loop "$@" || fail "modprobe loop $* failed"
		udevadm settle 2>/dev/null || true
		[ -d /sys/module/loop ] || fail "/sys/module/loop missing after modprobe"
	}
fi
# The name of the loaded loop module (for rmmod).
loop_module() { if is_rust; then echo rust_loop; else echo loop; fi; }

# attach FILE [LOSETUP-OPTIONS...]: losetup -f --show; prints the device
attach() {
	local f=$1 dev
	shift
	dev=$(losetup -f --show "$@" "$f") || fail "losetup -f --show $* $f failed"
	udevadm settle 2>/dev/null || true
	echo "$dev"
}
# detach DEV: losetup -d, and wait for the device to be unbound
detach() {
	losetup -d "$1" || fail "losetup -d $1 failed"
	wait_unbound "$1"
}
# wait_unbound DEV: the device's loop/ sysfs directory is gone (within 5 s)
wait_unbound() {
	local i
	for i in $(seq 50); do
		[ -d "/sys/block/$(basename "$1")/loop" ] || return 0
		sleep 0.1
	done
	fail "$1 still bound"
}
# wait_for SECONDS COMMAND...: retries COMMAND every 0.1 s until it succeeds
wait_for() {
	local n=$(($1 * 10)) i
	shift
	for ((i = 0; i < n; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}
# sysblk DEV PATH: content of /sys/block/<dev>/PATH
sysblk() { cat "/sys/block/$(basename "$1")/$2"; }
# assert_sys DEV PATH EXPECTED
assert_sys() { assert_file "/sys/block/$(basename "$1")/$2" "$3"; }
# devsize DEV: size in bytes
devsize() { blockdev --getsize64 "$1"; }
# status64 DEV FIELD: one field of LOOP_GET_STATUS64
status64() { lioctl "$1" get-status64 | sed -n "s/^$2=//p"; }
# region_sum FILE OFFSET LENGTH (bytes, multiples of 4096): sha256 of a byte range
region_sum() {
	dd if="$1" bs=4096 skip=$(($2 / 4096)) count=$(($3 / 4096)) status=none | sha256sum | cut -d' ' -f1
}
# zero_sum LENGTH: sha256 of LENGTH zero bytes
zero_sum() { head -c "$1" /dev/zero | sha256sum | cut -d' ' -f1; }
# cleanup_loops: detach everything, unmount what the tests mounted under $T
# Stops udevd and its workers (their probes open loop devices: a close is then not the last; the
# events of a test that binds and clears devices many times a second cost CPU); the trap of the
# caller must call udev_restart.
# udevd's processes by name, not command line (a command line can name the unit: `systemctl stop
# systemd-udevd`); its workers are named "(udev-worker)" or, before systemd 253, as udevd.
udev_procs() { pgrep -x systemd-udevd; pgrep -x '\(udev-worker\)'; } 2>/dev/null
udev_stop() {
	udevadm settle 2>/dev/null || true
	udevadm control --exit 2>/dev/null || true
	local i
	for i in $(seq 1 50); do
		[ -n "$(udev_procs)" ] || return 0
		sleep 0.1
	done
	udev_procs | xargs -r kill -KILL 2>/dev/null || true
}
# udev_drain: returns once udevd has handled every uevent the kernel sent before the call. A
# marker event's round trip comes first (udevadm trigger --settle: udevd reads its socket in order,
# so every earlier event has been read when the marker is handled), then an empty queue. `udevadm
# settle` alone waits only for the events udevd has read so far: after a storm of binds and clears
# (blktests' loop/006: over a hundred a second) the rest are still in its socket, and udevd works
# through them during the next test.
udev_drain() {
	udevadm trigger --settle --action=change /sys/devices/virtual/mem/null 2>/dev/null || true
	udevadm settle -t 120 2>/dev/null || true
}
udev_restart() {
	pgrep -x systemd-udevd >/dev/null && return 0
	local d
	for d in /usr/lib/systemd/systemd-udevd /lib/systemd/systemd-udevd; do
		[ -x "$d" ] && { "$d" --daemon >/dev/null 2>&1; break; }
	done
	udevadm settle 2>/dev/null || true
}

cleanup_loops() {
	local m
	for m in $(awk -v t="$T" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	# In the background with a deadline: detaching a device with a request stuck in the driver
	# blocks for ever.
	losetup -D >/dev/null 2>&1 &
	local pid=$! i
	for ((i = 0; i < 300; i++)); do
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	kill -0 $pid 2>/dev/null && echo "cleanup: losetup -D is stuck" >&2
	udevadm settle -t 10 2>/dev/null || true
}
# free_loop: the device losetup -f would pick
free_loop() { losetup -f; }
# bounded SECONDS COMMAND...: runs COMMAND with its output in $T/bounded.out; fails if it does
# not finish within SECONDS (a request the driver never completes leaves the process in D state,
# where no signal reaches it: the test must fail rather than hang the run), after dumping the
# blocked tasks and the loop devices' state (bounded_dump).
bounded() {
	local secs=$1
	shift
	bounded_dump "$secs" "$(cd /sys/block && ls -d loop* 2>/dev/null | xargs)" "$@"
}
# dump_hang [DEV...]: what a hang leaves behind, for the test's output: the blocked tasks'
# stacks (sysrq-w into the kernel log, then read back), and per device the blk-mq state
# (debugfs: hctx busy/dispatch/tags) and rust_loop's counters.
dump_hang() {
	local d h f
	echo "--- blocked tasks (sysrq-w) ---"
	echo "rust_loop-tests: dump_hang" >/dev/kmsg 2>/dev/null || true
	echo w >/proc/sysrq-trigger 2>/dev/null || true
	sleep 1
	dmesg 2>/dev/null | sed -n '/rust_loop-tests: dump_hang/,$p' | sed 's/^/  | /' | head -n 800
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null || true
	for d in "$@"; do
		d=$(basename "$d")
		echo "--- $d: blk-mq state ---"
		for h in /sys/kernel/debug/block/"$d"/hctx*; do
			[ -d "$h" ] || continue
			for f in state busy dispatch tags ctx_map; do
				[ -r "$h/$f" ] && { echo "$(basename "$h")/$f:"; head -n 40 "$h/$f" 2>/dev/null | sed 's/^/    /'; }
			done
		done
		[ -r "/sys/kernel/debug/block/$d/state" ] && echo "state: $(cat "/sys/kernel/debug/block/$d/state")"
		echo "inflight: $(cat "/sys/block/$d/inflight" 2>/dev/null)"
		if [ -d "/sys/block/$d/rust_loop" ]; then
			for f in /sys/block/"$d"/rust_loop/* /sys/kernel/debug/rust_loop/"$d"/*; do
				echo "  $(basename "$f") = $(cat "$f" 2>/dev/null)"
			done
		fi
	done
}
# bounded_dump SECONDS "DEV..." COMMAND...: as bounded, but a hang first dumps the blocked
# tasks and the state of the devices (dump_hang).
bounded_dump() {
	local secs=$1 dev=$2 pid i rc
	shift 2
	"$@" >"$T/bounded.out" 2>&1 </dev/null &
	pid=$!
	for ((i = 0; i < secs * 10; i++)); do
		if ! kill -0 $pid 2>/dev/null; then
			rc=0
			wait $pid || rc=$?
			cat "$T/bounded.out"
			return $rc
		fi
		sleep 0.1
	done
	# shellcheck disable=SC2086 # one argument per device
	dump_hang $dev >&2
	fail "'$*' did not finish within ${secs}s (stuck in the kernel?)"
}
