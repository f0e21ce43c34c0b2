#!/usr/bin/env bash
# The guest half of scripts/run.sh (runs inside the VM as root): load rust_loop, attach a default
# image on XFS with `losetup --direct-io=on`, mkfs.ext4 + mount it, run fio on it, print results,
# the device's state and its counters.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$ROOT/results/run
mkdir -p "$out"
IMAGE_MB=${IMAGE_MB:-512}
FIO_RUNTIME=${FIO_RUNTIME:-10}
step() { printf '\n== %s\n' "$*"; }

step "kernel $(uname -r); loading rust_loop"
for m in rust_loop loop; do [ -d /sys/module/$m ] && rmmod $m; done
insmod "$ROOT/rust_loop.ko"

step "backing: XFS on ${SCRATCH_DEV:-/dev/vda}, a ${IMAGE_MB} MiB image"
mkfs.xfs -q -f "${SCRATCH_DEV:-/dev/vda}"
mkdir -p /tmp/rust-loop-run/backing /tmp/rust-loop-run/mnt
mount "${SCRATCH_DEV:-/dev/vda}" /tmp/rust-loop-run/backing
img=/tmp/rust-loop-run/backing/default.img
fallocate -l "${IMAGE_MB}M" "$img"

step "losetup -f --show --direct-io=on $img"
dev=$(losetup -f --show --direct-io=on "$img")
n=$(basename "$dev")
losetup -l "$dev"
echo "sysfs: dio=$(cat /sys/block/$n/loop/dio) nomerges=$(cat /sys/block/$n/queue/nomerges)" \
	"logical_block_size=$(cat /sys/block/$n/queue/logical_block_size)" \
	"max_sectors_kb=$(cat /sys/block/$n/queue/max_sectors_kb)"

step "mkfs.ext4 + mount"
mkfs.ext4 -q -F "$dev"
mount "$dev" /tmp/rust-loop-run/mnt
df -h /tmp/rust-loop-run/mnt | tail -1

step "fio on the mounted filesystem (${FIO_RUNTIME}s per job, O_DIRECT, libaio)"
fio --filename=/tmp/rust-loop-run/mnt/fio.dat --size=256M --direct=1 --ioengine=libaio \
	--runtime="$FIO_RUNTIME" --time_based --group_reporting --output-format=json \
	--name=randread-4k-qd32 --rw=randread --bs=4k --iodepth=32 --stonewall \
	--name=randwrite-4k-qd32 --rw=randwrite --bs=4k --iodepth=32 --stonewall \
	--name=seqread-1m-qd8 --rw=read --bs=1m --iodepth=8 --stonewall \
	--name=seqwrite-1m-qd8 --rw=write --bs=1m --iodepth=8 --stonewall \
	>"$out/fio.json"
python3 - "$out/fio.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'job':<20} {'IOPS':>10} {'MiB/s':>10} {'lat avg us':>11}")
for j in d["jobs"]:
    rw = j["read"] if j["read"]["io_bytes"] else j["write"]
    print(f"{j['jobname']:<20} {rw['iops']:>10.0f} {rw['bw'] / 1024:>10.1f} {rw['lat_ns']['mean'] / 1000:>11.1f}")
PY

step "rust_loop counters (/sys/kernel/debug/rust_loop/$n/)"
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug
for f in /sys/block/$n/rust_loop/* /sys/kernel/debug/rust_loop/$n/*; do printf '  %-22s %s\n' "$(basename "$f")" "$(cat "$f")"; done

step "clean up"
umount /tmp/rust-loop-run/mnt
e2fsck -fn "$dev" >/dev/null && echo "e2fsck: clean"
losetup -d "$dev"
umount /tmp/rust-loop-run/backing
rmmod rust_loop
echo "results: results/run/fio.json"
