#!/usr/bin/env bash
# `make smoke`: the smoke test (tests/smoke.sh) on a kernel of the matrix: the module built for
# it, the kernel booted in a VM (scripts/vm/vm.sh: virtme-ng for amd64, qemu-system-aarch64 for
# arm64, `make arm64-boot`), an image attached with --direct-io=on, ext4, fio verify, detach,
# unload, no kernel report.
#
#   make smoke STOCK=<name>        (default: the first row of config/kernels.conf)
#
# Builds the module in results/matrix/<name>/ (scripts/kernels/matrix.sh, so the checkout's own
# rust_loop.ko is left alone) and appends its result to results/matrix/results.tsv (name,
# "smoke", ok or FAIL, seconds, date, the run's provenance). The guest's kernel log is kept in
# results/matrix/<name>/dmesg.txt; an arm64 guest's console in boot.log beside it, which is
# checked for kernel reports too (one at boot, or after the test's own check).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
is_stock || die "make smoke boots a kernel of the matrix (KERNEL=stock, no KDIR)"
stock_row
case "$STOCK_ARCH" in
amd64 | arm64) ;;
*) die "STOCK=$STOCK_NAME is $STOCK_ARCH: no VM for it" ;;
esac
# The kernel-report pattern, for the console.
source "$ROOT/tests/kernel-reports.sh"
t0=$SECONDS
run_provenance
out=$ROOT/results/matrix/$STOCK_NAME
bash scripts/kernels/matrix.sh "$STOCK_NAME" || die "building rust_loop for $STOCK_NAME failed ($out/build.log)"
[ -f "$out/rust_loop.ko" ] || die "no $out/rust_loop.ko after scripts/kernels/matrix.sh"
vm_env=(STOCK="$STOCK_NAME" VM_DMESG="$out/dmesg.txt")
if [ "$STOCK_ARCH" = arm64 ]; then
	# ELF e_machine 183: EM_AARCH64.
	[ "$(od -An -tu2 -j18 -N2 "$out/rust_loop.ko" | tr -d ' ')" = 183 ] || die "$out/rust_loop.ko is not an arm64 module"
	vm_env+=(VM_CONSOLE_LOG="$out/boot.log")
fi
scratch=$CACHE/smoke-scratch-$STOCK_ARCH.img
rm -f "$scratch" "$out/dmesg.txt" "$out/boot.log" && truncate -s 1G "$scratch"
t1=$SECONDS
result=ok why=
env "${vm_env[@]}" bash scripts/vm/vm.sh --disk "$scratch" -- \
	bash tests/smoke.sh "$out/rust_loop.ko" /dev/vda || result=FAIL why="the smoke test failed (see above)"
rm -f "$scratch"
if [ $result = ok ] && [ -f "$out/boot.log" ] && grep -qE "$SPLAT" "$out/boot.log"; then
	result=FAIL why="the console has a kernel report"
	grep -hE -B2 -A12 "$SPLAT" "$out/boot.log" | head -n 60 | sed 's/^/  console: /'
fi
result_row "$STOCK_NAME" smoke "$result" "$((SECONDS - t0))"
echo "smoke $STOCK_NAME ($STOCK_KREL): $result in $((SECONDS - t0)) s (the boot and test: $((SECONDS - t1)) s)${why:+: $why}"
[ ! -f "$out/boot.log" ] || echo "  console: $out/boot.log, kernel log: $out/dmesg.txt"
[ $result = ok ]
