#!/usr/bin/env bash
# The packaging root: a Debian trixie root file system (debootstrap, minbase) holding Debian's
# packaging tools, debhelper, dh-dkms, lintian, apt-utils and dpkg-dev, in which `make deb`
# (scripts/pkg/deb.sh) builds the source and binary packages with dpkg-buildpackage, lintian
# (scripts/pkg/lintian.sh) checks them and `make repo` (scripts/pkg/repo.sh) indexes the apt repository
# directory with apt-ftparchive. It is a root of its own, not the stock kernel's build root
# (scripts/kernels/stock.sh), so that the tools' dependencies never touch that root's toolchain.
#
#   scripts/pkg/debroot.sh              make it (once; later runs check its packages) and print its path
#   scripts/pkg/debroot.sh exec CMD...  run CMD in it as root, with the project directory mounted at
#                                   its own path and the working directory kept when it is in there
#
# It lives in $RUST_LOOP_CACHE/deb/root-trixie (about 950 MB), made in 2.5-5 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

DEB_SUITE=trixie
DEB_ARCHIVE=http://deb.debian.org/debian
DEB_ROOT=$CACHE/deb/root-$DEB_SUITE
# The tools: what dpkg-buildpackage needs (build-essential and debian/control's Build-Depends),
# lintian, apt-ftparchive.
DEB_ROOT_PKGS=(build-essential debhelper dh-dkms lintian apt-utils)

deb_exec() {
	[ -f "$DEB_ROOT/.rust-loop-made" ] || die "the packaging root is not made: run scripts/pkg/debroot.sh"
	unshare -m --propagation private bash -c '
		set -e
		r=$1 root=$2 cwd=$3
		shift 3
		mount -t proc proc "$r/proc"
		mkdir -p "$r$root"
		mount --bind "$root" "$r$root"
		exec chroot "$r" env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
			PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin TERM="${TERM:-dumb}" \
			bash -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$cwd" "$@"
	' _ "$DEB_ROOT" "$ROOT" "$PWD" "$@"
}

case "${1:-}" in
exec)
	shift
	deb_exec "$@"
	exit
	;;
"") ;;
*) die "usage: scripts/pkg/debroot.sh [exec CMD...]" ;;
esac

[ "$(id -u)" = 0 ] || die "scripts/pkg/debroot.sh must run as root (debootstrap, chroot)"
mkdir -p "$CACHE/deb"
exec 9>"$CACHE/deb/.lock"
if ! flock -n 9; then
	say "debroot: another run is preparing $DEB_ROOT; waiting for it"
	flock 9
fi
if [ ! -f "$DEB_ROOT/.rust-loop-made" ]; then
	command -v debootstrap >/dev/null || die "debootstrap not found: apt install debootstrap (scripts/setup.sh installs it on a development machine)"
	say "debroot: making a Debian $DEB_SUITE packaging root in $DEB_ROOT (debootstrap and the tools, 2.5-5 minutes)"
	rm -rf "$DEB_ROOT"
	# minbase only: debootstrap does not resolve virtual packages (lintian's perl modules need
	# perl-openssl-abi-3), apt-get below does.
	debootstrap --variant=minbase "$DEB_SUITE" "$DEB_ROOT" "$DEB_ARCHIVE" >"$CACHE/deb/debootstrap.log" 2>&1 ||
		die "debootstrap of $DEB_SUITE from $DEB_ARCHIVE failed (log: $CACHE/deb/debootstrap.log)"
	touch "$DEB_ROOT/.rust-loop-made"
fi
# The tools (and, for a root made before a tool joined the list, that one).
if ! deb_exec sh -c 'for p; do dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "ok installed" || exit 1; done' _ "${DEB_ROOT_PKGS[@]}"; then
	say "debroot: installing ${DEB_ROOT_PKGS[*]} in the packaging root"
	deb_exec sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@"' _ "${DEB_ROOT_PKGS[@]}" >&2 ||
		die "apt-get install in $DEB_ROOT failed"
fi
echo "$DEB_ROOT"
