#!/usr/bin/env bash
# The smoke test of a kernel of the matrix, in the VM (scripts/vm/smoke.sh boots it): what a user
# does first, end to end, with nothing else loaded.
#
#   tests/smoke.sh KO SCRATCH_DEV
#
# rust_loop.ko loaded; an image on ext4 (on SCRATCH_DEV) attached with `losetup --direct-io=on`
# (direct I/O must be on); ext4 made on the loop device and mounted; fio writes 96 MiB with
# random block sizes in direct and buffered mode and verifies every block (crc32c), then reads
# it all back and verifies it again after a remount; unmounted, detached, the module unloaded.
# Passes when every step does and the kernel log gained no report (WARNING, BUG, Oops, KASAN,
# lockdep, ...: tests/kernel-reports.sh). The last line is "smoke: ok" or "smoke: FAILED: <step>".
set -uo pipefail
KO=$1
SCRATCH=$2
# The kernel-report pattern (beside this file: in the arm64 guest's root too).
source "$(dirname "${BASH_SOURCE[0]}")/kernel-reports.sh"
W=/tmp/rust-loop-smoke
dev=

fail() {
	echo "smoke: FAILED: $*"
	dmesg | tail -n 30 | sed 's/^/  dmesg: /'
	exit 1
}
step() {
	echo "== $*"
}

mkdir -p "$W/back" "$W/fs"
dmesg -C
uname -r
# Nothing may load loop.ko behind the test's back (udev catching up on old events).
if [ "$(stat -f -c %T /run)" = tmpfs ]; then
	mkdir -p /run/modprobe.d && echo "install loop /bin/true" >/run/modprobe.d/rust-loop-smoke.conf
fi
step "insmod $(basename "$KO")"
rmmod loop 2>/dev/null || true
insmod "$KO" || fail "insmod"
[ -d /sys/module/rust_loop ] || fail "no /sys/module/rust_loop"
udevadm settle 2>/dev/null || true

step "backing file on ext4"
mkfs.ext4 -q -F "$SCRATCH" || fail "mkfs.ext4 $SCRATCH"
mount "$SCRATCH" "$W/back" || fail "mount $SCRATCH"
truncate -s 256M "$W/back/disk.img"

step "losetup --direct-io=on"
dev=$(losetup -f --show --direct-io=on "$W/back/disk.img") || fail "losetup"
name=${dev#/dev/}
[ "$(cat "/sys/block/$name/loop/dio")" = 1 ] || fail "direct I/O is off on $dev"
[ "$(cat "/sys/block/$name/loop/backing_file")" = "$W/back/disk.img" ] || fail "backing_file"
losetup -l "$dev"

step "mkfs.ext4 on $dev, mount"
mkfs.ext4 -q "$dev" || fail "mkfs.ext4 $dev"
mount "$dev" "$W/fs" || fail "mount $dev"

step "fio: write and verify, direct and buffered"
for direct in 1 0; do
	fio --name=smoke-$direct --directory="$W/fs" --filename=f$direct --size=48M \
		--rw=randwrite --bsrange=4k-256k --ioengine=libaio --iodepth=16 --direct=$direct \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --fsync_on_close=1 \
		--output-format=terse --minimal >"$W/fio-$direct.txt" 2>&1 ||
		fail "fio direct=$direct: $(tail -n 3 "$W/fio-$direct.txt")"
done
step "remount, read back and verify"
umount "$W/fs" || fail "umount"
echo 3 >/proc/sys/vm/drop_caches
mount "$dev" "$W/fs" || fail "mount again"
for direct in 1 0; do
	fio --name=smoke-$direct --directory="$W/fs" --filename=f$direct --size=48M \
		--rw=randwrite --bsrange=4k-256k --ioengine=libaio --iodepth=16 --direct=1 \
		--verify=crc32c --verify_fatal=1 --verify_only=1 \
		--output-format=terse --minimal >"$W/fio-verify-$direct.txt" 2>&1 ||
		fail "verifying direct=$direct after the remount: $(tail -n 3 "$W/fio-verify-$direct.txt")"
done
umount "$W/fs" || fail "umount"
fsck.ext4 -n -f "$dev" >"$W/fsck.txt" 2>&1 || fail "fsck.ext4: $(tail -n 5 "$W/fsck.txt")"

step "detach, unload"
losetup -d "$dev" || fail "losetup -d"
udevadm settle 2>/dev/null || true
for _ in $(seq 1 30); do
	rmmod rust_loop 2>/dev/null && break
	sleep 1
done
[ ! -d /sys/module/rust_loop ] || fail "rmmod rust_loop: $(rmmod rust_loop 2>&1)"
umount "$W/back"

if dmesg | grep -qE "$SPLAT"; then
	dmesg | grep -E -B2 -A12 "$SPLAT" | head -n 60 | sed 's/^/  dmesg: /'
	fail "the kernel log has a report"
fi
echo "smoke: ok"
