#!/usr/bin/env bash
# The main job: set-up, kernel, module; then in a VM: load rust_loop, attach a default image with
# `losetup --direct-io=on`, mkfs + mount, run fio, and print the results and the driver's state.
#
#   scripts/run.sh            (make run)
#   IMAGE_MB=1024 FIO_RUNTIME=10 scripts/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
if [ "$(id -u)" = 0 ] && [ -z "${KDIR:-}" ]; then
	bash scripts/setup.sh
fi
bash scripts/kernels/kernel.sh >/dev/null
say "module: building rust_loop.ko"
make -s modules >&2 || die "module build failed"
mkdir -p results/run
scratch="$CACHE/run-scratch.img"
rm -f "$scratch" && truncate -s 2G "$scratch"
bash scripts/vm/vm.sh --disk "$scratch" -- env IMAGE_MB="${IMAGE_MB:-512}" FIO_RUNTIME="${FIO_RUNTIME:-10}" \
	SCRATCH_DEV=/dev/vda bash scripts/guest/guest-run.sh
