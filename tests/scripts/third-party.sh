#!/usr/bin/env bash
# Host-side check of how the suite finds the outside test sources (scripts/third_party/third_party.sh,
# scripts/third_party/aio-stress.sh), in a copy of the project's scripts with no ../shared beside it, its
# own cache, and the pinned fstests commit replaced by one of a local repository:
#  - fetched "upstream" (the local repository) at the pinned commit into the cache, checked by
#    its commit id; a repository without that commit gives nothing;
#  - a snapshot in $RUST_LOOP_THIRD_PARTY is found without fetching; one of another commit under
#    the pinned name is refused;
#  - no snapshot and no network: exit 2 with the reason and both ways to provide it;
#    scripts/third_party/aio-stress.sh then records why (tests/aio-stress.missing) and succeeds, so that the
#    rest of the suite runs; the fstests-lists host test says SKIP (exit 77); `make fstests`
#    (scripts/third_party/fstests.sh) fails with the message;
#  - with the real snapshot (../shared/third_party, where present), aio-stress builds from it.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

clone=$tmp/clone
mkdir -p "$clone/tests"
cp -r "$ROOT/scripts" "$ROOT/config" "$clone/"
cp -r "$ROOT/tests/scripts" "$ROOT/tests/fstests" "$clone/tests/"
export RUST_LOOP_CACHE=$tmp/cache
unset RUST_LOOP_THIRD_PARTY

# A local "upstream" with two commits; the pinned one is the first.
up=$tmp/upstream
git init -q "$up"
git -C "$up" -c user.name=t -c user.email=t@t commit -q --allow-empty -m one
pinned=$(git -C "$up" rev-parse HEAD)
echo x >"$up/f" && git -C "$up" add f && git -C "$up" -c user.name=t -c user.email=t@t commit -q -m two
other=$(git -C "$up" rev-parse HEAD)
sed -i -e "s|^fstests_COMMIT=.*|fstests_COMMIT=$pinned|" -e "s|^fstests_UPSTREAM=.*|fstests_UPSTREAM=file://$up|" \
	"$clone/config/third_party.conf"
tp() { bash "$clone/scripts/third_party/third_party.sh" fstests; }

# Fetched at the pinned commit, checked, cached.
out=$(tp 2>"$tmp/err") || fail "fetch from the local upstream failed: $(cat "$tmp/err")"
[ "$out" = "$RUST_LOOP_CACHE/third_party/fstests-$pinned.tar.gz" ] || fail "fetched to '$out'"
[ "$(zcat "$out" | git get-tar-commit-id)" = "$pinned" ] || fail "the fetched tarball is not the pinned commit"
# Found in the cache the second time, without fetching.
out2=$(RUST_LOOP_FETCH=0 tp 2>/dev/null) || fail "the cached tarball was not found"
[ "$out2" = "$out" ] || fail "cache lookup gave '$out2'"

# A snapshot directory: found first; one of another commit under the pinned name is refused.
mkdir -p "$tmp/snap" "$tmp/bad"
cp "$out" "$tmp/snap/fstests-${pinned:0:8}.tar.gz"
rm -rf "$RUST_LOOP_CACHE/third_party"
out=$(RUST_LOOP_THIRD_PARTY=$tmp/snap RUST_LOOP_FETCH=0 tp 2>/dev/null) || fail "snapshot in RUST_LOOP_THIRD_PARTY not found"
[ "$out" = "$tmp/snap/fstests-${pinned:0:8}.tar.gz" ] || fail "snapshot lookup gave '$out'"
git -C "$up" archive --format=tar "$other" | gzip >"$tmp/bad/fstests-${pinned:0:8}.tar.gz"
rc=0
RUST_LOOP_THIRD_PARTY=$tmp/bad RUST_LOOP_FETCH=0 tp >/dev/null 2>"$tmp/err" || rc=$?
[ $rc = 2 ] || fail "a snapshot of another commit: exit $rc, expected 2"
grep -q "is not commit $pinned" "$tmp/err" || fail "the wrong snapshot was not named: $(cat "$tmp/err")"

# No snapshot, no network: an upstream that cannot be reached.
sed -i "s|^fstests_UPSTREAM=.*|fstests_UPSTREAM=file://$tmp/nowhere|" "$clone/config/third_party.conf"
rc=0
tp >/dev/null 2>"$tmp/err" || rc=$?
[ $rc = 2 ] || fail "no source anywhere: exit $rc, expected 2"
grep -q "RUST_LOOP_THIRD_PARTY" "$tmp/err" && grep -q "network access to file://$tmp/nowhere" "$tmp/err" ||
	fail "the message does not give both ways: $(cat "$tmp/err")"
# The suite goes on without it: aio-stress is recorded as missing, not built, and succeeds.
(cd "$clone" && bash scripts/third_party/aio-stress.sh >"$tmp/aio.out" 2>&1) || fail "aio-stress.sh failed without a source: $(cat "$tmp/aio.out")"
[ -s "$clone/tests/aio-stress.missing" ] && [ ! -e "$clone/tests/aio-stress" ] ||
	fail "no tests/aio-stress.missing (or an aio-stress) without a source"
grep -q "no fstests source" "$clone/tests/aio-stress.missing" || fail "aio-stress.missing: $(cat "$clone/tests/aio-stress.missing")"
# The fstests-lists host test is skipped, with the reason.
rc=0
out=$(bash "$clone/tests/scripts/fstests-lists.sh" 2>&1) || rc=$?
[ $rc = 77 ] && echo "$out" | grep -q "^SKIP: no fstests source" || fail "fstests-lists without a source: exit $rc: $out"
# make fstests alone fails with the message (before any set-up or VM).
rc=0
(cd "$clone" && bash scripts/third_party/fstests.sh >"$tmp/f.out" 2>&1) || rc=$?
[ $rc != 0 ] && grep -q "make fstests needs the fstests source" "$tmp/f.out" && grep -q "RUST_LOOP_THIRD_PARTY" "$tmp/f.out" ||
	fail "scripts/third_party/fstests.sh without a source: exit $rc: $(tail -n 5 "$tmp/f.out")"

# The real snapshot, where this checkout has one beside it: aio-stress builds from it.
if snap=$(RUST_LOOP_FETCH=0 bash "$ROOT/scripts/third_party/third_party.sh" fstests 2>/dev/null); then
	cp "$ROOT/config/third_party.conf" "$clone/config/"
	mkdir -p "$tmp/real" && ln -s "$snap" "$tmp/real/$(basename "$snap")"
	(cd "$clone" && RUST_LOOP_THIRD_PARTY=$tmp/real bash scripts/third_party/aio-stress.sh >"$tmp/aio.out" 2>&1) ||
		fail "aio-stress.sh with the snapshot failed: $(tail -n 5 "$tmp/aio.out")"
	[ -x "$clone/tests/aio-stress" ] && [ ! -e "$clone/tests/aio-stress.missing" ] ||
		fail "aio-stress not built from the snapshot"
	echo "ok: aio-stress built from $(basename "$snap")"
else
	echo "(no fstests snapshot beside this checkout: the build from it is not checked here)"
fi
[ "$failed" = 0 ] && echo "ok: fetch, cache, snapshot, wrong snapshot, no source"
exit "$failed"
