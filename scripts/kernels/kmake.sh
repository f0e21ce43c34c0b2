#!/usr/bin/env bash
# Runs make in the build tree of the kernel flavour (KERNEL, or KDIR), the way an out-of-tree
# module is built against it: `scripts/kernels/kmake.sh M=DIR modules`.
#
#  - KERNEL=stock (the default): inside the stock build environment (scripts/kernels/stock.sh), with the
#    toolchain Debian's kernel was built with; the project is mounted there at its own path, so
#    M= and the objects are the same paths as on the host.
#  - KERNEL=default|debug, or KDIR=...: on the host, with the LLVM= the tree was built with.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [ "$KERNEL" = stock ] && [ -z "${KDIR:-}" ]; then
	bash "$ROOT/scripts/kernels/stock.sh" >/dev/null
	exec bash "$ROOT/scripts/kernels/stock.sh" make "$@"
fi
kdir=$(bash "$ROOT/scripts/kernels/kernel.sh")
check_kdir "$kdir"
exec make -C "$kdir" LLVM="$(kernel_llvm "$kdir")" "$@"
