#!/usr/bin/env bash
# Boots the cached kernel with virtme-ng (the host's root shared read-only over 9p) and runs one
# command in it; exits with that command's exit status. An arm64 kernel of the matrix
# (STOCK=<name> of an arm64 row) boots under qemu-system-aarch64 instead (below: "arm64").
#
#   scripts/vm/vm.sh [--disk FILE]... [--rwdir DIR]... [--mem SIZE] -- COMMAND...
#
#   --disk FILE        a raw disk image, /dev/vda for the first, /dev/vdb for the second, ...
#
#   RUST_LOOP_KVM=1    use /dev/kvm (off by default: guests hang under KVM on our machines)
#   VM_CPUS, VM_MEM    guest size (default 2 CPUs, 4G)
#   VM_DEBUG_ALLOC=1   boot with the allocator's checks on (what Debian's kernel has built in
#                      but leaves off): slub_debug=FZPU (red zones, poisoning, sanity checks),
#                      KFENCE sampling every millisecond, page poisoning, init_on_free
#   VM_QEMU_OPTS       extra QEMU arguments, e.g. "-icount shift=0,sleep=off" (make bench's
#                      instruction-counted clock: guest time counts guest instructions)
#   VM_BOOT_TIMEOUT    seconds the guest may take to start the command (default 300); a guest
#                      that has not started it by then is killed and booted again, up to
#                      VM_BOOT_TRIES times in all (default 3). A TCG guest here has been seen to
#                      hang silently at boot, in virtme-ng-init's "waiting for udev to settle"
#                      (debug kernel with a --disk, while another debug VM ran). A guest that
#                      stops before starting the command (a crash at boot, seen once in CI with
#                      VM_DEBUG_ALLOC=1) is booted again the same way, with the kernel's console
#                      shown (vng --verbose).
#   VM_DMESG=FILE      the guest's kernel log is saved to FILE (under the project directory)
#                      after the command
#
# The project directory is writable in the guest, so results written under it reach the host.
#
# arm64: the kernel (scripts/kernels/stock.sh with STOCK_IMAGE=1: its image and modules) boots
# under qemu-system-aarch64 (TCG; SETUP_ARM64=1 scripts/setup.sh installs it) on an arm64 Debian
# root (scripts/vm/arm64-root.sh: the guest runs that root's programs, not the host's: bash,
# coreutils, util-linux, kmod, e2fsprogs, fio), shared over virtio-fs by Debian's virtiofsd from
# the build root (scripts/kernels/stock.sh virtiofsd); the project directory and each --rwdir are
# shared the same way at their own paths, writable. Debian's arm64 kernel has VIRTIO_FS,
# FUSE_FS and VIRTIO_PCI built in (9p, ext4 and virtio_blk are modules), so no initramfs is
# needed: an init the harness writes mounts the shares, loads virtio_blk and runs the command
# in the project directory. QEMU is run directly (virtme-ng's `--arch arm64` was not tried).
# One guest at a time per root; as root.
#   ARM64_CPU          QEMU's -cpu (default max,pauth-impdef=on: every feature TCG has, with the
#                      cheap pointer-authentication algorithm; the architected QARMA5 one makes
#                      every function return costly under TCG); cortex-a57 for an older core
#   ARM64_CPUS, ARM64_MEM   guest size (default VM_CPUS or 2 vCPUs, VM_MEM or 3G)
#   ARM64_TIMEOUT      seconds the boot and command may take before QEMU is killed (default 1800)
#   VM_CONSOLE_LOG=FILE  the guest's console (the kernel's messages included) is kept in FILE;
#                      only the lines that are not the kernel's are shown
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

disks=() rwdirs=("$ROOT") mem=${VM_MEM:-}
while [ $# -gt 0 ]; do
	case "$1" in
	--disk) disks+=("$2"); shift 2 ;;
	--rwdir) rwdirs+=("$2"); shift 2 ;;
	--mem) mem=$2; shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || die "usage: scripts/vm/vm.sh [--disk FILE]... [--rwdir DIR]... -- COMMAND..."
arch=amd64
if is_stock; then
	stock_row
	arch=$STOCK_ARCH
fi
for i in "${!disks[@]}"; do
	d=$(realpath -m -- "${disks[$i]}")
	[ -f "$d" ] || [ -b "$d" ] || die "vm: --disk ${disks[$i]}: no such image"
	[[ $d != *[,=[:space:]]* ]] || die "vm: --disk $d: the path cannot contain ',', '=' or white space (QEMU's option syntax)"
	disks[i]=$d
done

# The command's status travels through a file: the console may lose it. A second file tells
# that the guest came up and started the command.
status_file=$(mktemp "$ROOT/.vm-status.XXXXXX")
boot_file=$(mktemp "$ROOT/.vm-boot.XXXXXX")
vng_pid='' arm64_pids=() arm64_work=''
# shellcheck disable=SC2317 # called from the trap
on_exit() {
	[ -z "$vng_pid" ] || kill -TERM -- "-$vng_pid" 2>/dev/null || true
	[ ${#arm64_pids[@]} = 0 ] || kill "${arm64_pids[@]}" 2>/dev/null || true
	[ -z "$arm64_work" ] || rm -rf "$arm64_work"
	rm -f "$status_file" "$boot_file"
}
trap on_exit EXIT
cmd=$(printf '%q ' "$@")
[ -z "${VM_DMESG:-}" ] || cmd+="; rc=\$?; dmesg >$(printf '%q' "$VM_DMESG"); (exit \$rc)"

# vm_arm64: boots the arm64 kernel STOCK names and runs $cmd (see "arm64" above).
vm_arm64() {
	local image kimg vfsd_dir aroot cpu cpus timeout init i d last_disk rc=0 shares=() mounts=
	[ "$(id -u)" = 0 ] || die "vm: an arm64 guest needs root (virtiofsd, the root's debootstrap)"
	if ! command -v qemu-system-aarch64 >/dev/null || ! command -v debootstrap >/dev/null; then
		SETUP_ARM64=1 bash "$ROOT/scripts/setup.sh" || die "scripts/setup.sh (SETUP_ARM64=1) failed"
	fi
	command -v qemu-system-aarch64 >/dev/null ||
		die "qemu-system-aarch64 not found after scripts/setup.sh (package qemu-system-arm)"
	STOCK_IMAGE=1 bash "$ROOT/scripts/kernels/stock.sh" >/dev/null ||
		die "preparing $STOCK_NAME ($STOCK_KREL) failed (see above)"
	image=$CACHE/stock/image-$STOCK_KREL
	kimg=$image/boot/vmlinuz-$STOCK_KREL
	[ -f "$kimg" ] || die "scripts/kernels/stock.sh left no $kimg (STOCK_IMAGE=1)"
	vfsd_dir=$(bash "$ROOT/scripts/kernels/stock.sh" virtiofsd) || die "no virtiofsd (scripts/kernels/stock.sh virtiofsd)"
	cpu=${ARM64_CPU:-max,pauth-impdef=on} cpus=${ARM64_CPUS:-${VM_CPUS:-2}} mem=${mem:-${ARM64_MEM:-3G}}
	timeout=${ARM64_TIMEOUT:-1800}

	# One guest at a time per root (its init lives there).
	aroot=$CACHE/stock/root-$STOCK_SUITE-arm64
	mkdir -p "$CACHE/stock"
	exec 8>"$aroot.lock"
	flock -n 8 || {
		say "vm: another arm64 guest is using $aroot; waiting for it"
		flock 8
	}
	aroot=$(bash "$ROOT/scripts/vm/arm64-root.sh") || die "making the arm64 root failed (see above)"
	arm64_work=$(mktemp -d)

	# The shares: the root (tag rootfs), then the project directory and each --rwdir (tag
	# rwN, mounted at its own path).
	shares=("rootfs=$aroot")
	for i in "${!rwdirs[@]}"; do
		d=$(realpath -- "${rwdirs[$i]}") || die "vm: --rwdir ${rwdirs[$i]}: no such directory"
		[[ $d != *[[:space:]]* ]] || die "vm: --rwdir $d: the path cannot contain white space"
		shares+=("rw$i=$d")
		mounts+="mkdir -p $d && mount -t virtiofs rw$i $d || echo \"init: mounting $d failed\""$'\n'
	done
	# The last disk's node (/dev/vda for the first, ...), which the init waits for.
	last_disk=/dev/null
	[ ${#disks[@]} = 0 ] || last_disk=/dev/vd$(echo abcdefghijklmnopqrstuvwxyz | cut -c"${#disks[@]}")
	# The guest's init: what a distribution's boot would do, then the command as virtme-ng runs
	# it (the boot and status files above).
	mkdir -p "$aroot/rust-loop"
	init=$aroot/rust-loop/init
	cat >"$init" <<-EOF
		#!/bin/sh
		# Made by scripts/vm/vm.sh: the arm64 guest's init.
		PATH=/usr/sbin:/usr/bin:/sbin:/bin
		export PATH
		mount -t proc proc /proc
		mount -t sysfs sys /sys
		mount -t devtmpfs dev /dev
		mount -t tmpfs tmpfs /run
		mount -t tmpfs tmpfs /tmp
		echo "init: \$(uname -m) \$(uname -r), \$(nproc) CPUs"
		# The root's packages were unpacked, not configured: libc-bin's trigger never ran.
		[ -s /etc/ld.so.cache ] || ldconfig
		$mounts
		modprobe virtio_blk
		for _ in \$(seq 1 100); do [ -e $last_disk ] && break; sleep 0.1; done
		cd $ROOT && bash -c $(printf '%q' "echo up > $boot_file; $cmd; echo \$? > $status_file")
		sync
		echo o >/proc/sysrq-trigger
		sleep 60
	EOF
	chmod +x "$init"

	# virtiofsd per share: --sandbox=namespace (the default) needs a mount namespace;
	# --cache=auto: the guest caches what the host does not change behind it.
	local qemu_args=(-M virt -accel tcg -cpu "$cpu" -smp "$cpus" -m "$mem"
		-object "memory-backend-memfd,id=mem,size=$mem,share=on" -machine memory-backend=mem
		-kernel "$kimg")
	local append="console=ttyAMA0 root=rootfs rootfstype=virtiofs rw init=/rust-loop/init panic=-1 log_buf_len=16M"
	[ "${VM_DEBUG_ALLOC:-0}" != 1 ] || append+=" slub_debug=FZPU kfence.sample_interval=1 page_poison=1 init_on_free=1"
	for i in "${!shares[@]}"; do
		local tag=${shares[$i]%%=*} dir=${shares[$i]#*=} sock=$arm64_work/vfs$i.sock
		"$vfsd_dir/virtiofsd" --socket-path="$sock" --shared-dir="$dir" --cache=auto \
			>"$arm64_work/virtiofsd$i.log" 2>&1 &
		arm64_pids+=($!)
		for _ in $(seq 1 100); do
			[ -S "$sock" ] && break
			kill -0 "${arm64_pids[-1]}" 2>/dev/null || break
			sleep 0.1
		done
		[ -S "$sock" ] || die "virtiofsd ($dir) did not start: $(cat "$arm64_work/virtiofsd$i.log")"
		qemu_args+=(-chardev "socket,id=vfs$i,path=$sock" -device "vhost-user-fs-pci,chardev=vfs$i,tag=$tag")
	done
	for i in "${!disks[@]}"; do
		qemu_args+=(-drive "file=${disks[$i]},format=raw,if=none,id=rl-disk$i,cache=none,aio=threads"
			-device "virtio-blk-pci,drive=rl-disk$i,serial=rl-disk$i")
	done
	# shellcheck disable=SC2206 # QEMU's extra options, split as vng splits them
	[ -z "${VM_QEMU_OPTS:-}" ] || qemu_args+=($VM_QEMU_OPTS)
	say "vm: booting $STOCK_KREL (qemu-system-aarch64, TCG, -cpu $cpu, $cpus vCPUs, $mem)"
	# panic=-1 with -no-reboot makes a panic end QEMU; the init powers the guest off (sysrq o,
	# PSCI) when done. The kernel's own lines go to the console log only.
	local log=${VM_CONSOLE_LOG:-$arm64_work/console.log}
	timeout -k 10 "$timeout" qemu-system-aarch64 "${qemu_args[@]}" -append "$append" \
		-no-reboot -display none -serial stdio -monitor none </dev/null 2>&1 |
		tee "$log" | { grep --line-buffered -v '^\[ *[0-9]*\.[0-9]*\] ' || true; } || rc=$?
	# (pipefail: the status is QEMU's, or timeout's 124.)
	kill "${arm64_pids[@]}" 2>/dev/null || true
	wait "${arm64_pids[@]}" 2>/dev/null || true
	arm64_pids=()
	[ "$rc" != 124 ] || say "vm: QEMU killed after ${timeout} s (ARM64_TIMEOUT)"
	[ -s "$boot_file" ] || die "vm: the arm64 guest did not start the command (QEMU status $rc; console: $log)"
}

if [ "$arch" = arm64 ]; then
	vm_arm64
	status=$(cat "$status_file" 2>/dev/null)
	[ -n "$status" ] || die "vm: the guest did not report an exit status (a crash or the time limit; see the console above)"
	exit "$status"
fi
[ "$arch" = amd64 ] || die "vm: STOCK=$STOCK_NAME is $arch: no harness for it"
[ -n "$mem" ] || mem=4G
command -v vng >/dev/null || die "vng (virtme-ng) not found: run scripts/setup.sh"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run scripts/setup.sh"

kdir=$(bash "$ROOT/scripts/kernels/kernel.sh")
# The stock flavour boots Debian's unmodified vmlinuz; virtme-ng takes its modules from the
# host's /lib/modules/<release> (scripts/kernels/stock.sh links it) and makes a busybox initramfs.
boot=$kdir
if is_stock; then
	boot=$(bash "$ROOT/scripts/kernels/stock.sh" vmlinuz)
fi
# A large kernel log: a hang's task dump (sysrq-w, hundreds of blocked kworkers) must not
# overwrite what came before it.
args=(--run "$boot" --cpus "${VM_CPUS:-2}" --memory "$mem" --cwd "$ROOT" --append log_buf_len=16M)
# The host's root reaches the guest over 9p, or over virtio-fs for a kernel without 9p (Debian's
# cloud flavour): virtiofsd, which bookworm lacks, is run from the stock build root's Debian
# (its own loader and libraries; scripts/kernels/stock.sh virtiofsd).
if is_stock && ! grep -qE '^CONFIG_NET_9P=[ym]' "$(dirname "$boot")/../lib/modules/$(basename "$boot" | sed 's/^vmlinuz-//')/config" 2>/dev/null; then
	PATH="$(bash "$ROOT/scripts/kernels/stock.sh" virtiofsd):$PATH"
	say "vm: the kernel has no 9p: sharing the root over virtio-fs"
else
	args+=(--force-9p)
fi
if [ "${VM_DEBUG_ALLOC:-0}" = 1 ]; then
	args+=(--append "slub_debug=FZPU kfence.sample_interval=1 page_poison=1 init_on_free=1")
fi
if [ "${RUST_LOOP_KVM:-0}" = 1 ]; then
	[ -w /dev/kvm ] || die "RUST_LOOP_KVM=1 but /dev/kvm is not usable"
else
	args+=(--disable-kvm)
fi
[ -z "${VM_QEMU_OPTS:-}" ] || args+=("--qemu-opts=$VM_QEMU_OPTS")
for d in "${rwdirs[@]}"; do args+=(--rwdir "$d"); done
# The disks, /dev/vda, /dev/vdb, ... in the guest (virtio-blk, in order), are raw images attached
# with their format named: virtme-ng's --disk names none, and QEMU then probes each image, warns
# ("Image format was not specified for ... and probing guessed raw") and refuses writes to its
# first block that would make it look like another format.
qemu_disks=
for i in "${!disks[@]}"; do
	d=${disks[$i]}
	qemu_disks+=" -drive if=none,id=rl-disk$i,file=$d,format=raw -device virtio-blk-pci,drive=rl-disk$i,serial=rl-disk$i"
done
# (--qemu-opts=VALUE: vng's parser takes a separate "-drive ..." for its own option -d.)
[ -z "$qemu_disks" ] || args+=("--qemu-opts=${qemu_disks# }")

boot_timeout=${VM_BOOT_TIMEOUT:-300} tries=${VM_BOOT_TRIES:-3}
verbose=()
for ((try = 1; ; try++)); do
	say "vm: booting $(basename "$boot") ($([ "${RUST_LOOP_KVM:-0}" = 1 ] && echo KVM || echo TCG), ${VM_CPUS:-2} CPUs, $mem${VM_QEMU_OPTS:+, $VM_QEMU_OPTS}${verbose:+, kernel console shown})"
	: >"$boot_file"
	# Its own process group, so that a hung guest can be killed with everything vng started.
	# vng's stdout and stderr each go through a `cat`: virtme-ng has QEMU open
	# /proc/self/fd/1 and /proc/self/fd/2 anew with O_TRUNC, which on a regular file
	# (`make check >log 2>&1`, even with >>) erased everything printed before the VM started.
	# A pipe cannot be truncated. The cats are in the process group too (killed with it), and
	# this bash waits for them, so the output is complete once it has exited and no cat outlives
	# it. fd 3 carries vng's stdout past the pipe that takes its stderr.
	setsid bash -c '{ vng "$@" 2>&1 >&3 3>&- | cat >&2 3>&-; } 3>&1 | cat' vng "${args[@]}" "${verbose[@]}" \
		--exec "echo up > $boot_file; $cmd; echo \$? > $status_file" </dev/null &
	vng_pid=$!
	for ((i = 0; i < boot_timeout; i++)); do
		[ ! -s "$boot_file" ] && kill -0 "$vng_pid" 2>/dev/null || break
		sleep 1
	done
	if [ -s "$boot_file" ]; then
		wait "$vng_pid" || true
		vng_pid=
		break
	fi
	if kill -0 "$vng_pid" 2>/dev/null; then
		kill -TERM -- "-$vng_pid" 2>/dev/null || true
		why="did not start the command within ${boot_timeout} s"
	else
		# The guest stopped before the command started: a panic at boot (panic=-1 reboots, and
		# QEMU exits) or a QEMU that could not start. The quiet console showed nothing; the
		# next boot shows the kernel's console, so that a second failure says why.
		why="stopped before starting the command (a crash at boot or QEMU failing: see above)"
		verbose=(--verbose)
	fi
	wait "$vng_pid" || true
	vng_pid=
	[ "$try" -lt "$tries" ] || die "vm: the guest $why, $tries times (VM_BOOT_TIMEOUT, VM_BOOT_TRIES)"
	say "vm: the guest $why; booting again (try $((try + 1)) of $tries)"
done
status=$(cat "$status_file" 2>/dev/null)
[ -n "$status" ] || die "vm: the guest did not report an exit status (boot failure or crash; see the console above)"
exit "$status"
