#!/usr/bin/env bash
# The stock kernel flavour (KERNEL=stock, the default): a Debian kernel of the kernel matrix,
# unmodified, as users run it (config/kernels.conf pins each; STOCK=<name> picks one, the first
# row by default). Prints the kernel build tree that modules are built against, as
# scripts/kernels/kernel.sh does for the project's own kernels.
#
#   scripts/kernels/stock.sh              fetch, prepare (cached) and print the build tree (a host path)
#   scripts/kernels/stock.sh exec CMD...  run CMD in the build environment (the project at its own path)
#   scripts/kernels/stock.sh make ARGS... make in the build tree (ARGS as for an out-of-tree module)
#   scripts/kernels/stock.sh vmlinuz      print the path of the kernel image to boot
#   scripts/kernels/stock.sh virtiofsd    print a directory holding a virtiofsd the host can run (the
#                                 build root's), for a kernel without 9p (scripts/vm/vm.sh)
#
#   STOCK=<name>                  the kernel (a row of config/kernels.conf)
#   STOCK_IMAGE=1                 also unpack the image of a kernel of another architecture
#                                 (arm64: scripts/vm/arm64-boot.sh); an amd64 one always is
#   STOCK_TOOLCHAIN=rustup        the same, for a second build tree made with the project's own
#                                 Rust toolchain (rustup's rustc, bindgen-cli, clippy: what the
#                                 project's kernels are built with) instead of Debian's: modules
#                                 built there cannot load into the stock kernel; it exists so
#                                 that one code base is compiled by both toolchains
#                                 (make toolchains)
#
# What it makes, once per kernel, under $RUST_LOOP_CACHE/stock/ (a second run is a cache hit):
#  1. debs/<version>/: the kernel's image, modules, headers, kbuild and source packages, fetched
#     from deb.debian.org (scripts/kernels/debian_archive.py: the suite's signed InRelease, the index's
#     and the packages' hashes checked; the host's apt sources play no part).
#  2. image-<release>/: the image and modules unpacked, with depmod run; the host's
#     /lib/modules/<release> is a symlink to it, where virtme-ng looks for a distribution kernel's
#     modules (the guest's root is the host's).
#  3. chroot-<suite>/: a Debian root of the row's suite (trixie, forky, sid) made by debootstrap
#     with the toolchain the kernel was built with: rustc, rust-src, bindgen, the gcc its
#     .config names (a cross gcc for arm64) and libclang. Their versions are checked against the
#     ones the headers' .config records, by the package's rule (packaging/dkms/toolchain.sh:
#     rustc and bindgen exactly, gcc of the same upstream version); a mismatch stops here. One
#     root serves every kernel of its suite.
#  4. In that root, /usr/src/rust-loop-kbuild/<release>: a copy of the headers tree in which the
#     Rust artefacts Debian does not ship (rust/*.rmeta, the macros crate, scripts/target.json)
#     are regenerated from the same kernel source (make O=<copy> rust/kernel.o, 2-3 minutes),
#     cross-compiled for arm64.
#
# Building a module against it runs make inside that root (`scripts/kernels/stock.sh make M=...
# modules`, which scripts/kernels/kmake.sh does); the headers' .kernelvariables give ARCH,
# CROSS_COMPILE and CC.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# shellcheck source=../../packaging/dkms/toolchain.sh
source "$ROOT/packaging/dkms/toolchain.sh"

stock_paths
base=$CACHE/stock
debs=$base/debs/$STOCK_DEBVER
image=$base/image-$STOCK_KREL
croot=$STOCK_ROOT
kbuild_in=$STOCK_KBUILD_IN
kbuild=$croot$kbuild_in
# An amd64 kernel is booted by the VM (its image is always unpacked); another architecture's
# only on request.
want_image=0
[ "$STOCK_ARCH" != amd64 ] && [ "${STOCK_IMAGE:-0}" != 1 ] || want_image=1

# The build environment's packages: the toolchain (checked against the kernel's .config below;
# the compiler's package is added there) and what the kernel's build scripts run.
CHROOT_PKGS=(rustc rust-src bindgen rust-clippy rustfmt libclang-dev make bc bison flex
	libelf-dev libssl-dev pahole kmod xz-utils python3 cpio rsync libc6-dev)

# Runs a command in the build environment, with /proc (objtool needs it) and the project
# directory mounted at their own paths, in a mount namespace of its own (nothing stays mounted).
# With STOCK_TOOLCHAIN=rustup, the host's rustup and cargo homes are mounted at /root and come
# first in PATH.
rustup_mode=0
[ "${STOCK_TOOLCHAIN:-debian}" != rustup ] || rustup_mode=1
stock_exec() {
	[ -x "$croot/usr/bin/rustc" ] || die "the stock build environment is not made: run scripts/kernels/stock.sh"
	unshare -m --propagation private bash -c '
		set -e
		croot=$1 root=$2 cwd=$3 rustup=$4
		shift 4
		mount -t proc proc "$croot/proc"
		mkdir -p "$croot$root"
		mount --bind "$root" "$croot$root"
		path=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
		if [ "$rustup" = 1 ]; then
			for d in .rustup .cargo; do
				mkdir -p "$croot/root/$d"
				mount --bind "$HOME/$d" "$croot/root/$d"
			done
			path=/root/.cargo/bin:$path
		fi
		exec chroot "$croot" env -i HOME=/root LANG=C.UTF-8 PATH="$path" \
			TERM="${TERM:-dumb}" bash -c "
				# The root'"'"'s libclang, for bindgen (trixie: 19, forky and sid: 21).
				LIBCLANG_PATH=\$(ls -d /usr/lib/llvm-*/lib 2>/dev/null | sort -V | tail -n 1)
				export LIBCLANG_PATH
				cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$cwd" "$@"
	' _ "$croot" "$ROOT" "$PWD" "$rustup_mode" "$@"
}

case "${1:-}" in
exec)
	shift
	stock_exec "$@"
	exit
	;;
make)
	shift
	[ -f "$kbuild/.rust-loop-built" ] || die "the stock build tree is not made: run scripts/kernels/stock.sh"
	stock_exec make -C "$kbuild_in" "$@"
	exit
	;;
vmlinuz)
	[ -f "$image/boot/vmlinuz-$STOCK_KREL" ] || die "the stock kernel image is not unpacked: run scripts/kernels/stock.sh"
	echo "$image/boot/vmlinuz-$STOCK_KREL"
	exit 0
	;;
virtiofsd)
	# A directory with a `virtiofsd` that runs the build root's (Debian's virtiofsd, which the
	# host's bookworm lacks) with the root's own loader and libraries, on the host.
	[ -x "$croot/usr/bin/rustc" ] || die "the stock build environment is not made: run scripts/kernels/stock.sh"
	if [ ! -x "$croot/usr/libexec/virtiofsd" ]; then
		say "stock: installing virtiofsd in $croot"
		stock_exec sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends virtiofsd' >&2 ||
			die "installing virtiofsd in $croot failed"
	fi
	loader=$(compgen -G "$croot/lib64/ld-linux-x86-64.so.2" || compgen -G "$croot/usr/lib64/ld-linux-x86-64.so.2") ||
		die "no dynamic loader in $croot"
	bin=$base/tools-$STOCK_SUITE
	mkdir -p "$bin"
	cat >"$bin/virtiofsd.new" <<-EOF
		#!/bin/sh
		# Made by scripts/kernels/stock.sh: $STOCK_SUITE's virtiofsd, run on the host.
		exec "$loader" --library-path "$croot/lib/x86_64-linux-gnu:$croot/usr/lib/x86_64-linux-gnu" "$croot/usr/libexec/virtiofsd" "\$@"
	EOF
	chmod +x "$bin/virtiofsd.new" && mv "$bin/virtiofsd.new" "$bin/virtiofsd"
	"$bin/virtiofsd" --version >/dev/null || die "$bin/virtiofsd does not run"
	echo "$bin"
	exit 0
	;;
"") ;;
*) die "usage: scripts/kernels/stock.sh [exec CMD... | make ARGS... | vmlinuz | virtiofsd]" ;;
esac

image_ready() {
	[ $want_image = 0 ] && return 0
	[ -f "$image/.rust-loop-unpacked" ] || return 1
	[ "$STOCK_ARCH" != amd64 ] ||
		[ "$(readlink "/lib/modules/$STOCK_KREL" 2>/dev/null)" = "$image/lib/modules/$STOCK_KREL" ]
}
cache_hit() {
	if [ -f "$kbuild/.rust-loop-built" ] && image_ready; then
		say "stock: cache hit ($STOCK_NAME: $STOCK_KREL, $kbuild)"
		echo "$kbuild"
		exit 0
	fi
}
# A finished kernel needs no lock: its markers are written last.
cache_hit
[ "$(id -u)" = 0 ] || die "scripts/kernels/stock.sh must run as root (debootstrap, chroot, /lib/modules)"
mkdir -p "$base"
exec 9>"$base/.lock"
if ! flock -n 9; then
	say "stock: another run is preparing $base; waiting for it"
	flock 9
	cache_hit
fi

# 1. The packages: the build's from the row's suite and architecture (the kbuild tools are the
# build host's, amd64), the image's when it is booted.
fetch() { # fetch ARCH PACKAGE...: each at the row's version, into $debs
	local arch=$1
	shift
	python3 "$ROOT/scripts/kernels/debian_archive.py" fetch "$STOCK_PKGS" "$arch" "$debs" \
		"${@/%/=$STOCK_DEBVER}" >/dev/null ||
		die "fetching $* ($arch) from $STOCK_PKGS failed (see above)"
}
mkdir -p "$debs"
say "stock: $STOCK_NAME: $STOCK_KREL ($STOCK_DEBVER) from $STOCK_PKGS"
fetch "$STOCK_ARCH" "linux-headers-$STOCK_KREL" "linux-headers-$STOCK_ABI-common" "$STOCK_SOURCE"
fetch amd64 "linux-kbuild-$STOCK_ABI"
IMAGE_PKGS=("linux-binary-$STOCK_KREL" "linux-modules-$STOCK_KREL" "linux-base-$STOCK_KREL")
[ $want_image = 0 ] || fetch "$STOCK_ARCH" "${IMAGE_PKGS[@]}"
# The package file of $1 (for the row's architecture, or all, or the build host's).
deb() {
	local f
	f=$({ compgen -G "$debs/${1}_*_$STOCK_ARCH.deb" || compgen -G "$debs/${1}_*_all.deb" ||
		compgen -G "$debs/${1}_*_amd64.deb"; } | head -n 1)
	[ -n "$f" ] || die "no package file of $1 in $debs"
	echo "$f"
}

# 2. The image and its modules, for the VM.
if [ $want_image = 1 ] && [ ! -f "$image/.rust-loop-unpacked" ]; then
	say "stock: unpacking the image and modules into $image"
	rm -rf "$image" && mkdir -p "$image"
	for p in "${IMAGE_PKGS[@]}"; do
		dpkg-deb -x "$(deb "$p")" "$image" || die "unpacking $p failed"
	done
	# Merged /usr: the modules may sit under usr/lib/modules.
	if [ ! -d "$image/lib/modules/$STOCK_KREL" ] && [ -d "$image/usr/lib/modules/$STOCK_KREL" ]; then
		mkdir -p "$image/lib/modules"
		mv "$image/usr/lib/modules/$STOCK_KREL" "$image/lib/modules/"
	fi
	if [ ! -f "$image/boot/vmlinuz-$STOCK_KREL" ]; then
		# Newer Debian packages keep it beside the modules.
		v=$(find "$image" \( -name "vmlinuz-$STOCK_KREL" -o -path "*/modules/$STOCK_KREL/vmlinuz" \) | head -n 1)
		[ -n "$v" ] || die "no vmlinuz-$STOCK_KREL in linux-binary-$STOCK_KREL"
		mkdir -p "$image/boot" && cp "$v" "$image/boot/vmlinuz-$STOCK_KREL"
	fi
	depmod -b "$image" "$STOCK_KREL" || die "depmod for $STOCK_KREL failed"
	touch "$image/.rust-loop-unpacked"
fi
link=/lib/modules/$STOCK_KREL
if [ $want_image = 1 ] && [ "$STOCK_ARCH" = amd64 ] &&
	[ "$(readlink "$link" 2>/dev/null)" != "$image/lib/modules/$STOCK_KREL" ]; then
	[ ! -e "$link" ] || [ -L "$link" ] ||
		die "$link exists and is not rust_loop's symlink: this host has that kernel installed; remove it or set RUST_LOOP_CACHE"
	# A fresh machine (a minimal container image) may have no /lib/modules at all.
	mkdir -p /lib/modules || die "cannot make /lib/modules (read-only root?): virtme-ng looks for $STOCK_KREL's modules there"
	ln -sfn "$image/lib/modules/$STOCK_KREL" "$link"
fi

# The toolchain the kernel was built with, from its headers' .config.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dpkg-deb --fsys-tarfile "$(deb "linux-headers-$STOCK_KREL")" |
	tar -xO --wildcards "*/linux-headers-$STOCK_KREL/.config" >"$tmp/config" ||
	die "no .config in linux-headers-$STOCK_KREL"
cfg() { sed -n "s/^$1=\"\\(.*\\)\"\$/\\1/p" "$tmp/config"; }
grep -q '^CONFIG_RUST=y' "$tmp/config" || die "$STOCK_KREL was built without CONFIG_RUST: rust_loop cannot be built for it"
want_rustc=$(cfg CONFIG_RUSTC_VERSION_TEXT)
want_bindgen=$(cfg CONFIG_BINDGEN_VERSION_TEXT)
want_cc=$(cfg CONFIG_CC_VERSION_TEXT)
# "x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0": the compiler's command, and its Debian
# package (gcc-14, or the cross compiler gcc-14-aarch64-linux-gnu).
cc_cmd=${want_cc%% *}
case "$cc_cmd" in
x86_64-linux-gnu-gcc-*) cc_pkg=gcc-${cc_cmd##*-} ;;
*-linux-gnu-gcc-*)
	triplet=${cc_cmd%-gcc-*}
	cc_pkg=gcc-${cc_cmd##*-}-${triplet//_/-}
	;;
*) die "$STOCK_KREL was built with '$want_cc', a compiler the build root cannot provide" ;;
esac
CHROOT_PKGS+=("$cc_pkg")
# arm64's 32-bit compat vDSO, which `make prepare` builds, needs the compat cross compiler its
# .kernelvariables names (arm-linux-gnueabihf-): gcc-14-arm-linux-gnueabihf.
dpkg-deb --fsys-tarfile "$(deb "linux-headers-$STOCK_KREL")" |
	tar -xO --wildcards "*/linux-headers-$STOCK_KREL/.kernelvariables" >"$tmp/kernelvariables" 2>/dev/null || true
compat=$(sed -n 's/^override CROSS_COMPILE_COMPAT = \(.*\)-$/\1/p' "$tmp/kernelvariables")
compat_make=()
if [ -n "$compat" ]; then
	CHROOT_PKGS+=("gcc-${cc_cmd##*-}-${compat//_/-}")
	# The vDSO's Makefile calls the unversioned $(CROSS_COMPILE_COMPAT)gcc by default.
	compat_make=(CC_COMPAT="$compat-gcc-${cc_cmd##*-}")
fi

# 3. The build environment.
if [ ! -f "$croot/.rust-loop-made" ]; then
	command -v debootstrap >/dev/null || die "debootstrap not found: run scripts/setup.sh"
	# A suite newer than the host's debootstrap knows (forky on bookworm) is made by sid's script.
	script=/usr/share/debootstrap/scripts/$STOCK_SUITE
	[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
	say "stock: making a Debian $STOCK_SUITE build root in $croot (debootstrap, a few minutes)"
	rm -rf "$croot"
	debootstrap --variant=minbase --include="$(
		IFS=,
		echo "${CHROOT_PKGS[*]}"
	)" "$STOCK_SUITE" "$croot" "$STOCK_ARCHIVE" "$script" >"$base/debootstrap-$STOCK_SUITE.log" 2>&1 ||
		die "debootstrap of $STOCK_SUITE from $STOCK_ARCHIVE failed (log: $base/debootstrap-$STOCK_SUITE.log)"
	touch "$croot/.rust-loop-made"
fi
# A suite whose Release has expired (its Valid-Until passed: forky's and sid's as a snapshot
# mirror serves them) is still used when a later kernel of the root adds packages (sid's arm64
# cross compilers after its amd64 kernel made the root). Signatures are still checked.
[ -f "$croot/etc/apt/apt.conf.d/99rust-loop-valid-until" ] ||
	printf '%s\n' '// scripts/kernels/stock.sh: a mirror serving an expired Release (Valid-Until past) is still used.' \
		'Acquire::Check-Valid-Until "false";' >"$croot/etc/apt/apt.conf.d/99rust-loop-valid-until"
if ! stock_exec sh -c 'for p; do dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "ok installed" || exit 1; done' _ "${CHROOT_PKGS[@]}"; then
	say "stock: installing the build root's packages (${CHROOT_PKGS[*]})"
	stock_exec sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"' _ "${CHROOT_PKGS[@]}" >&2 ||
		die "apt-get install in $croot failed"
fi
have_rustc=$(stock_exec rustc --version)
have_bindgen=$(stock_exec bindgen --version)
have_cc=$(stock_exec "$cc_cmd" --version | head -n 1)
# The package's rule (packaging/dkms/toolchain.sh): rustc and bindgen exactly, the C compiler of
# the same upstream version.
if [ $rustup_mode = 0 ]; then
	if verdict=$(rust_loop_toolchain_check "$want_rustc" "$have_rustc" "$want_bindgen" "$have_bindgen" "$want_cc" "$have_cc"); then
		[ -z "$verdict" ] || say "stock: $verdict"
	else
		die "toolchain mismatch: Debian $STOCK_SUITE's toolchain is not the one $STOCK_KREL was built with, and a module built with it cannot load into that kernel:"$'\n'"$verdict"$'\n'"Pin a kernel built with this toolchain in config/kernels.conf (make kernels lists the archive's kernels)"
	fi
fi
if [ $rustup_mode = 1 ]; then
	say "stock: the project's toolchain for a compile-only tree ($have_rustc; $have_bindgen; $have_cc)"
else
	say "stock: toolchain matches the kernel's ($have_rustc; $have_bindgen; $have_cc)"
fi

# 4. The headers with the Rust artefacts.
if [ ! -f "$kbuild/.rust-loop-built" ]; then
	src_in=$STOCK_SRC_IN
	if [ ! -f "$croot$src_in/.rust-loop-extracted" ]; then
		say "stock: unpacking $STOCK_SOURCE ($STOCK_DEBVER) into the build root"
		rm -rf "$croot$src_in" "$tmp/src" && mkdir -p "$croot$src_in" "$tmp/src"
		dpkg-deb -x "$(deb "$STOCK_SOURCE")" "$tmp/src"
		tar -xf "$tmp/src/usr/src/$STOCK_SOURCE.tar.xz" -C "$croot$src_in" --strip-components=1 ||
			die "unpacking $STOCK_SOURCE failed (disk full?)"
		rm -rf "$tmp/src"
		touch "$croot$src_in/.rust-loop-extracted"
	fi
	say "stock: unpacking the headers into the build root"
	for p in "linux-headers-$STOCK_KREL" "linux-headers-$STOCK_ABI-common" "linux-kbuild-$STOCK_ABI"; do
		dpkg-deb -x "$(deb "$p")" "$croot" || die "unpacking $p failed"
	done
	say "stock: regenerating the Rust artefacts (make O=$kbuild_in rust/kernel.o, 2-3 minutes)"
	rm -rf "$kbuild" && mkdir -p "$(dirname "$kbuild")"
	# A copy that owns its build scripts (the package links them from linux-kbuild's directory,
	# relatively), so that the build writes nothing into the packages' files. ARCH,
	# CROSS_COMPILE and CC come from the headers' .kernelvariables, which the source's Makefile
	# includes.
	cp -a "$croot/usr/src/linux-headers-$STOCK_KREL" "$kbuild"
	for d in scripts tools; do
		rm -f "$kbuild/$d"
		cp -a "$croot/usr/lib/linux-kbuild-$STOCK_ABI/$d" "$kbuild/$d"
	done
	if [ $rustup_mode = 1 ]; then
		# Another rustc changes the Rust options Kconfig derives from its version: settle them
		# without questions.
		stock_exec make -C "$src_in" O="$kbuild_in" -s olddefconfig >&2 ||
			die "olddefconfig with the project's toolchain failed"
	fi
	stock_exec make -C "$src_in" O="$kbuild_in" "${compat_make[@]}" -j"$(nproc)" -s rust/kernel.o >&2 ||
		die "regenerating the Rust artefacts for $STOCK_KREL failed (see above)"
	[ -f "$kbuild/rust/libkernel.rmeta" ] || die "no rust/libkernel.rmeta after the build"
	touch "$kbuild/.rust-loop-built"
fi
say "stock: ready ($STOCK_NAME: $STOCK_KREL, $kbuild)"
echo "$kbuild"
