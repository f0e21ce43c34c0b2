#!/usr/bin/env bash
# Host-side check of the named fstests lists (tests/fstests/*.list, FSTESTS_LIST=list:NAME): each
# names at least one test, each test once, and every test exists in the fstests snapshot that
# scripts/third_party/fstests.sh builds (a typo would otherwise only show as a "not run" in the guest).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# The fstests source at its pinned commit (scripts/third_party/third_party.sh); without one, skipped (77).
if [ -n "${FSTESTS_TARBALL:-}" ]; then
	tarball=$FSTESTS_TARBALL
	[ -f "$tarball" ] || fail "FSTESTS_TARBALL=$tarball does not exist"
	[ "$failed" = 0 ] || exit 1
else
	rc=0
	tarball=$(bash "$ROOT/scripts/third_party/third_party.sh" fstests 2>"$tmp/err") || rc=$?
	if [ $rc = 2 ]; then
		echo "SKIP: $(sed -n 's/^third_party: //p' "$tmp/err" | head -n 1)"
		exit 77
	fi
	[ $rc = 0 ] || { cat "$tmp/err"; fail "scripts/third_party/third_party.sh fstests failed"; exit 1; }
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
