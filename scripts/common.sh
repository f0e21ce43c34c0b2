# shellcheck shell=bash
# Shared settings for the rust_loop scripts. Source it; do not run it.
#
# RUST_LOOP_CACHE   cache directory for the kernel tree, build output and tools
#                   (default: ~/.cache/rust-loop). Everything heavy lives there.
# KERNEL            kernel flavour: "stock" (Debian's own 7.3 kernel, the default; scripts/kernels/stock.sh),
#                   or a kernel the project builds: "default" (tinyconfig + config/) or "debug"
#                   (KASAN, lockdep, UBSAN, ...; scripts/kernels/kernel.sh).
# KDIR              an already-built kernel tree to use instead of the cached one.
# STOCK             with KERNEL=stock, the kernel of the matrix (config/kernels.conf) to build
#                   for and boot (default: its first row, Debian's 7.3 amd64 kernel).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RUST_LOOP_CACHE:-$HOME/.cache/rust-loop}
KERNEL=${KERNEL:-stock}
KVER_SERIES=7.3
LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-19/lib}
export LIBCLANG_PATH
export PATH="$HOME/.cargo/bin:$CACHE/venv/bin:$PATH"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The config fragments of flavour $1 (default $KERNEL), in the order they are merged:
# config/kernel.config, then the flavour's base flavours' (a fragment whose first line is
# "# base: <flavour>" builds on that flavour), then config/kernel-<flavour>.config.
flavour_fragments() {
	local f=${1:-$KERNEL} file base
	file=$ROOT/config/kernel-$f.config
	base=$(sed -n '1s/^# base: \([a-z0-9-]*\)$/\1/p' "$file" 2>/dev/null)
	if [ -n "$base" ]; then
		flavour_fragments "$base"
	else
		echo "$ROOT/config/kernel.config"
	fi
	echo "$file"
}

# The kernel tree a flavour builds into (keyed by version, fragment and rustc).
kernel_key() {
	local src_ver frag_hash rustc_ver
	src_ver=$(dpkg-query -W -f='${Version}' "linux-source-$KVER_SERIES" 2>/dev/null) ||
		die "linux-source-$KVER_SERIES is not installed: run scripts/setup.sh"
	frag_hash=$(flavour_fragments | xargs cat 2>/dev/null | sha256sum | cut -c1-12)
	rustc_ver=$(rustc --version | awk '{print $2}')
	echo "$src_ver-$KERNEL-$frag_hash-rustc$rustc_ver"
}

# The LLVM= value a flavour's kernel is built with: empty (GCC) for "default"; "-19" (clang-19,
# ld.lld-19, llvm-*-19) for "debug", since the kernel allows KASAN with Rust only under clang.
flavour_llvm() {
	case "$KERNEL" in
	debug | debug-*) echo -19 ;;
	*) echo "" ;;
	esac
}

# The LLVM= value to build modules against the kernel tree $1 with: what the tree was built with
# (its .config says CONFIG_CC_IS_CLANG and the clang version), so that KDIR trees work too.
kernel_llvm() {
	local kdir=$1 v
	if grep -q '^CONFIG_CC_IS_CLANG=y' "$kdir/.config" 2>/dev/null; then
		v=$(sed -n 's/^CONFIG_CLANG_VERSION=\([0-9]*\)$/\1/p' "$kdir/.config")
		if command -v "clang-$((v / 10000))" >/dev/null; then echo "-$((v / 10000))"; else echo 1; fi
	fi
}

# True for the flavour built from Debian's stock kernel (KERNEL=stock without KDIR).
is_stock() { [ "$KERNEL" = stock ] && [ -z "${KDIR:-}" ]; }

# The row of config/kernels.conf (the kernel matrix) named $1 (default: $STOCK, else the first
# row), as the variables below; dies naming the rows there are when there is no such row.
#   STOCK_NAME STOCK_SUITE (build root's suite) STOCK_PKGS (the packages' suite) STOCK_ARCH
#   STOCK_KREL STOCK_DEBVER STOCK_SOURCE STOCK_RUNS, and derived: STOCK_ABI (the release without
#   its flavour: 7.3.4+deb13) STOCK_FLAVOUR (amd64, cloud-amd64, rt-amd64, arm64)
#   STOCK_ARCHIVE (Debian's archive)
stock_row() {
	local want=${1:-${STOCK:-}} row
	row=$(awk -v want="$want" '!/^[[:space:]]*(#|$)/ { if (want == "" || $1 == want) { print; exit } }' \
		"$ROOT/config/kernels.conf")
	[ -n "$row" ] || die "STOCK=$want: no such kernel in config/kernels.conf (there: $(stock_names | xargs))"
	read -r STOCK_NAME STOCK_SUITE STOCK_PKGS STOCK_ARCH STOCK_KREL STOCK_DEBVER STOCK_SOURCE STOCK_RUNS <<<"$row"
	[ -n "$STOCK_RUNS" ] || die "config/kernels.conf: the row of $STOCK_NAME has fewer than 8 columns"
	STOCK_FLAVOUR=${STOCK_KREL#*-}
	STOCK_ABI=${STOCK_KREL%-"$STOCK_FLAVOUR"}
	STOCK_ARCHIVE=${STOCK_ARCHIVE:-http://deb.debian.org/debian}
}

# The names of the matrix's kernels, in the file's order (those whose runs include $1, if given).
stock_names() {
	awk -v run="${1:-}" '!/^[[:space:]]*(#|$)/ { if (run == "" || ("," $8 ",") ~ ("," run ",")) print $1 }' \
		"$ROOT/config/kernels.conf"
}

# The provenance of a run's results (scripts/kernels/kernels_table.py: the commit, whether the tree was
# dirty, CI or a person), taken when the run starts, unless a script that started this one took it
# (make smoke's build; make check's install test): RUN_PROVENANCE, exported.
run_provenance() {
	[ -n "${RUN_PROVENANCE:-}" ] || RUN_PROVENANCE=$(python3 "$ROOT/scripts/kernels/kernels_table.py" --provenance) ||
		die "scripts/kernels/kernels_table.py --provenance failed"
	export RUN_PROVENANCE
}
# result_row NAME STEP RESULT DETAIL [whole|partial]: appends a result of a kernel of the matrix to
# results/matrix/results.tsv, with run_provenance's (README's "Supported kernels" table).
result_row() { python3 "$ROOT/scripts/kernels/kernels_table.py" --append "$@"; }

# The stock flavour's paths for the kernel STOCK selects: its build root (one per suite: the
# toolchain) and, inside it, the kernel source and the build tree with the regenerated Rust
# artefacts (one per kernel release).
stock_paths() {
	stock_row
	STOCK_ROOT=$CACHE/stock/chroot-$STOCK_SUITE
	STOCK_SRC_IN=/usr/src/rust-loop-source-$STOCK_DEBVER
	STOCK_KBUILD_IN=/usr/src/rust-loop-kbuild/$STOCK_KREL
	# STOCK_TOOLCHAIN=rustup: a second tree of the same headers, built with the project's own
	# Rust toolchain (rustup's, as the project's kernels are), to compile against only.
	[ "${STOCK_TOOLCHAIN:-debian}" != rustup ] || STOCK_KBUILD_IN+=-rustup
}

# Prints the kernel build directory to use: $KDIR if set, else the cached one.
kernel_dir() {
	if [ -n "${KDIR:-}" ]; then
		echo "$KDIR"
	elif is_stock; then
		stock_paths
		echo "$STOCK_ROOT$STOCK_KBUILD_IN"
	else
		echo "$CACHE/kernel/$(kernel_key)"
	fi
}

# Checks that a kernel tree is built and can build Rust modules.
check_kdir() {
	local kdir=$1
	[ -d "$kdir" ] || die "KDIR=$kdir does not exist: run scripts/kernels/kernel.sh or point KDIR at a built kernel tree"
	[ -f "$kdir/Makefile" ] && [ -f "$kdir/.config" ] ||
		die "KDIR=$kdir is not a configured kernel tree (no Makefile/.config): run scripts/kernels/kernel.sh"
	grep -q '^CONFIG_RUST=y' "$kdir/.config" ||
		die "kernel at $kdir has no CONFIG_RUST=y: rebuild it with Rust support (scripts/kernels/kernel.sh does)"
	[ -f "$kdir/Module.symvers" ] ||
		die "kernel at $kdir is not built (no Module.symvers): run 'make' in it, or scripts/kernels/kernel.sh"
	[ -f "$kdir/rust/kernel.o" ] || [ -f "$kdir/rust/libkernel.rmeta" ] ||
		die "kernel at $kdir has no Rust metadata (rust/libkernel.rmeta): build it with CONFIG_RUST=y"
}

# Prints the extracted kernel source directory (where .rustfmt.toml and the C reference live).
kernel_src() {
	local src_ver
	if is_stock; then
		stock_paths
		echo "$STOCK_ROOT$STOCK_SRC_IN"
		return
	fi
	src_ver=$(dpkg-query -W -f='${Version}' "linux-source-$KVER_SERIES" 2>/dev/null) ||
		die "linux-source-$KVER_SERIES is not installed: run scripts/setup.sh"
	echo "$CACHE/src/linux-source-$src_ver"
}
