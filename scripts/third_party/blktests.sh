#!/usr/bin/env bash
# Builds blktests (its loop group: tests/blktests.t.sh) from its source at the pinned commit
# (scripts/third_party/third_party.sh: $RUST_LOOP_THIRD_PARTY, ../shared/third_party, the cache,
# or fetched upstream), once, into $CACHE/blktests-<tarball hash>, and copies the built tree, packed,
# to tests/blktests.tar (not in git) for the guest to unpack. Two mends are made to the source:
# - common/rc's _compare_three_version_numbers reads only the leading digits and dots of a
#   release such as Debian's "7.3.4+deb13-amd64" (it read "4deb13" as a number, and loop/010 and
#   loop/011 vanished from the output);
# - loop/009 listens for the partition's add uevent for 60 s instead of 5 (`timeout 5 udevadm
#   monitor`). The 5 s are counted from before the test's own set-up: on real hardware that
#   takes well under a second, in the suite's TCG guest 4.5 to 7 s (udevadm starting, 0.6 to
#   1.9 s; `udevadm control -R`, 1.7 to 2.6 s), with loop.c as with rust_loop, so the monitor
#   had often exited before `losetup -P` ran, and the add uevent, sent during LOOP_CONFIGURE,
#   found nobody listening. The test still ends at the first add uevent and still fails
#   without one (after 60 s); nothing else it checks changes.
# Without any source, writes why to tests/blktests.missing instead,
# and the blktests test is skipped with that reason. Exits non-zero only on a real failure.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
say "tests: blktests from its source (tests/blktests.t.sh)"
rm -f tests/blktests.tar tests/blktests.missing
err=$(mktemp)
trap 'rm -f "$err"' EXIT
rc=0
tarball=$(bash scripts/third_party/third_party.sh blktests 2>"$err") || rc=$?
if [ $rc = 2 ]; then
	sed -n '/^third_party: /,$p' "$err" | sed 's/^third_party: //' >tests/blktests.missing
	say "tests: no blktests source; its test will be skipped: $(head -n 1 tests/blktests.missing)"
	exit 0
fi
[ $rc = 0 ] || { cat "$err" >&2; die "scripts/third_party/third_party.sh blktests failed"; }
# The build is named by the source and by this script (its mends).
dir=$CACHE/blktests-$(cat "$tarball" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
mkdir -p "$CACHE"
# One build at a time: a second caller waits, then finds the finished build.
exec 8>"$dir.lock"
flock 8
if [ ! -f "$dir/.rust-loop-built" ]; then
	rm -rf "$dir" && mkdir -p "$dir/src"
	tar -xzf "$tarball" -C "$dir/src" || die "extracting $tarball failed"
	rc_file=$dir/src/common/rc
	grep -q "^	IFS='.' read -r a b c <<< \"\$1\"\$" "$rc_file" ||
		die "blktests: common/rc's version parsing is not the one the mend expects ($rc_file)"
	sed -i "s/^	IFS='.' read -r a b c <<< \"\$1\"\$/	IFS='.' read -r a b c <<< \"\${1%%[!0-9.]*}\"/" "$rc_file"
	t009=$dir/src/tests/loop/009
	grep -q '^	timeout 5 udevadm monitor -ks block/partition ' "$t009" ||
		die "blktests: loop/009's monitor is not the one the mend expects ($t009)"
	sed -i 's/^	timeout 5 udevadm monitor -ks block\/partition /	timeout 60 udevadm monitor -ks block\/partition /' "$t009"
	make -C "$dir/src" -j"$(nproc)" >"$dir/build.log" 2>&1 ||
		{ tail -n 30 "$dir/build.log" >&2; die "building blktests failed (log: $dir/build.log)"; }
	tar -C "$dir/src" --exclude='*.o' -cf "$dir/blktests.tar" . || die "packing $dir/blktests.tar failed"
	touch "$dir/.rust-loop-built"
fi
exec 8>&-
cp "$dir/blktests.tar" tests/blktests.tar
