#!/usr/bin/env bash
# One code base, both toolchains (make toolchains): builds rust_loop with
#  1. the stock kernel's toolchain (Debian's rustc, bindgen, gcc-14; scripts/kernels/stock.sh): the
#     module that loads into Debian's kernel, then its clippy build;
#  2. the project's own toolchain (rustup's rustc, bindgen-cli and clippy, which the project's
#     kernels are built with) against a second tree of the same headers (STOCK_TOOLCHAIN=rustup):
#     the crate and its clippy build (no link: that tree's Rust symbols are not the kernel's).
# Each with -Dwarnings; any warning (also from C or modpost) fails. Ends with the stock module
# built again, so rust_loop.ko is the loadable one.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
export KERNEL=stock
unset KDIR
# The project's toolchain: rustup's rustc, clippy and rust-src, and bindgen-cli.
[ "$(id -u)" != 0 ] || SETUP_PROJECT_TOOLCHAIN=1 bash scripts/setup.sh
failed=0
build() {
	local label=$1 log
	shift
	log=$(mktemp)
	say "toolchains: $label"
	if ! "$@" >"$log" 2>&1; then
		cat "$log" >&2
		echo "FAIL $label" >&2
		failed=1
	elif grep -qiE '(^|: )warning' "$log"; then
		grep -iE -B2 -A8 '(^|: )warning' "$log" >&2
		echo "FAIL $label: warnings" >&2
		failed=1
	else
		echo "ok   $label"
	fi
	rm -f "$log"
}
objs=(rust_loop_crate.o rust_loop/helpers.o)
rm -f "${objs[@]}"
build "stock toolchain ($(bash scripts/kernels/stock.sh exec rustc --version 2>/dev/null)): module" \
	bash scripts/kernels/kmake.sh M="$ROOT" KRUSTFLAGS=-Dwarnings modules
build "stock toolchain: clippy" bash scripts/kernels/kmake.sh M="$ROOT" KRUSTFLAGS=-Dwarnings CLIPPY=1 modules
rm -f "${objs[@]}"
build "project toolchain ($(rustc --version)): crate" \
	env STOCK_TOOLCHAIN=rustup bash scripts/kernels/kmake.sh M="$ROOT" KRUSTFLAGS=-Dwarnings "${objs[@]}"
build "project toolchain: clippy" \
	env STOCK_TOOLCHAIN=rustup bash scripts/kernels/kmake.sh M="$ROOT" KRUSTFLAGS=-Dwarnings CLIPPY=1 rust_loop_crate.o
rm -f "${objs[@]}"
bash scripts/kernels/kmake.sh -s M="$ROOT" KRUSTFLAGS=-Dwarnings modules >/dev/null || die "rebuilding the stock module failed"
[ $failed = 0 ] || die "a toolchain build failed (see above)"
say "toolchains: both build warning-free"
