#!/usr/bin/env bash
# Installs everything rust_loop needs on a fresh Debian bookworm machine. Idempotent; run as root.
#
#  - apt: bookworm-backports (qemu 10) and trixie-backports pinned low so that only
#    linux-source-7.3 comes from it (the stock kernel's packages are fetched from it by
#    scripts/kernels/stock.sh with apt-get download); kernel build deps; libclang 19; debootstrap and
#    busybox-static (the stock flavour); guest userspace for the tests.
#  - rustup's rust-src, bindgen-cli, and virtme-ng in a venv under the cache directory.
#  - SETUP_ARM64=1 (make arm64-boot): qemu-system-arm from bookworm-backports, as qemu-system-x86
#    (the two share qemu-system-common, so their versions must match).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ "$(id -u)" = 0 ] || die "scripts/setup.sh must run as root (it installs Debian packages)"
command -v apt-get >/dev/null || die "apt-get not found: rust_loop's set-up expects Debian bookworm"

APT_PKGS=(
	# kernel build
	bc bison flex libelf-dev libssl-dev cpio kmod rsync xz-utils make gcc python3
	# VM (qemu-system-x86 comes from bookworm-backports, below)
	python3-venv
	# guest userspace used by the tests and the benchmark
	fio util-linux e2fsprogs xfsprogs parted fdisk dosfstools udev python3-venv
	strace jq
	# the 32-bit test program for the compat ioctls (tests/compat)
	gcc-multilib
	# aio-stress (fstests' generic/113 load, tests/dio-hang), built from the fstests snapshot
	libaio-dev
	# backing file systems of the data-path tests
	btrfs-progs
	# the stock kernel flavour (scripts/kernels/stock.sh): its build root is made by debootstrap, and
	# virtme-ng makes the initramfs of a modular distribution kernel with busybox
	debootstrap busybox-static
	# Debian's archive read without the host's apt (scripts/kernels/debian_archive.py: make kernels, the
	# stock kernels' packages): its signed indexes checked
	gpgv debian-archive-keyring
)
# The project's own kernels (KERNEL=default|debug) and the project's toolchain (make toolchains):
# the kernel source, libclang for the host's bindgen, LLVM for the debug flavour (KASAN + Rust
# needs clang), bindgen-cli. The stock flavour (the default) needs none of them: its toolchain is
# Debian's, in its own build root (scripts/kernels/stock.sh).
PROJECT_PKGS=(libclang-19-dev clang-19 lld-19 llvm-19 "linux-source-$KVER_SERIES")
project=0
if [ "$KERNEL" != stock ] || [ -n "${KDIR:-}" ] || [ "${SETUP_PROJECT_TOOLCHAIN:-0}" = 1 ]; then
	project=1
	APT_PKGS+=("${PROJECT_PKGS[@]}")
fi

sources=/etc/apt/sources.list.d/rust-loop.sources
pins=/etc/apt/preferences.d/rust-loop.pref
want_sources="Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"
want_pins="# rust_loop: nothing from trixie-backports but the kernel source.
Package: *
Pin: release n=trixie-backports
Pin-Priority: 50

Package: linux-source-$KVER_SERIES
Pin: release n=trixie-backports
Pin-Priority: 500
"
changed=0
# (A minimal machine may lack the directories: apt reads them when they are there.)
for d in "$(dirname "$sources")" "$(dirname "$pins")"; do
	mkdir -p "$d" || die "cannot make $d (read-only root?)"
done
if ! printf '%s' "$want_sources" | cmp -s - "$sources"; then
	say "apt: adding bookworm-backports and trixie-backports ($sources)"
	printf '%s' "$want_sources" >"$sources"
	changed=1
fi
if ! printf '%s' "$want_pins" | cmp -s - "$pins"; then
	say "apt: pinning trixie-backports low ($pins)"
	printf '%s' "$want_pins" >"$pins"
	changed=1
fi

missing=()
for p in "${APT_PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# QEMU 10 from bookworm-backports: x86, and arm (qemu-system-aarch64) for make arm64-boot.
QEMU_PKGS=(qemu-system-x86)
[ "${SETUP_ARM64:-0}" != 1 ] || QEMU_PKGS+=(qemu-system-arm)
need_qemu=0
for p in "${QEMU_PKGS[@]}"; do
	case "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)" in
	1:1[0-9]*) ;;
	*) need_qemu=1 ;;
	esac
done

if [ ${#missing[@]} -gt 0 ] || [ $need_qemu = 1 ]; then
	if [ $changed = 1 ] || [ ! -f /var/lib/apt/periodic/rust-loop-updated ]; then
		say "apt-get update"
		apt-get update -q || die "apt-get update failed: check the network and $sources"
		mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/rust-loop-updated
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		say "apt-get install ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
			die "apt-get install failed for: ${missing[*]} (see the apt output above)"
	fi
	if [ $need_qemu = 1 ]; then
		say "apt-get install -t bookworm-backports ${QEMU_PKGS[*]} (qemu 10)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			-t bookworm-backports "${QEMU_PKGS[@]}" ||
			die "installing ${QEMU_PKGS[*]} from bookworm-backports failed (see the apt output above)"
	fi
fi
if [ $project = 1 ]; then
	[ -f "/usr/src/linux-source-$KVER_SERIES.tar.xz" ] ||
		die "/usr/src/linux-source-$KVER_SERIES.tar.xz missing after installing linux-source-$KVER_SERIES"
	[ -f "$LIBCLANG_PATH/libclang.so" ] || ls "$LIBCLANG_PATH"/libclang*.so* >/dev/null 2>&1 ||
		die "libclang not found in LIBCLANG_PATH=$LIBCLANG_PATH: install libclang-19-dev"
fi

# rustup: the project's kernels and toolchain build with its rustc; the stock flavour's toolchain
# is Debian's, in its build root, so a machine without rustup (no ~/.cargo) still runs make run
# and make check.
if command -v rustup >/dev/null; then
	for c in rust-src rustfmt clippy; do
		rustup component list --installed 2>/dev/null | grep -q "^$c" && continue
		say "rustup component add $c"
		rustup component add "$c" || die "rustup component add $c failed"
	done
elif [ $project = 1 ]; then
	die "rustup not found in PATH or ~/.cargo/bin: install rustup (rustc >= 1.78): KERNEL=default|debug and make toolchains build with its toolchain"
else
	say "rustup not found: its components (rust-src, rustfmt, clippy) are left out; the stock kernel's build does not use them (KERNEL=default|debug, make toolchains and make fmt do)"
fi
if [ $project = 1 ] && ! command -v bindgen >/dev/null; then
	say "cargo install --locked bindgen-cli (a few minutes)"
	cargo install --locked bindgen-cli || die "cargo install bindgen-cli failed"
fi

if [ ! -x "$CACHE/venv/bin/vng" ]; then
	say "virtme-ng into $CACHE/venv"
	mkdir -p "$CACHE"
	python3 -m venv "$CACHE/venv" || die "python3 -m venv failed: install python3-venv"
	"$CACHE/venv/bin/pip" install -q virtme-ng || die "pip install virtme-ng failed"
fi
say "set-up complete (cache: $CACHE)"
