# shellcheck shell=bash
# The ioctl fuzzer (tests/fuzz_ioctl.py) against the driver, with fio --verify on a separate
# loop device the whole time.
#
#   FUZZ_ITERS    ioctls at most (default 100000)
#   FUZZ_MIN_ITERS  ioctls at least: fewer when the time limit ends the fuzzing fails the test
#                 (default a quarter of FUZZ_ITERS; a driver that makes ioctls slow or blocks
#                 them shows here, and a thread stuck in the kernel fails the test on its own)
#   FUZZ_SEED     seed (default: random, printed)
#   FUZZ_PROCS    fuzzing processes (default 2)
#   FUZZ_THREADS  threads per process (default 4)
#   FUZZ_TIME     time limit of the fuzzing in seconds (default 300, times TEST_SLOWDOWN — 4 on
#                 the debug kernel). The test's own time limit follows it. Under TCG 2-core
#                 hosts reach 180-240 ioctls/s, so the fuzzing usually ends on the time limit.

FUZZ_DEVS=0,1,2,3,4,5
FUZZ_VERIFY_DEV=7
FUZZ_CTL_RANGE=16-23

fuzz_time() { echo "${FUZZ_TIME:-$((300 * ${TEST_SLOWDOWN:-1}))}"; }
timeout_t_fuzz_ioctl() { echo $(($(fuzz_time) + 300)); }

# Detaches and removes every loop device but the verify device, within a deadline each.
fuzz_teardown() {
	local n d
	udevadm settle -t 30 2>/dev/null || true
	for _ in 1 2 3; do
		for d in /sys/block/loop*; do
			n=${d##*/loop}
			[ "$n" = "$FUZZ_VERIFY_DEV" ] && continue
			[ -d "$d/loop" ] || continue
			bounded 30 losetup -d "/dev/loop$n" >/dev/null 2>&1 || true
		done
		udevadm settle -t 30 2>/dev/null || true
	done
}

fuzz_cleanup() {
	[ -n "${FIO_LOOP_PID:-}" ] && { touch "$T/fuzz.stop"; wait "$FIO_LOOP_PID" 2>/dev/null || true; }
	cleanup_loops
}

# fio_verify_loop DEV SEED: write+verify runs on DEV until $T/fuzz.stop exists, alternating
# buffered and direct-I/O mode of the device. Records runs in $T/fio.runs, failures in
# $T/fio.failed.
fio_verify_loop() {
	local dev=$1 seed=$2 i=0
	while [ ! -e "$T/fuzz.stop" ]; do
		i=$((i + 1))
		losetup --direct-io=$([ $((i % 2)) = 0 ] && echo on || echo off) "$dev" 2>/dev/null || true
		if ! fio --name=verify --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 \
			--rw=randwrite --bssplit=4k/50:16k/25:64k/25 --size=24M --offset=$(((i % 4) * 8))M \
			--verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
			--randseed=$((seed + i)) --output="$T/fio.out.$i" >/dev/null 2>&1; then
			echo "$i" >>"$T/fio.failed"
			break
		fi
		grep -qE 'err= *0' "$T/fio.out.$i" || { echo "$i" >>"$T/fio.failed"; break; }
		echo "$i" >"$T/fio.runs"
		rm -f "$T/fio.out.$i"
	done
}

# Random ioctls (numbers, arguments, descriptors, pointers) from several threads on loop0-5 and
# loop-control, interleaved with configuration changes and device add/remove. Asserts: the
# fuzzer's own checks (sane GET_STATUS results, only errno values loop.c can return for each
# well-formed ioctl, no thread stuck, at least FUZZ_MIN_ITERS ioctls done), no kernel report (the runner),
# every fio write+verify run on loop7 clean, and afterwards every fuzzed device detaches and can
# be removed, a fresh device works, and the module unloads (no leaked reference).
t_fuzz_ioctl() {
	load_rust_loop
	trap fuzz_cleanup EXIT
	local seed=${FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
	local iters=${FUZZ_ITERS:-100000} vdev=/dev/loop$FUZZ_VERIFY_DEV rc=0 n
	log "seed $seed, $iters ioctls (FUZZ_SEED=$seed reproduces each thread's sequence)"
	rm -f "$T/fuzz.stop" "$T/fio.runs" "$T/fio.failed" "$T"/fio.out.*
	mkimg "$T/verify.img" 64M
	losetup "$vdev" "$T/verify.img" || fail "cannot bind the verify device"
	fio_verify_loop "$vdev" "$seed" &
	FIO_LOOP_PID=$!
	python3 -u "$ROOT/tests/fuzz_ioctl.py" --dir "$T/fuzz" --seed "$seed" --iters "$iters" \
		--min-iters "${FUZZ_MIN_ITERS:-$((iters / 4))}" \
		--procs "${FUZZ_PROCS:-2}" --threads "${FUZZ_THREADS:-4}" --time "$(fuzz_time)" --devs "$FUZZ_DEVS" \
		--avoid "$FUZZ_VERIFY_DEV" --ctl-range "$FUZZ_CTL_RANGE" >"$T/fuzz.log" 2>&1 || rc=$?
	touch "$T/fuzz.stop"
	cp "$T/fuzz.log" "$ROOT/results/tests/fuzz.log" 2>/dev/null || true
	grep -E '^fuzz: [^ ]' "$T/fuzz.log" | grep -v 's: [0-9]* ioctls$' | sed 's/^/  # /'
	# The fio run in progress finishes (and verifies) on its own.
	local i
	for ((i = 0; i < 3000; i++)); do kill -0 "$FIO_LOOP_PID" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$FIO_LOOP_PID" 2>/dev/null && fail "fio on $vdev did not finish within 300 s after the fuzzer"
	wait "$FIO_LOOP_PID" || true
	FIO_LOOP_PID=
	if [ "$rc" != 0 ]; then
		sed -n '/check failures/,$p; /stuck/,$p' "$T/fuzz.log" | head -60 >&2
		fail "fuzzer exited $rc (seed $seed)"
	fi
	if [ -e "$T/fio.failed" ]; then
		n=$(head -1 "$T/fio.failed")
		fail "fio --verify on $vdev failed in run $n during the fuzzing: $(grep -iE 'verify|err|bad' "$T/fio.out.$n" | head -5)"
	fi
	[ -s "$T/fio.runs" ] || fail "no fio verify run completed during the fuzzing"
	log "fio write+verify runs on $vdev during the fuzzing: $(cat "$T/fio.runs"), no mismatch"

	# Every fuzzed device can be detached and removed, and a fresh one works.
	fuzz_teardown
	for d in /sys/block/loop*; do
		n=${d##*/loop}
		[ "$n" = "$FUZZ_VERIFY_DEV" ] && continue
		[ -d "$d/loop" ] && fail "loop$n still bound after losetup -d: $(cat "$d/loop/backing_file")"
		wait_for 10 lioctl /dev/loop-control ctl-remove "$n" ||
			fail "loop$n cannot be removed after the fuzzing: $(lioctl /dev/loop-control ctl-remove "$n" 2>&1)"
	done
	udevadm settle -t 30 2>/dev/null || true
	local out
	if ! out=$(lioctl /dev/loop-control ctl-add 0 2>&1); then
		# A late open of /dev/loop0 (udev probing after the detach) re-creates it (loop_probe).
		[[ $out == *EEXIST* ]] && [ -e /sys/block/loop0 ] && [ ! -d /sys/block/loop0/loop ] ||
			fail "LOOP_CTL_ADD 0 after the fuzzing: $out"
		log "loop0 was re-created (opened) before LOOP_CTL_ADD 0; using that one"
	fi
	fillimg "$T/fresh" 4
	lioctl /dev/loop0 configure "$T/fresh"
	cmp /dev/loop0 "$T/fresh" || fail "a fresh loop0 does not read its file"
	dd if=/dev/urandom of="$T/chunk" bs=64k count=1 status=none
	dd if="$T/chunk" of=/dev/loop0 bs=64k seek=3 oflag=direct status=none
	cmp -n 65536 "$T/chunk" "$T/fresh" 0 $((3 * 65536)) || fail "a write through a fresh loop0 is not in its file"
	detach /dev/loop0
	detach "$vdev"
	udevadm settle -t 30 2>/dev/null || true
	wait_for 10 rmmod "$(loop_module)" || fail "the module cannot be unloaded after the fuzzing: $(rmmod "$(loop_module)" 2>&1)"
}
