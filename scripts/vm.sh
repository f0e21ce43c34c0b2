#!/usr/bin/env bash
# Boots the cached kernel with virtme-ng (the host's root shared read-only over 9p) and runs one
# command in it; exits with that command's exit status.
#
#   scripts/vm.sh [--disk FILE]... [--rwdir DIR]... [--mem SIZE] -- COMMAND...
#
#   RUST_LOOP_KVM=1    use /dev/kvm (off by default: guests hang under KVM on our machines)
#   VM_CPUS, VM_MEM    guest size (default 2 CPUs, 4G)
#
# The project directory is writable in the guest, so results written under it reach the host.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

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
[ $# -gt 0 ] || die "usage: scripts/vm.sh [--disk FILE]... [--rwdir DIR]... -- COMMAND..."
command -v vng >/dev/null || die "vng (virtme-ng) not found: run scripts/setup.sh"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run scripts/setup.sh"

kdir=$(bash "$ROOT/scripts/kernel.sh")
args=(--run "$kdir" --force-9p --cpus "${VM_CPUS:-2}" --memory "$mem" --cwd "$ROOT")
if [ "${RUST_LOOP_KVM:-0}" = 1 ]; then
	[ -w /dev/kvm ] || die "RUST_LOOP_KVM=1 but /dev/kvm is not usable"
else
	args+=(--disable-kvm)
fi
for d in "${rwdirs[@]}"; do args+=(--rwdir "$d"); done
for d in "${disks[@]}"; do args+=(--disk "$d"); done

# The command's status travels through a file: the console may lose it.
status_file=$(mktemp "$ROOT/.vm-status.XXXXXX")
trap 'rm -f "$status_file"' EXIT
cmd=$(printf '%q ' "$@")
say "vm: booting $(basename "$kdir") ($([ "${RUST_LOOP_KVM:-0}" = 1 ] && echo KVM || echo TCG), ${VM_CPUS:-2} CPUs, $mem)"
vng "${args[@]}" --exec "$cmd; echo \$? > $status_file" </dev/null || true
status=$(cat "$status_file" 2>/dev/null)
[ -n "$status" ] || die "vm: the guest did not report an exit status (boot failure or crash; see the console above)"
exit "$status"
