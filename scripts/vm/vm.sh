#!/usr/bin/env bash
# Boots the cached kernel with virtme-ng (the host's root shared read-only over 9p) and runs one
# command in it; exits with that command's exit status.
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
#
# The project directory is writable in the guest, so results written under it reach the host.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

disks=() rwdirs=("$ROOT") mem=${VM_MEM:-4G}
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
	d=$(realpath -m -- "${disks[$i]}")
	[ -f "$d" ] || [ -b "$d" ] || die "vm: --disk ${disks[$i]}: no such image"
	[[ $d != *[,=[:space:]]* ]] || die "vm: --disk $d: the path cannot contain ',', '=' or white space (QEMU's option syntax)"
	qemu_disks+=" -drive if=none,id=rl-disk$i,file=$d,format=raw -device virtio-blk-pci,drive=rl-disk$i,serial=rl-disk$i"
done
# (--qemu-opts=VALUE: vng's parser takes a separate "-drive ..." for its own option -d.)
[ -z "$qemu_disks" ] || args+=("--qemu-opts=${qemu_disks# }")

# The command's status travels through a file: the console may lose it. A second file tells
# that the guest came up and started the command.
status_file=$(mktemp "$ROOT/.vm-status.XXXXXX")
boot_file=$(mktemp "$ROOT/.vm-boot.XXXXXX")
vng_pid=
# shellcheck disable=SC2317 # called from the trap
on_exit() {
	[ -z "$vng_pid" ] || kill -TERM -- "-$vng_pid" 2>/dev/null || true
	rm -f "$status_file" "$boot_file"
}
trap on_exit EXIT
cmd=$(printf '%q ' "$@")
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
