#!/usr/bin/env bash
# Builds (or finds in the cache) the Rust-enabled 7.3 kernel that rust_loop is built against and
# booted on, and prints its build directory on stdout.
#
#   KERNEL=default|debug|debug-rt|irqtime
#                          flavour (config/kernel-$KERNEL.config on top of config/kernel.config,
#                          and of its base flavour's if its first line is "# base: <flavour>");
#                          KERNEL=stock (the default) hands over to scripts/kernels/stock.sh
#   RUST_LOOP_CACHE        cache directory (default ~/.cache/rust-loop)
#   KDIR                   use this built tree instead (checked, never rebuilt)
#
# "default" is built with GCC, "debug" with clang/LLVM 19 (see flavour_llvm in common.sh).
#
# The build lives in $CACHE/kernel/<linux-source version>-<flavour>-<fragment hash>-rustc<version>;
# a finished build is marked by .rust-loop-built, and a cache hit rebuilds nothing.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [ -n "${KDIR:-}" ]; then
	check_kdir "$KDIR"
	echo "$KDIR"
	exit 0
fi
# Debian's stock kernel is not built here: fetched, with its build tree prepared.
if is_stock; then
	exec bash "$ROOT/scripts/kernels/stock.sh"
fi

[ -f "$ROOT/config/kernel-$KERNEL.config" ] ||
	die "unknown kernel flavour KERNEL=$KERNEL (have: $(cd "$ROOT/config" && ls kernel-*.config | sed 's/kernel-\(.*\)\.config/\1/' | xargs))"
command -v bindgen >/dev/null || die "bindgen not found: run scripts/setup.sh"
[ -f "/usr/src/linux-source-$KVER_SERIES.tar.xz" ] || die "kernel source missing: run scripts/setup.sh"

src_ver=$(dpkg-query -W -f='${Version}' "linux-source-$KVER_SERIES")
src="$CACHE/src/linux-source-$src_ver"
out=$(kernel_dir)
# One build per tree at a time: a second caller waits, then finds the finished build.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
if ! flock -n 9; then
	say "kernel: another build of $out is running; waiting for it"
	flock 9
fi
if [ -f "$out/.rust-loop-built" ]; then
	say "kernel: cache hit ($out)"
	echo "$out"
	exit 0
fi

if [ ! -f "$src/.rust-loop-extracted" ]; then
	say "kernel: extracting linux-source-$KVER_SERIES ($src_ver) into $src"
	rm -rf "$src" && mkdir -p "$src"
	tar -xf "/usr/src/linux-source-$KVER_SERIES.tar.xz" -C "$src" --strip-components=1 ||
		die "extracting /usr/src/linux-source-$KVER_SERIES.tar.xz failed (disk full?)"
	touch "$src/.rust-loop-extracted"
fi

mkdir -p "$out"
llvm=$(flavour_llvm)
if [ -n "$llvm" ]; then
	command -v "clang$llvm" >/dev/null && command -v "ld.lld$llvm" >/dev/null ||
		die "flavour '$KERNEL' is built with LLVM=$llvm but clang$llvm/ld.lld$llvm are missing: run scripts/setup.sh"
fi
make_k() { make -C "$src" O="$out" LLVM="$llvm" "$@"; }

say "kernel: checking the Rust toolchain (make rustavailable)"
make_k -s rustavailable >&2 ||
	die "the kernel refuses this Rust toolchain (see above): run scripts/setup.sh, check LIBCLANG_PATH=$LIBCLANG_PATH"

mapfile -t fragments < <(flavour_fragments)
say "kernel: configuring flavour '$KERNEL' (tinyconfig + $(printf '%s\n' "${fragments[@]}" | sed "s|^$ROOT/||" | paste -sd' '))"
make_k -s tinyconfig >&2
"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "${fragments[@]}" >/dev/null
make_k -s olddefconfig >&2
# Every option the fragments ask for must have stuck (a dropped CONFIG_RUST is the usual surprise).
# The last assignment of an option wins, as in merge_config.sh.
bad=$(cat "${fragments[@]}" |
	grep -E '^CONFIG_[A-Z0-9_]+=' | tac | awk -F= '!seen[$1]++' | grep -E '=[ym]$' |
	while read -r line; do
		grep -qx "$line" "$out/.config" || echo "$line"
	done)
[ -z "$bad" ] || die "kernel config dropped: $(echo "$bad" | xargs) (a missing dependency or toolchain; see make menuconfig)"

say "kernel: building bzImage and modules with $(nproc) jobs (about 8 minutes on 2 cores)"
make_k -j"$(nproc)" -s bzImage modules >&2 || die "kernel build failed (see the compiler output above)"
touch "$out/.rust-loop-built"
say "kernel: built $out"
echo "$out"
