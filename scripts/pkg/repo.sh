#!/usr/bin/env bash
# A local apt repository of rust_loop (make repo): a flat repository directory holding this
# checkout's packages (scripts/pkg/deb.sh) and their indexes, made by apt-ftparchive in the packaging
# root (scripts/pkg/debroot.sh):
#
#   results/repo/  rust-loop-dkms_<version>_all.deb, rust-loop_<version>.dsc and .tar.xz,
#                  Packages(.xz), Sources(.xz), Release
#
# apt uses it as it uses any repository, `apt install rust-loop-dkms` and, after a later `make repo`
# and `apt update`, `apt upgrade`:
#
#   echo "deb [trusted=yes] file:$PWD/results/repo ./" >/etc/apt/sources.list.d/rust-loop.list
#   (and deb-src the same, for `apt source rust-loop`)
#
# The repository is unsigned: [trusted=yes] says so. It holds only the latest build.
#
#   scripts/pkg/repo.sh              build the packages (reused when built already) and the repository
#   scripts/pkg/repo.sh DIR          the repository in DIR (inside the project directory) instead
#   scripts/pkg/repo.sh --index DIR  only index the packages already in DIR (scripts/pkg/dkms-test.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"

index_only=0
if [ "${1:-}" = --index ]; then
	index_only=1
	shift
	[ -n "${1:-}" ] || die "usage: scripts/pkg/repo.sh --index DIR"
fi
repo=${1:-$ROOT/results/repo}
mkdir -p "$repo"
repo=$(cd "$repo" && pwd)
[[ $repo == "$ROOT"/* ]] || die "the repository directory must be inside the project directory (the packaging root sees only that)"

if [ $index_only = 0 ]; then
	deb=$(bash scripts/pkg/deb.sh) || die "scripts/pkg/deb.sh failed"
	version=$(dpkg-deb -f "$deb" Version)
	dir=$(dirname "$deb")
	rm -f "$repo"/*.deb "$repo"/*.dsc "$repo"/*.tar.* "$repo"/Packages* "$repo"/Sources* "$repo"/Release
	cp "$deb" "$dir/rust-loop_$version.dsc" "$dir/rust-loop_$version.tar.xz" "$repo/" ||
		die "copying the packages of $version into $repo failed"
fi
compgen -G "$repo/*.deb" >/dev/null || die "no .deb in $repo"
say "repo: indexing $repo (apt-ftparchive)"
bash scripts/pkg/debroot.sh exec bash -c '
	set -e
	cd "$1"
	apt-ftparchive packages . >Packages
	apt-ftparchive sources . 2>/dev/null >Sources # (no override file: its notes are noise)
	for f in Packages Sources; do xz -9 -k -f "$f"; done
	apt-ftparchive -o APT::FTPArchive::Release::Origin=rust_loop \
		-o APT::FTPArchive::Release::Label=rust_loop \
		-o APT::FTPArchive::Release::Description="rust_loop, the loop block driver in Rust (local repository)" \
		release . >Release.new
	mv Release.new Release
' _ "$repo" || die "apt-ftparchive in $repo failed"
say "repo: $repo ($(grep -c '^Package:' "$repo/Packages") binary package(s): $(sed -n 's/^Version: //p' "$repo/Packages" | tr '\n' ' '))"
echo "$repo"
