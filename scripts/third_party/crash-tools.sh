#!/usr/bin/env bash
# Builds what the crash tests (tests/crash.t.sh, make crashcheck) take from fstests at its pinned
# commit: replay-log (src/log-writes/, the dm-log-writes replay tool) and fsstress (ltp/), from a
# build of the fstests source (scripts/third_party/fstests-build.sh: $CACHE/fstests-<hash>, shared with make
# fstests; its packages installed first), copied into tests/crash/bin/ (not in git). Without any
# fstests source (scripts/third_party/third_party.sh), writes why to tests/crash/bin.missing instead, and the
# crash tests are skipped with that reason while every other test runs. Exits non-zero only on a
# real failure (packages that cannot be installed, a source that does not build).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
say "tests: the crash tests' tools from the fstests source (replay-log, fsstress)"
rm -rf tests/crash/bin tests/crash/bin.missing
err=$(mktemp)
trap 'rm -f "$err"' EXIT
rc=0
FSTESTS_TARBALL=$(bash scripts/third_party/third_party.sh fstests 2>"$err") || rc=$?
if [ $rc = 2 ]; then
	sed -n '/^third_party: /,$p' "$err" | sed 's/^third_party: //' >tests/crash/bin.missing
	say "tests: no fstests source; the crash tests will be skipped: $(head -n 1 tests/crash/bin.missing)"
	exit 0
fi
[ $rc = 0 ] || { cat "$err" >&2; die "scripts/third_party/third_party.sh fstests failed"; }
# shellcheck source=fstests-build.sh
source scripts/third_party/fstests-build.sh
fstests_packages
built=$(dirname "$(fstests_build)")/src
mkdir -p tests/crash/bin
cp "$built/src/log-writes/replay-log" "$built/ltp/fsstress" tests/crash/bin/ ||
	die "copying replay-log and fsstress from $built failed"
