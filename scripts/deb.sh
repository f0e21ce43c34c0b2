#!/usr/bin/env bash
# Builds the DKMS package, results/deb/rust-loop-dkms_<version>_all.deb (make deb), with plain
# dpkg-deb from a staged tree (no debhelper). The package's parts are in packaging/dkms/.
#
#   scripts/deb.sh                 build it; prints the .deb's path
#   RUST_LOOP_DEB_VERSION=1.2 ...  another version than 0.<number of commits> (0.185 ...)
#
# What the package installs:
#   /usr/src/rust-loop-<version>/        the module source (Kbuild, rust_loop.rs, rust_loop/, uapi/)
#                                        and dkms.conf
#   /usr/lib/rust-loop/rust-loop-build   DKMS's MAKE[0]: checks the toolchain, regenerates the Rust
#                                        artefacts once per kernel, builds rust_loop.ko
#   /usr/lib/modprobe.d/rust-loop.conf   `modprobe loop` gives rust_loop (loop.ko as the fallback)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (package dpkg)"
pkg=$ROOT/packaging/dkms

if [ -n "${RUST_LOOP_DEB_VERSION:-}" ]; then
	version=$RUST_LOOP_DEB_VERSION
else
	count=$(git -C "$ROOT" rev-list --count HEAD 2>/dev/null) ||
		die "not a git checkout: set RUST_LOOP_DEB_VERSION"
	version=0.$count
fi
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
	die "version '$version' is not usable for both dpkg and DKMS (digits first; letters, digits, . + ~)"

# The module source: what Kbuild compiles, without build products or the bindgen output.
srcs=(Kbuild rust_loop.rs)
while IFS= read -r f; do srcs+=("$f"); done < <(
	find rust_loop uapi -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) \
		! -name loop_generated.rs ! -name c_values_generated.rs | sort
)
for f in "${srcs[@]}"; do [ -f "$f" ] || die "missing source file $f"; done

out=$ROOT/results/deb
stage=$(mktemp -d "${TMPDIR:-/tmp}/rust-loop-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
subst() { sed "s/@VERSION@/$version/g" "$1" >"$2"; }

say "deb: staging rust-loop-dkms $version"
src=$stage/usr/src/rust-loop-$version
mkdir -p "$src" "$stage/usr/lib/rust-loop" "$stage/usr/lib/modprobe.d" \
	"$stage/usr/share/doc/rust-loop-dkms" "$stage/DEBIAN"
for f in "${srcs[@]}"; do install -D -m 0644 "$f" "$src/$f"; done
subst "$pkg/dkms.conf.in" "$src/dkms.conf"
install -m 0755 "$pkg/rust-loop-build" "$stage/usr/lib/rust-loop/rust-loop-build"
install -m 0644 "$pkg/rust-loop.conf" "$stage/usr/lib/modprobe.d/rust-loop.conf"
install -m 0644 README.md "$stage/usr/share/doc/rust-loop-dkms/README.md"
printf 'rust_loop, the Linux loop block driver in Rust.\nLicense: GPL-2.0\n' \
	>"$stage/usr/share/doc/rust-loop-dkms/copyright"
install -m 0755 "$pkg/preinst" "$pkg/postrm" "$stage/DEBIAN/"
for s in postinst prerm; do
	subst "$pkg/$s.in" "$stage/DEBIAN/$s"
	chmod 0755 "$stage/DEBIAN/$s"
done
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed "s/@VERSION@/$version/g; s/@SIZE@/$size/g" "$pkg/control.in" >"$stage/DEBIAN/control"
for s in preinst postinst prerm postrm; do
	sh -n "$stage/DEBIAN/$s" || die "syntax error in the $s script"
done
bash -n "$stage/usr/lib/rust-loop/rust-loop-build" || die "syntax error in rust-loop-build"
bash -n "$src/dkms.conf" || die "syntax error in dkms.conf"

mkdir -p "$out"
deb=$out/rust-loop-dkms_${version}_all.deb
# Only this version's package stays: dkms-test.sh installs results/deb/rust-loop-dkms_*.deb.
rm -f "$out"/rust-loop-dkms_*_all.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null ||
	die "dpkg-deb --build failed"
say "deb: $deb ($(du -h "$deb" | cut -f1), $(dpkg-deb -c "$deb" | wc -l) entries)"
echo "$deb"
