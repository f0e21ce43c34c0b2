# shellcheck shell=bash
# Helpers for the in-VM tests. Sourced by tests/run.sh before each test file.

KO=${KO:-$ROOT/rust_loop.ko}
T=${T:-/tmp/rust-loop-test}
mkdir -p "$T"

fail() { echo "FAIL: $*" >&2; exit 1; }
log() { echo "  # $*"; }

# assert_eq ACTUAL EXPECTED MESSAGE
assert_eq() { [ "$1" == "$2" ] || fail "$3: got '$1', expected '$2'"; }
# assert_file FILE EXPECTED: the file's content (one line) equals EXPECTED
assert_file() { local v; v=$(cat "$1") || fail "cannot read $1"; assert_eq "$v" "$2" "$1"; }
# assert_fails COMMAND...: the command must exit non-zero
assert_fails() { if "$@" >/dev/null 2>&1; then fail "expected failure: $*"; fi; }

# ioctl helper: tests/loopioctl.py CMD... (prints results, exits with errno on error)
lioctl() { python3 "$ROOT/tests/loopioctl.py" "$@"; }
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
scratch_fs() {
	local fs=$1
	[ -b "${SCRATCH_DEV:-}" ] || fail "no scratch disk (SCRATCH_DEV=${SCRATCH_DEV:-unset})"
	scratch_umount
	case "$fs" in
	xfs) mkfs.xfs -q -f "$SCRATCH_DEV" ;;
	ext4) mkfs.ext4 -q -F "$SCRATCH_DEV" ;;
	*) fail "scratch_fs: unknown filesystem $fs" ;;
	esac
	mkdir -p "$SCRATCH"
	mount "$SCRATCH_DEV" "$SCRATCH"
}
scratch_umount() { if mountpoint -q "$SCRATCH" 2>/dev/null; then umount "$SCRATCH"; fi; }

# stat_of DEV NAME: a counter of /sys/block/loopN/rust_loop/
stat_of() { cat "/sys/block/$(basename "$1")/rust_loop/$2"; }
