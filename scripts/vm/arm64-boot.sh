#!/usr/bin/env bash
# `make arm64-boot`: the smoke test (tests/smoke.sh) on Debian's arm64 kernel, emulated: the
# module cross-built for it, the kernel booted by qemu-system-aarch64 (TCG) on an arm64 Debian
# root made by debootstrap, an image on ext4 attached with --direct-io=on, ext4 on the loop
# device, fio verify, detach, unload, no kernel report.
#
#   make arm64-boot                 (STOCK=<name>: another arm64 row of config/kernels.conf;
#                                    default: the first arm64 row, 7.3-arm64)
#
#   ARM64_CPU        QEMU's -cpu (default max,pauth-impdef=on: every feature TCG has, with the
#                    cheap pointer-authentication algorithm; the architected QARMA5 one makes
#                    every function return costly under TCG); cortex-a57 for an older core
#   ARM64_CPUS, ARM64_MEM   guest size (default 2 vCPUs, 3G)
#   ARM64_TIMEOUT    seconds the boot and test may take before QEMU is killed (default 1800)
#
# What it does:
#  1. SETUP_ARM64=1 scripts/setup.sh if qemu-system-aarch64 is missing (qemu-system-arm from
#     bookworm-backports); scripts/kernels/stock.sh with STOCK_IMAGE=1 (the cross-build tree and the
#     kernel's image and modules, unpacked); scripts/kernels/matrix.sh (rust_loop.ko cross-built with
#     the kernel's toolchain into results/matrix/<name>/).
#  2. The guest's root, once, in $RUST_LOOP_CACHE/stock/root-<suite>-arm64 (the row's suite,
#     trixie): `debootstrap --foreign --arch=arm64 --variant=minbase` with what the smoke test
#     runs (kmod, util-linux, mount, e2fsprogs, fio), its dependencies resolved and every
#     package checked against the suite's signed index, the packages its second stage needs
#     unpacked; the rest are then unpacked here the same way, and no maintainer script is run.
#     Why: the second stage runs the arm64 packages' maintainer scripts, which this amd64 host
#     cannot execute without qemu-user and a binfmt_misc handler registered host-wide (a change
#     to the whole machine, which a CI container may not be allowed to make); run as the init
#     of the arm64 guest instead, it had not finished after 80 minutes under TCG on this
#     2-core machine while other VMs ran (dpkg, its triggers and the maintainer scripts of
#     some 140 packages, fio's python3 among them, all emulated). The smoke test needs
#     the packages' files, not their configuration: the guest's init runs ldconfig once, and
#     /etc/passwd and /etc/group are base-passwd's masters. A root whose package list changed
#     is made again. No udev: devtmpfs makes the device nodes, and the smoke test's `udevadm
#     settle` is optional.
#  3. The kernel's modules (hard links into the cached image), rust_loop.ko, tests/smoke.sh and
#     an init are put into the root; the kernel boots with that root shared over virtio-fs
#     (Debian's virtiofsd, from the build root: scripts/kernels/stock.sh virtiofsd). Debian's arm64
#     kernel has VIRTIO_FS, FUSE_FS and VIRTIO_PCI built in (9p, ext4 and virtio_blk are
#     modules), so no initramfs is needed, and the init loads the rest from the root. QEMU is
#     run directly (virtme-ng's `--arch arm64` was not tried): the guest needs only this init,
#     and the script chooses every device. The scratch disk (1 GiB, a sparse file) is the
#     guest's /dev/vda, the ext4 the image lives on.
#  4. The init runs tests/smoke.sh, which checks the kernel log for reports (WARNING, BUG,
#     Oops, lockdep, ...), saves the kernel log, and powers the guest off. The console goes to
#     results/matrix/<name>/boot.log, the kernel log to results/matrix/<name>/dmesg.txt; the
#     console is checked for reports as well (a report after the test's own check, or at boot).
#
# Appends the result to results/matrix/results.tsv (name, "smoke", ok or FAIL, seconds, date:
# README's "Supported kernels" table, scripts/kernels/kernels_table.py); prints "N passed, N failed"
# last and exits non-zero on failure.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
is_stock || die "make arm64-boot boots a kernel of the matrix (KERNEL=stock, no KDIR)"
[ "$(id -u)" = 0 ] || die "scripts/vm/arm64-boot.sh must run as root (debootstrap, virtiofsd)"
if [ -z "${STOCK:-}" ]; then
	STOCK=$(awk '!/^[[:space:]]*(#|$)/ && $4 == "arm64" { print $1; exit }' config/kernels.conf)
	[ -n "$STOCK" ] || die "config/kernels.conf has no arm64 kernel"
fi
export STOCK
stock_row
[ "$STOCK_ARCH" = arm64 ] || die "STOCK=$STOCK_NAME is $STOCK_ARCH: make smoke boots it (make arm64-boot is for arm64 kernels)"

# The kernel-report pattern, for the console and the kernel log.
source "$ROOT/tests/kernel-reports.sh"
# The root's packages, beyond minbase: what tests/smoke.sh runs.
ROOT_PKGS=(kmod util-linux mount e2fsprogs fio)
cpu=${ARM64_CPU:-max,pauth-impdef=on}
cpus=${ARM64_CPUS:-2}
mem=${ARM64_MEM:-3G}
boot_timeout=${ARM64_TIMEOUT:-1800}
out=$ROOT/results/matrix/$STOCK_NAME
t0=$SECONDS

# 1. The tools, the kernel and the module.
if ! command -v qemu-system-aarch64 >/dev/null || ! command -v debootstrap >/dev/null; then
	SETUP_ARM64=1 bash scripts/setup.sh || die "scripts/setup.sh (SETUP_ARM64=1) failed"
fi
command -v qemu-system-aarch64 >/dev/null || die "qemu-system-aarch64 not found after scripts/setup.sh (package qemu-system-arm)"
STOCK_IMAGE=1 bash scripts/kernels/stock.sh >/dev/null || die "preparing $STOCK_NAME ($STOCK_KREL) failed (see above)"
image=$CACHE/stock/image-$STOCK_KREL
kimg=$image/boot/vmlinuz-$STOCK_KREL
[ -f "$kimg" ] && [ -d "$image/lib/modules/$STOCK_KREL" ] ||
	die "scripts/kernels/stock.sh left no $kimg and modules (STOCK_IMAGE=1)"
vfsd_dir=$(bash scripts/kernels/stock.sh virtiofsd) || die "no virtiofsd (scripts/kernels/stock.sh virtiofsd)"
bash scripts/kernels/matrix.sh "$STOCK_NAME" || die "building rust_loop for $STOCK_NAME failed ($out/build.log)"
[ -f "$out/rust_loop.ko" ] || die "no $out/rust_loop.ko after scripts/kernels/matrix.sh"
# ELF e_machine 183: EM_AARCH64.
[ "$(od -An -tu2 -j18 -N2 "$out/rust_loop.ko" | tr -d ' ')" = 183 ] || die "$out/rust_loop.ko is not an arm64 module"

# One run at a time per root (the root and the scratch disk are shared).
aroot=$CACHE/stock/root-$STOCK_SUITE-arm64
mkdir -p "$CACHE/stock"
exec 8>"$aroot.lock"
flock -n 8 || {
	say "arm64: another make arm64-boot is using $aroot; waiting for it"
	flock 8
}

vfsd_pid='' qemu_pid=''
work=$(mktemp -d)
# shellcheck disable=SC2317 # called from the trap
cleanup() {
	[ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
	[ -z "$vfsd_pid" ] || kill "$vfsd_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Boots the kernel on the root $aroot with init $1 (a path in the root), console to $2, QEMU's
# extra arguments after; returns QEMU's status (1 when it had to be killed at the time limit).
boot() {
	local init=$1 log=$2 rc=0
	shift 2
	rm -f "$work/vfs.sock"
	# --sandbox=namespace (the default) needs a mount namespace; --cache=auto: the guest caches
	# what the host does not change behind it (nothing does while the guest runs).
	"$vfsd_dir/virtiofsd" --socket-path="$work/vfs.sock" --shared-dir="$aroot" --cache=auto \
		>"$work/virtiofsd.log" 2>&1 &
	vfsd_pid=$!
	for _ in $(seq 1 100); do
		[ -S "$work/vfs.sock" ] && break
		kill -0 "$vfsd_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -S "$work/vfs.sock" ] || die "virtiofsd did not start: $(cat "$work/virtiofsd.log")"
	# The guest's memory must be shared with virtiofsd (a memfd); panic=-1 with -no-reboot makes
	# a panic end QEMU; the init powers the guest off (sysrq o, PSCI) when done.
	timeout -k 10 "$boot_timeout" qemu-system-aarch64 -M virt -accel tcg \
		-cpu "$cpu" -smp "$cpus" -m "$mem" \
		-object "memory-backend-memfd,id=mem,size=$mem,share=on" -machine memory-backend=mem \
		-kernel "$kimg" \
		-append "console=ttyAMA0 root=rootfs rootfstype=virtiofs rw init=$init panic=-1 log_buf_len=16M" \
		-chardev "socket,id=vfs,path=$work/vfs.sock" -device vhost-user-fs-pci,chardev=vfs,tag=rootfs \
		"$@" -no-reboot -display none -serial stdio -monitor none </dev/null 2>&1 |
		tee "$log" | { grep --line-buffered -v '^\[ *[0-9]*\.[0-9]*\] ' || true; } || rc=$?
	# (pipefail: the status is QEMU's, or timeout's 124; the kernel's own lines go to the log only.)
	kill "$vfsd_pid" 2>/dev/null || true
	wait "$vfsd_pid" 2>/dev/null || true
	vfsd_pid=''
	return "$rc"
}

# 2. The root.
want_made="debootstrap --foreign --arch=arm64 --variant=minbase $STOCK_SUITE +${ROOT_PKGS[*]}; unpacked"
if [ "$(cat "$aroot/.rust-loop-made" 2>/dev/null)" != "$want_made" ]; then
	command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh"
	script=/usr/share/debootstrap/scripts/$STOCK_SUITE
	[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
	t1=$SECONDS
	say "arm64: making a Debian $STOCK_SUITE arm64 root in $aroot (debootstrap --foreign, then unpacking)"
	rm -rf "$aroot"
	debootstrap --foreign --arch=arm64 --variant=minbase --include="$(
		IFS=,
		echo "${ROOT_PKGS[*]}"
	)" "$STOCK_SUITE" "$aroot" "$STOCK_ARCHIVE" "$script" >"$aroot.debootstrap.log" 2>&1 ||
		die "debootstrap --foreign --arch=arm64 $STOCK_SUITE failed (log: $aroot.debootstrap.log)"
	# The first stage unpacked the packages the second stage needs (debootstrap/required); the
	# others (debootstrap/base: the included ones and their dependencies) are unpacked as it
	# unpacks (merged /usr's directory symlinks kept), their maintainer scripts not run.
	while read -r pkg; do
		deb=$(awk -v p="$pkg" '$1 == p { print $2; exit }' "$aroot/debootstrap/debpaths")
		[ -n "$deb" ] && [ -f "$aroot$deb" ] || die "debootstrap left no package file of $pkg in $aroot"
		dpkg-deb --fsys-tarfile "$aroot$deb" | tar -C "$aroot" --keep-directory-symlink --skip-old-files -xf - ||
			die "unpacking $pkg into $aroot failed"
	done < <(tr -s ' ' '\n' <"$aroot/debootstrap/base" | grep .)
	# What base-passwd's preinst makes (user and group names for ls, mount, fio).
	for f in passwd group; do
		[ -f "$aroot/etc/$f" ] || cp "$aroot/usr/share/base-passwd/$f.master" "$aroot/etc/$f"
	done
	# The first stage leaves /proc a symlink to the host's /proc, which the guest cannot mount on.
	rm -f "$aroot/proc" && mkdir -p "$aroot/proc"
	for c in bash dmesg losetup mount insmod rmmod modprobe mkfs.ext4 fsck.ext4 fio ldconfig; do
		[ -e "$aroot/usr/bin/$c" ] || [ -e "$aroot/usr/sbin/$c" ] || die "the arm64 root has no $c"
	done
	echo "$want_made" >"$aroot/.rust-loop-made"
	say "arm64: root made in $((SECONDS - t1)) s"
fi

# 3. The run's files in the root.
mods=$aroot/usr/lib/modules/$STOCK_KREL
if [ ! -f "$mods/.rust-loop-linked" ]; then
	rm -rf "$mods" && mkdir -p "$(dirname "$mods")"
	# Hard links into the cached image where they can be (the same file system).
	cp -al "$image/lib/modules/$STOCK_KREL" "$mods" 2>/dev/null || {
		rm -rf "$mods"
		cp -a "$image/lib/modules/$STOCK_KREL" "$mods"
	} || die "copying the modules of $STOCK_KREL into $aroot failed"
	touch "$mods/.rust-loop-linked"
fi
run=$aroot/rust-loop
rm -rf "$run" && mkdir -p "$run"
cp "$out/rust_loop.ko" tests/smoke.sh tests/kernel-reports.sh "$run/"
cat >"$run/init" <<-'EOF'
	#!/bin/sh
	# Made by scripts/vm/arm64-boot.sh: the guest's init for the smoke test.
	PATH=/usr/sbin:/usr/bin:/sbin:/bin
	export PATH
	mount -t proc proc /proc
	mount -t sysfs sys /sys
	mount -t devtmpfs dev /dev
	mount -t tmpfs tmpfs /run
	mount -t tmpfs tmpfs /tmp
	echo "init: $(uname -m) $(uname -r), $(nproc) CPUs"
	# The root's packages were unpacked, not configured: libc-bin's trigger never ran.
	[ -s /etc/ld.so.cache ] || ldconfig
	modprobe virtio_blk
	for _ in $(seq 1 100); do [ -b /dev/vda ] && break; sleep 0.1; done
	if [ -b /dev/vda ]; then
		bash /rust-loop/smoke.sh /rust-loop/rust_loop.ko /dev/vda
		echo $? >/rust-loop/status
	else
		echo "init: no /dev/vda (virtio_blk: $(modprobe virtio_blk 2>&1))"
		echo 1 >/rust-loop/status
	fi
	dmesg >/rust-loop/dmesg.txt
	sync
	echo o >/proc/sysrq-trigger
	sleep 60
EOF
chmod +x "$run/init"

# 4. The smoke test.
scratch=$CACHE/arm64-scratch.img
rm -f "$scratch" && truncate -s 1G "$scratch"
mkdir -p "$out"
t1=$SECONDS
say "arm64: booting $STOCK_KREL (qemu-system-aarch64, TCG, -cpu $cpu, $cpus vCPUs, $mem) for the smoke test"
result=ok why=
boot /rust-loop/init "$out/boot.log" \
	-drive "file=$scratch,format=raw,if=none,id=scratch,cache=none,aio=threads" \
	-device virtio-blk-pci,drive=scratch || {
	rc=$?
	why="QEMU exited with status $rc"
	[ $rc != 124 ] || why="QEMU killed after ${boot_timeout} s (ARM64_TIMEOUT)"
}
rm -f "$scratch"
cp "$run/dmesg.txt" "$out/dmesg.txt" 2>/dev/null || true
status=$(cat "$run/status" 2>/dev/null || echo none)
if [ "$status" = none ]; then
	result=FAIL why="the guest reported no result${why:+: $why}"
elif [ "$status" != 0 ]; then
	result=FAIL why="the smoke test failed (status $status)${why:+; $why}"
elif grep -qE "$SPLAT" "$out/boot.log" "$out/dmesg.txt"; then
	result=FAIL why="the kernel log has a report"
	grep -hE -B2 -A12 "$SPLAT" "$out/dmesg.txt" "$out/boot.log" | head -n 60 | sed 's/^/  dmesg: /'
fi
secs=$((SECONDS - t0))
printf '%s\tsmoke\t%s\t%s\t%s\n' "$STOCK_NAME" "$result" "$secs" "$(date +%F)" >>results/matrix/results.tsv
echo "arm64-boot $STOCK_NAME ($STOCK_KREL): $result in $secs s (the boot and test: $((SECONDS - t1)) s)${why:+: $why}"
echo "  console: $out/boot.log, kernel log: $out/dmesg.txt"
if [ $result = ok ]; then
	echo "1 passed, 0 failed"
else
	echo "0 passed, 1 failed"
	exit 1
fi
