#!/usr/bin/env bash
# Host-side test of scripts/vm/vm.sh (no kernel, no VM; scripts/check.sh runs it before the VM):
#
#   bash tests/scripts/vm-output.sh
#
# virtme-ng hands QEMU "-chardev file,path=/proc/self/fd/1" and ".../fd/2", and QEMU opens those
# paths anew with O_TRUNC: when the caller's stdout/stderr is a regular file (`make check >log
# 2>&1`, with > or >>), everything printed before the VM started was erased. A stub vng that
# does the same stands in for virtme-ng here. Checks: what was printed before and after vm.sh is
# still in the log, with > and with >>, and with stdout and stderr in separate files; the guest's
# output is there too; vm.sh exits with the command's status; a guest that never starts the
# command is killed with everything vng started (no process keeps the log open afterwards); a
# guest that stops at boot is booted again with the kernel's console shown; --disk images are
# attached with their format named.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# A kernel tree that passes check_kdir: with KDIR set, scripts/kernels/kernel.sh only checks it, and
# vm.sh only hands its path to vng.
kdir=$tmp/kernel
mkdir -p "$kdir/rust"
echo CONFIG_RUST=y >"$kdir/.config"
touch "$kdir/Makefile" "$kdir/Module.symvers" "$kdir/rust/kernel.o"

# The stubs go into $RUST_LOOP_CACHE/venv/bin, which common.sh puts first in PATH (that is where
# the real vng lives).
bin=$tmp/venv/bin
mkdir -p "$bin"
printf '#!/bin/sh\nexit 0\n' >"$bin/qemu-system-x86_64"
cat >"$bin/vng" <<'EOF'
#!/usr/bin/env python3
# Stub vng: opens its stdout and stderr anew through /proc/self/fd with O_TRUNC, as QEMU does,
# prints a console line, and runs the --exec command on them (in --cwd). STUB_VNG_HANG=1: a
# guest hung at boot, which never starts the command. STUB_VNG_CRASH=FILE: a guest that stops at
# boot without starting the command, while FILE does not exist (created by the crash);
# STUB_VNG_CRASH=always: every time. With --verbose it prints the "kernel console" line.
# STUB_VNG_ARGS=FILE: its arguments go to FILE, one a line. STUB_VNG_PARSER=PYTHON: a Python with
# virtme_ng, whose argument parser must accept them (else it exits as vng would).
import os, subprocess, sys, time
args = sys.argv[1:]
cmd = args[args.index("--exec") + 1]
cwd = args[args.index("--cwd") + 1] if "--cwd" in args else None
out, err = (os.open(f"/proc/self/fd/{n}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for n in (1, 2))
os.write(err, b"stub-console: booting\n")
if os.environ.get("STUB_VNG_HANG") == "1":
    time.sleep(600)
if "--verbose" in args:
    os.write(err, b"stub-console: kernel console\n")
if os.environ.get("STUB_VNG_PARSER"):
    # vng's own argument parser (virtme_ng, in the venv's Python) must accept the arguments.
    r = subprocess.run([os.environ["STUB_VNG_PARSER"], "-c",
                        "import sys; from virtme_ng.run import make_parser; make_parser().parse_args(sys.argv[1:])"]
                       + args)
    if r.returncode != 0:
        sys.exit(r.returncode)
if os.environ.get("STUB_VNG_ARGS"):
    with open(os.environ["STUB_VNG_ARGS"], "w") as f:
        f.write("\n".join(args) + "\n")
crash = os.environ.get("STUB_VNG_CRASH")
if crash == "always" or (crash and not os.path.exists(crash)):
    if crash != "always":
        open(crash, "w").close()
    os.write(err, b"stub-console: Kernel panic\n")
    sys.exit(0)
subprocess.call(["bash", "-c", cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd)
os.write(err, b"stub-console: power off\n")
EOF
chmod +x "$bin/vng" "$bin/qemu-system-x86_64"

export RUST_LOOP_CACHE=$tmp KDIR=$kdir PATH="$bin:$PATH"
unset RUST_LOOP_KVM VM_BOOT_TIMEOUT VM_BOOT_TRIES

# shellcheck disable=SC2016 # expanded by the guest's sh
guest_cmd=(sh -c 'echo guest-out; echo guest-err >&2; exit "$0"')
# vm [ENV=VALUE]... -- STATUS: prints BEFORE-*, runs vm.sh with guest_cmd exiting STATUS, prints
# AFTER-*; exits with vm.sh's status. Under a time limit: a hang fails the test, not the run.
vm() {
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	echo BEFORE-out
	echo BEFORE-err >&2
	local rc=0
	env "${envs[@]}" timeout -k 5 120 bash scripts/vm/vm.sh -- "${guest_cmd[@]}" "$2" || rc=$?
	echo AFTER-out
	echo AFTER-err >&2
	return "$rc"
}
# expect FILE LINE...: each LINE is a whole line of FILE.
expect() {
	local file=$1 line
	shift
	for line in "$@"; do
		grep -qx -- "$line" "$file" || fail "'$line' missing from $(basename "$file")"
	done
}
# A truncated file written on at the caller's old offset has a hole of NUL bytes.
no_nul() { [ "$(tr -d '\000' <"$1" | wc -c)" = "$(wc -c <"$1")" ] || fail "$(basename "$1") has NUL bytes"; }
# Nothing vm.sh started (vng, QEMU, a cat) may still write to FILE once it has returned.
no_holders() {
	local h
	h=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$1" 2>/dev/null || true)
	[ -z "$h" ] || fail "processes still hold $(basename "$1") open: $h"
}
status_is() { [ "$1" = "$2" ] || fail "vm.sh exited with $1, not $2"; }

echo "case 1: >log 2>&1, the command exits 3"
log=$tmp/log1
rc=0
vm -- 3 >"$log" 2>&1 || rc=$?
status_is "$rc" 3
expect "$log" BEFORE-out BEFORE-err guest-out guest-err AFTER-out AFTER-err
no_nul "$log"
no_holders "$log"

echo "case 2: >>log 2>&1 onto earlier content, the command exits 0"
log=$tmp/log2
echo EARLIER >"$log"
rc=0
vm -- 0 >>"$log" 2>&1 || rc=$?
status_is "$rc" 0
expect "$log" EARLIER BEFORE-out BEFORE-err guest-out guest-err AFTER-out AFTER-err
no_nul "$log"
no_holders "$log"

echo "case 3: >out 2>>err (separate files)"
out=$tmp/out3 err=$tmp/err3
echo EARLIER >"$err"
rc=0
vm -- 5 >"$out" 2>>"$err" || rc=$?
status_is "$rc" 5
expect "$out" BEFORE-out guest-out AFTER-out
expect "$err" EARLIER BEFORE-err AFTER-err
no_nul "$out"
no_nul "$err"

echo "case 4: a guest that never starts the command, >log 2>&1"
log=$tmp/log4
rc=0
vm STUB_VNG_HANG=1 VM_BOOT_TIMEOUT=1 VM_BOOT_TRIES=2 -- 0 >"$log" 2>&1 || rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
	fail "vm.sh exited with $rc for a guest that never started the command"
fi
expect "$log" BEFORE-out BEFORE-err AFTER-out AFTER-err
grep -q 'did not start the command within 1 s, 2 times' "$log" || fail "no watchdog message in the log"
no_nul "$log"
no_holders "$log"

echo "case 5: a guest that crashes at its first boot, then runs the command"
log=$tmp/log5
rc=0
vm STUB_VNG_CRASH="$tmp/crashed" VM_BOOT_TRIES=2 -- 4 >"$log" 2>&1 || rc=$?
status_is "$rc" 4
expect "$log" BEFORE-out BEFORE-err guest-out guest-err AFTER-out AFTER-err "stub-console: kernel console"
grep -q 'stopped before starting the command.*booting again (try 2 of 2)' "$log" ||
	fail "no boot-again message in the log"
[ "$(grep -c 'stub-console: kernel console' "$log")" = 1 ] || fail "the first boot showed the kernel console"
no_nul "$log"

echo "case 6: a guest that crashes at every boot"
log=$tmp/log6
rc=0
vm STUB_VNG_CRASH=always VM_BOOT_TRIES=2 -- 0 >"$log" 2>&1 || rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
	fail "vm.sh exited with $rc for a guest that crashed at every boot"
fi
grep -q 'stopped before starting the command (.*), 2 times' "$log" || fail "no crash message in the log"
expect "$log" AFTER-out AFTER-err
no_holders "$log"

echo "case 7: two --disk images are attached as raw virtio-blk drives, their format named"
# (virtme-ng's own --disk names no format: QEMU warns "Image format was not specified ... probing
# guessed raw" and restricts writes to the image's first block.)
log=$tmp/log7
truncate -s 1M "$tmp/disk-a.img" "$tmp/disk-b.img"
# With the real virtme-ng's parser when it is installed (scripts/setup.sh): it once read a
# separate "--qemu-opts -drive ..." as its own option -d.
parser=()
if "$py" -c 'import virtme_ng.run' 2>/dev/null; then
	parser=(STUB_VNG_PARSER="$py")
else
	echo "(virtme-ng is not installed: its parser does not check the arguments)"
fi
rc=0
env "${parser[@]}" STUB_VNG_ARGS="$tmp/args7" VM_QEMU_OPTS="-icount shift=0,sleep=off" timeout -k 5 120 \
	bash scripts/vm/vm.sh --disk "$tmp/disk-a.img" --disk "$tmp/disk-b.img" -- "${guest_cmd[@]}" 0 >"$log" 2>&1 || rc=$?
status_is "$rc" 0
! grep -qx -- --disk "$tmp/args7" || fail "vm.sh passed --disk to vng (no format named)"
grep -qx -- "--qemu-opts=-icount shift=0,sleep=off" "$tmp/args7" || fail "VM_QEMU_OPTS did not reach vng as --qemu-opts=..."
opts=$(sed -n 's/^--qemu-opts=//p' "$tmp/args7" | tr '\n' ' ')
for want in "-drive if=none,id=rl-disk0,file=$tmp/disk-a.img,format=raw -device virtio-blk-pci,drive=rl-disk0,serial=rl-disk0" \
	"-drive if=none,id=rl-disk1,file=$tmp/disk-b.img,format=raw -device virtio-blk-pci,drive=rl-disk1,serial=rl-disk1"; do
	[[ " $opts " == *" $want "* ]] || fail "vng's --qemu-opts lack '$want' (they are: '$opts')"
done
rc=0
timeout -k 5 60 bash scripts/vm/vm.sh --disk "$tmp/no-such.img" -- true >"$tmp/log7b" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q 'no such image' "$tmp/log7b" || fail "vm.sh accepted a missing --disk image (rc=$rc)"

if [ "$failed" != 0 ]; then
	for f in "$tmp"/log* "$tmp"/out* "$tmp"/err*; do
		echo "--- $(basename "$f"):"
		cat -v "$f"
	done
	exit 1
fi
echo "vm-output: all cases passed"
