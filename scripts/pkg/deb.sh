#!/usr/bin/env bash
# Builds the Debian source package rust-loop and its binary package rust-loop-dkms (make deb), the
# Debian way: debian/ with debhelper and dh-dkms, `dpkg-buildpackage -us -uc` in the packaging
# root (scripts/pkg/debroot.sh, Debian trixie), from a copy of the checkout's files. Prints the .deb's
# path; everything lands in results/deb/:
#
#   rust-loop_<version>.dsc, rust-loop_<version>.tar.xz   the native source package
#   rust-loop-dkms_<version>_all.deb                      the package users install
#   rust-loop_<version>_amd64.changes, .buildinfo         what lintian and an upload read
#
# The version: the upstream version is the top entry of debian/changelog (a release: one entry
# per release, naming the kernels it supports). A build of any other commit, or of a checkout with
# changes, gets a snapshot entry on top in the build's copy:
# <release>+git<commits since the release's entry>.g<commit>[.dirty], which sorts after the
# release and before the next one; while the top entry's distribution is UNRELEASED (a release
# in the making), <release>~git<commits since the entry>.g<commit>[.dirty], before the release.
#
#   scripts/pkg/deb.sh                     build (a build of the same version and files is reused)
#   RUST_LOOP_DEB_VERSION=V ...        package as version V, above the one it would get, with a
#                                      changelog entry of its own (scripts/pkg/dkms-test.sh: the upgrade)
#   RUST_LOOP_DEB_OUT=DIR ...          into DIR instead of results/deb/
#   scripts/pkg/deb.sh version             print the version a build would get, and nothing else
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 ||
	die "scripts/pkg/deb.sh builds from a git checkout (an unpacked source package builds with dpkg-buildpackage)"

# The release: the top entry of debian/changelog, and the commit that made it.
release=$(sed -n '1s/^rust-loop (\([^)]*\)) .*/\1/p' debian/changelog)
[ -n "$release" ] || die "debian/changelog does not start with a 'rust-loop (VERSION) ...' entry"
dist=$(sed -n '1s/^rust-loop ([^)]*) \([^;]*\);.*/\1/p' debian/changelog)
# (The last commit that changed that entry's first line: a release is made by committing it with
# its distribution, UNRELEASED until then.)
release_re="^rust-loop [(]$(printf %s "$release" | sed 's/[^A-Za-z0-9]/[&]/g')[)] "
release_commit=$(git log -1 --format=%H -G"$release_re" -- debian/changelog)
dirty=
[ -z "$(git status --porcelain --untracked-files=normal 2>/dev/null | grep -v '^?? results/')" ] || dirty=.dirty
if [ -n "$release_commit" ]; then
	since=$(git rev-list --count "$release_commit..HEAD")
else
	since=$(git rev-list --count HEAD) # the entry is not committed yet
fi
head=$(git rev-parse --short=12 HEAD)
commits="$since commit$([ "$since" = 1 ] || echo s)"
# The build's changelog: as it is for a release; for a snapshot, the top entry (UNRELEASED) gets
# the snapshot's version and a line saying so, or a new entry goes on top (after a release).
entry=
if [ "$dist" = UNRELEASED ]; then
	version=$release~git$since.g$head$dirty
	entry=replace
	note="Snapshot of commit $head, $commits into $release, which is not released yet${dirty:+, with uncommitted changes}."
elif [ "$since" = 0 ] && [ -n "$release_commit" ] && [ -z "$dirty" ]; then
	version=$release
else
	version=$release+git$since.g$head$dirty
	entry=add
	note="Snapshot of commit $head, $commits after $release${dirty:+, with uncommitted changes}."
fi
if [ -n "${RUST_LOOP_DEB_VERSION:-}" ]; then
	bump=$RUST_LOOP_DEB_VERSION
	dpkg --compare-versions "$bump" gt "$version" ||
		die "RUST_LOOP_DEB_VERSION=$bump is not above this build's version $version"
fi
# Debian's and DKMS's rules at once: a native version (no hyphen), letters, digits, . + ~.
for v in "$version" ${bump:+"$bump"}; do
	[[ $v =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
		die "version '$v' is not a native Debian version DKMS can use (a digit first; letters, digits, . + ~)"
done
if [ "${1:-}" = version ]; then
	echo "$version"
	exit 0
fi
version_built=${bump:-$version}
[ $# = 0 ] || die "usage: scripts/pkg/deb.sh [version]"

debroot=$(bash "$ROOT/scripts/pkg/debroot.sh") || die "scripts/pkg/debroot.sh failed"
out=${RUST_LOOP_DEB_OUT:-$ROOT/results/deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ $out == "$ROOT"/* ]] || die "RUST_LOOP_DEB_OUT must be inside the project directory (the packaging root sees only that)"

# The build's copy: the checkout's files (tracked, and new ones git does not ignore), as they are
# in the working tree; it lives in the packaging root, one per checkout. A module build running
# in the checkout meanwhile (CI's perfcheck beside its install test) makes and removes temporary
# files (Kbuild's .*.cmd.tmp): one listed and gone before tar reads it is left out.
build=$debroot/build/$(printf %s "$ROOT" | sha256sum | cut -c1-8)
src=$build/rust-loop-$version
rm -rf "$build" && mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard | grep -zv '^results/' |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar -cf - --null --ignore-failed-read -T - 2>/dev/null | tar -xf - -C "$src" ||
	die "copying the checkout into $src failed"
for f in debian/control debian/rules debian/changelog dkms.conf Kbuild Makefile rust_loop.rs; do
	[ -e "$src/$f" ] || [ ! -e "$f" ] || die "copying the checkout into $src left out $f"
done
# (A changelog bullet, wrapped as dch does.)
bullet() { printf '%s\n' "$1" | fold -s -w 74 | sed 's/ *$//; 1s/^/  * /; 2,$s/^/    /'; }
maint=$(sed -n 's/^Maintainer: //p' debian/control)
if [ -z "$dirty" ]; then date=$(git log -1 --format=%aD HEAD); else date=$(date -R); fi
cl=$src/debian/changelog
case $entry in
replace) { printf 'rust-loop (%s) unstable; urgency=medium\n\n' "$version"; bullet "$note"; sed 1,2d debian/changelog; } >"$cl" ;;
add) { printf 'rust-loop (%s) unstable; urgency=medium\n\n' "$version"; bullet "$note"; printf '\n -- %s  %s\n\n' "$maint" "$date"; cat debian/changelog; } >"$cl" ;;
esac
if [ -n "${bump:-}" ]; then
	{ printf 'rust-loop (%s) unstable; urgency=medium\n\n' "$bump"; bullet "The same source as $version, as version $bump."
		printf '\n -- %s  %s\n\n' "$maint" "$date"; cat "$cl"; } >"$cl.new"
	mv "$cl.new" "$cl"
fi
version=$version_built
src_final=$build/rust-loop-$version
[ "$src" = "$src_final" ] || { mv "$src" "$src_final"; src=$src_final; }

# The same version from the same files is built already: reuse it.
hash=$(cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
deb=$out/rust-loop-dkms_${version}_all.deb
if [ -f "$deb" ] && [ "$(cat "$out/.source" 2>/dev/null)" = "$version $hash" ]; then
	say "deb: $(basename "$deb") is built from these files already"
	rm -rf "$build"
	echo "$deb"
	exit 0
fi

say "deb: dpkg-buildpackage -us -uc for rust-loop $version (in the packaging root)"
log=$out/build.log
bash "$ROOT/scripts/pkg/debroot.sh" exec bash -c 'cd "$1" && dpkg-buildpackage -us -uc' _ "${src#"$debroot"}" >"$log.new" 2>&1 || {
	mv "$log.new" "$log"
	tail -n 30 "$log" >&2
	die "dpkg-buildpackage failed (log: $log)"
}
# Only this build's files stay: scripts/pkg/repo.sh publishes what is here.
rm -f "$out"/rust-loop_* "$out"/rust-loop-dkms_* "$out/.source"
mv "$log.new" "$log"
for f in "$build"/rust-loop_"$version"* "$build"/rust-loop-dkms_"$version"_*; do
	[ -f "$f" ] && mv "$f" "$out/"
done
rm -rf "$build"
[ -f "$deb" ] || die "dpkg-buildpackage made no $(basename "$deb") (log: $log)"
echo "$version $hash" >"$out/.source"
say "deb: $deb ($(du -h "$deb" | cut -f1), $(dpkg-deb -c "$deb" | wc -l) entries)"
echo "$deb"
