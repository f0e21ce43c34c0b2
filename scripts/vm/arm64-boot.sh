#!/usr/bin/env bash
# `make arm64-boot`: the smoke test (scripts/vm/smoke.sh, tests/smoke.sh) on Debian's arm64
# kernel, emulated: the module cross-built for it (scripts/kernels/matrix.sh), the kernel booted
# by scripts/vm/vm.sh under qemu-system-aarch64 (TCG) on an arm64 Debian root
# (scripts/vm/arm64-root.sh), an image on ext4 attached with --direct-io=on, ext4 on the loop
# device, fio verify, detach, unload, no kernel report in the kernel log or on the console.
#
#   make arm64-boot                 (STOCK=<name>: another arm64 row of config/kernels.conf;
#                                    default: the first arm64 row, 7.3-arm64)
#
#   ARM64_CPU, ARM64_CPUS, ARM64_MEM, ARM64_TIMEOUT   the guest (scripts/vm/vm.sh, "arm64")
#
# The console goes to results/matrix/<name>/boot.log, the kernel log to
# results/matrix/<name>/dmesg.txt. Appends the result to results/matrix/results.tsv (name,
# "smoke", ok or FAIL, seconds, date, the run's provenance: README's "Supported kernels" table,
# scripts/kernels/kernels_table.py); prints "N passed, N failed" last and exits non-zero on
# failure.
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
# The cross-build tree with the kernel's image and modules unpacked (scripts/vm/vm.sh boots them).
STOCK_IMAGE=1 bash scripts/kernels/stock.sh >/dev/null || die "preparing $STOCK_NAME ($STOCK_KREL) failed (see above)"
if bash scripts/vm/smoke.sh; then
	echo "1 passed, 0 failed"
else
	echo "0 passed, 1 failed"
	exit 1
fi
