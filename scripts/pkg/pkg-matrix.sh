#!/usr/bin/env bash
# `make pkg-matrix`: the package's build command, /usr/libexec/rust-loop/rust-loop-build as
# rust-loop-dkms installs it, run for every kernel of the matrix (config/kernels.conf) the way
# DKMS runs it, in the kernel's own build root (scripts/kernels/stock.sh: its suite's toolchain), without
# a VM or a root of its own: what the install test (scripts/pkg/dkms-test.sh) does for a few kernels,
# for all of them in minutes. For each kernel, in an overlay of its build root (nothing is
# written into the root itself):
#  1. the kernel's packages as a user has them (dpkg: its headers, their common headers and
#     kbuild, linux-base, the linux-source of the same version) and rust-loop-dkms unpacked (the
#     module's source, rust-loop-build with the supported series filled in; DKMS itself is not in
#     the build root, and the package is not configured);
#  2. `rust-loop-build --check KERNEL`: the series, the toolchain against the headers' .config,
#     the source's version, the kbuild links;
#  3. `rust-loop-build KERNEL BUILDDIR`, as DKMS's MAKE[0] runs it, on a copy of
#     /usr/src/rust-loop-<version>: rust_loop.ko must be built, with no warning. The Rust
#     artefacts are the ones scripts/kernels/stock.sh regenerated for the kernel (the same make of the
#     same source with the same compilers), handed to rust-loop-build in its cache with its stamp,
#     unless PKG_MATRIX_FULL=1: then rust-loop-build extracts the source and regenerates them
#     itself (some minutes more a kernel), and what it generated (autoconf.h, rustc_cfg, the
#     bindings, the exported Rust symbols' names) must equal scripts/kernels/stock.sh's.
# An arm64 kernel is tried on the amd64 build root as on an arm64 machine (dpkg
# --force-architecture; its .kernelvariables name the aarch64- compilers, which the root has as
# cross compilers): what differs on a real arm64 machine is the compilers' being native.
#
#   scripts/pkg/pkg-matrix.sh [NAME...]     (default: every row; MATRIX=<names> does the same)
#
# Logs in results/pkg-matrix/<name>.log; a line per kernel and "N passed, N failed"; exits
# non-zero when any kernel fails.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
[ "$(id -u)" = 0 ] || die "scripts/pkg/pkg-matrix.sh must run as root (mounts, chroot)"
names=("$@")
[ ${#names[@]} -gt 0 ] || read -r -a names <<<"${MATRIX:-}"
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(stock_names)
out=results/pkg-matrix
mkdir -p "$out"
deb=$(bash scripts/pkg/deb.sh) || die "scripts/pkg/deb.sh failed"
version=$(dpkg-deb -f "$deb" Version)
full=${PKG_MATRIX_FULL:-0}

# run_in_overlay CROOT SCRIPT ARGS...: runs SCRIPT (bash) in an overlay of the build root CROOT,
# with /proc and /dev, in a mount namespace of its own; the upper layer is thrown away.
run_in_overlay() {
	local croot=$1 tmp
	shift
	tmp=$(mktemp -d "$CACHE/pkg-matrix.XXXXXX")
	mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged"
	local status=0
	unshare -m --propagation private bash -c '
		set -e
		croot=$1 tmp=$2 root=$3
		shift 3
		mount -t overlay overlay -o "lowerdir=$croot,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/merged"
		mount -t proc proc "$tmp/merged/proc"
		mount --rbind /dev "$tmp/merged/dev"
		mkdir -p "$tmp/merged/pkg"
		mount --bind "$root" "$tmp/merged/pkg"
		exec chroot "$tmp/merged" env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash "$@"
	' _ "$croot" "$tmp" "$ROOT" "$@" || status=$?
	rm -rf "$tmp"
	return $status
}

# What runs in the overlay (results/pkg-matrix/inner.sh): $1 kernel release, $2 its Debian version, $3 the source package,
# $4 the directory of its debs (under /pkg, the project), $5 the rust-loop-dkms deb, $6 the tree
# scripts/kernels/stock.sh regenerated, $7 the dpkg architecture option, $8 PKG_MATRIX_FULL.
# shellcheck disable=SC2016 # expanded in the overlay
inner='
set -euo pipefail
k=$1 v=$2 src=$3 debs=$4 pkgdeb=$5 stocktree=$6 archopt=$7 full=$8
seed=$stocktree
[ "$full" = 0 ] || seed=
abi=${k%-"${k#*-}"}
step() { printf "\n== %s\n" "$*"; }
step "dpkg: the kernel packages ($k, $v), $src, rust-loop-dkms"
# (None found is an empty answer, not a failure: pipefail would end the script here, silently.)
deb() { ls "$debs/${1}_${v}_"*.deb 2>/dev/null | head -n 1 || true; }
files=()
for p in linux-base-$k linux-headers-$abi-common linux-kbuild-$abi linux-headers-$k; do
	f=$(deb "$p")
	if [ -z "$f" ]; then
		[ "$p" = linux-base-$k ] || { echo "no $p deb in $debs"; exit 1; }
		continue # (fetched with the image only: arm64)
	fi
	files+=("$f")
done
f=$(deb "$src")
[ -n "$f" ] || { echo "no $src deb in $debs"; exit 1; }
# The build root has the kernel packages'"'"' dependencies (the compiler, pahole, ...) but not as
# apt installed them: --force-depends; their files were unpacked there by scripts/kernels/stock.sh.
# The headers are unpacked, not configured (their hooks need the linux-base package; what
# rust-loop-build asks dpkg is whose files they are, and their version); the source is installed.
dpkg --unpack --force-depends $archopt "${files[@]}" >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
dpkg -i --force-depends "$f" >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
dpkg --unpack --force-depends "$pkgdeb" >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
step "rust-loop-build --check $k"
/usr/libexec/rust-loop/rust-loop-build --check "$k"
pkgver=$(dpkg-query -W -f="\${Version}" rust-loop-dkms)
cache=/var/cache/rust-loop/$k
if [ -n "$seed" ]; then
	# The Rust artefacts scripts/kernels/stock.sh made, with the stamp rust-loop-build would write for
	# them (it regenerates them, slowly, if the stamp does not match: the log says so).
	hdrver=$(dpkg-query -W -f="\${Version}" linux-headers-$k)
	chk=$(/usr/libexec/rust-loop/rust-loop-build --check "$k")
	tools=${chk#*(}
	tools=${tools%)}
	rustc=${tools%%; bindgen *}
	rest=${tools#"$rustc; "}
	bindgen=${rest%%; *}
	rest=${rest#"$bindgen; "}
	cc=${rest%; *}
	mkdir -p "$cache/src"
	echo "$v pruned" >"$cache/src/.rust-loop-extracted"
	ln -s "$seed" "$cache/kbuild"
	echo "headers=linux-headers-$k/$hdrver source=$v rustc=$rustc bindgen=$bindgen cc=$cc" >"$seed/.rust-loop-built"
fi
step "rust-loop-build $k BUILDDIR (as DKMS runs it)"
rm -rf /tmp/build && cp -a "/usr/src/rust-loop-$pkgver" /tmp/build
/usr/libexec/rust-loop/rust-loop-build "$k" /tmp/build 2>&1 | tee /tmp/build.log
[ "${PIPESTATUS[0]}" = 0 ] || { echo "FAIL: rust-loop-build failed"; exit 1; }
if [ -n "$seed" ] && grep -q "regenerating the Rust artefacts" /tmp/build.log; then
	echo "note: the handed-over artefacts were not used (stamp differs): rust-loop-build regenerated them"
fi
[ -f /tmp/build/rust_loop.ko ] || { echo "FAIL: no rust_loop.ko"; exit 1; }
if [ -z "$seed" ]; then
	step "what rust-loop-build generated against what scripts/kernels/stock.sh did"
	for f in include/generated/autoconf.h include/generated/rustc_cfg rust/bindings/bindings_generated.rs \
		rust/uapi/uapi_generated.rs rust/exports_core_generated.h rust/exports_kernel_generated.h; do
		cmp "$cache/kbuild/$f" "$stocktree/$f" || { echo "FAIL: $f differs"; exit 1; }
		echo "same: $f"
	done
fi
! grep -qiE "(^|: )warning[:[]" /tmp/build.log || { echo "FAIL: the build warned"; exit 1; }
modinfo -F vermagic /tmp/build/rust_loop.ko
[ "$(modinfo -F vermagic /tmp/build/rust_loop.ko | cut -d" " -f1)" = "$k" ] || { echo "FAIL: vermagic is not $k"; exit 1; }
echo "PASS"
'

printf '%s' "$inner" >"$out/inner.sh"
passed=0 failed=0
for name in "${names[@]}"; do
	stock_row "$name"
	t0=$SECONDS
	log=$out/$name.log
	result=ok
	(
		STOCK=$name STOCK_IMAGE=0 bash scripts/kernels/stock.sh >/dev/null || exit 1
		STOCK=$name stock_paths
		archopt=
		[ "$STOCK_ARCH" = amd64 ] || archopt=--force-architecture
		# The debs and the package, where the overlay sees them: the project is bind-mounted at
		# /pkg, the debs are copied in next to it (results/pkg-matrix/debs: hard links).
		rm -rf "$out/debs" && mkdir -p "$out/debs"
		cp -l "$CACHE/stock/debs/$STOCK_DEBVER/"*.deb "$out/debs/" 2>/dev/null ||
			cp "$CACHE/stock/debs/$STOCK_DEBVER/"*.deb "$out/debs/"
		run_in_overlay "$STOCK_ROOT" "/pkg/$out/inner.sh" "$STOCK_KREL" "$STOCK_DEBVER" "$STOCK_SOURCE" \
			"/pkg/$out/debs" "/pkg/${deb#"$ROOT"/}" "$STOCK_KBUILD_IN" "$archopt" "$full"
	) >"$log" 2>&1 || result=FAIL
	secs=$((SECONDS - t0))
	if [ $result = ok ]; then
		passed=$((passed + 1))
		printf 'ok   %-10s %-28s %4ss\n' "$name" "$STOCK_KREL" "$secs"
	else
		failed=$((failed + 1))
		printf 'FAIL %-10s %-28s %4ss (%s)\n' "$name" "$STOCK_KREL" "$secs" "$log"
		grep -E 'error|FAIL' "$log" | head -n 10 | sed 's/^/     | /'
	fi
done
rm -rf "$out/debs" "$out/inner.sh"
echo "rust-loop-dkms $version: $passed passed, $failed failed"
[ "$failed" = 0 ]
