#!/usr/bin/env bash
# Host-side check of the named fstests lists (tests/fstests/*.list, FSTESTS_LIST=list:NAME): each
# names at least one test, each test once, and every test exists in the fstests snapshot that
# scripts/fstests.sh builds (a typo would otherwise only show as a "not run" in the guest).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

tarball=${FSTESTS_TARBALL:-$(cd "$ROOT/.." && pwd)/shared/third_party/fstests-63a29724.tar.gz}
if [ ! -f "$tarball" ]; then
	echo "FAIL: no fstests snapshot at $tarball"
	exit 1
fi
tar tzf "$tarball" | sed -nE 's|^(\./)?tests/([a-z0-9]+/[0-9]+)$|\2|p' | sort -u >"$tmp/known"
[ "$(wc -l <"$tmp/known")" -gt 500 ] || fail "found only $(wc -l <"$tmp/known") tests in $tarball"
n=0
for list in tests/fstests/*.list; do
	n=$((n + 1))
	sed 's/#.*//' "$list" | xargs -n1 >"$tmp/list"
	[ -s "$tmp/list" ] || fail "$list names no test"
	dup=$(sort "$tmp/list" | uniq -d | xargs)
	[ -z "$dup" ] || fail "$list names twice: $dup"
	unknown=$(sort -u "$tmp/list" | comm -23 - "$tmp/known" | xargs)
	[ -z "$unknown" ] || fail "$list names tests the fstests snapshot does not have: $unknown"
	[ "$failed" = 0 ] && echo "ok: $list: $(wc -l <"$tmp/list") tests, all in the snapshot"
done
[ "$n" -gt 0 ] || fail "no list in tests/fstests/"
exit "$failed"
