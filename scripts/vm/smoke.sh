#!/usr/bin/env bash
# `make smoke`: the smoke test (tests/smoke.sh) on a kernel of the matrix: the module built for
# it, the kernel booted in a VM, an image attached with --direct-io=on, ext4, fio verify,
# detach, unload, no kernel report.
#
#   make smoke STOCK=<name>        (default: the first row of config/kernels.conf)
#
# Builds the module in results/matrix/<name>/ (scripts/kernels/matrix.sh, so the checkout's own
# rust_loop.ko is left alone) and appends its result to results/matrix/results.tsv (name,
# "smoke", ok or FAIL, seconds, date).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
is_stock || die "make smoke boots a kernel of the matrix (KERNEL=stock, no KDIR)"
stock_row
[ "$STOCK_ARCH" = amd64 ] || die "STOCK=$STOCK_NAME is $STOCK_ARCH: make arm64-boot boots it"
t0=$SECONDS
bash scripts/kernels/matrix.sh "$STOCK_NAME" || die "building rust_loop for $STOCK_NAME failed (results/matrix/$STOCK_NAME/build.log)"
scratch=$CACHE/smoke-scratch.img
rm -f "$scratch" && truncate -s 1G "$scratch"
result=ok
STOCK=$STOCK_NAME bash scripts/vm/vm.sh --disk "$scratch" -- \
	bash tests/smoke.sh "$ROOT/results/matrix/$STOCK_NAME/rust_loop.ko" /dev/vda || result=FAIL
rm -f "$scratch"
printf '%s\tsmoke\t%s\t%s\t%s\n' "$STOCK_NAME" "$result" "$((SECONDS - t0))" "$(date +%F)" >>results/matrix/results.tsv
echo "smoke $STOCK_NAME ($STOCK_KREL): $result in $((SECONDS - t0)) s"
[ $result = ok ]
