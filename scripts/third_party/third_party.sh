#!/usr/bin/env bash
# Finds the source of an outside test suite (fstests, blktests) at its pinned commit
# (config/third_party.conf) and prints the path of a tarball of it (`git archive` layout: no top
# directory). Looked for in this order:
#   1. $RUST_LOOP_THIRD_PARTY/NAME-<commit>.tar.gz (a directory named by the variable; <commit>:
#      the pinned commit's first 7 to 40 hex digits),
#   2. ../shared/third_party/NAME-<commit>.tar.gz beside the checkout (CI's machines),
#   3. $RUST_LOOP_CACHE/third_party/NAME-<full commit>.tar.gz, made by an earlier fetch,
#   4. the upstream repository, fetched at the pinned commit into the cache and checked by its
#      commit id (RUST_LOOP_FETCH=0 skips this; THIRD_PARTY_TIMEOUT, 300 s, bounds it).
# A tarball found in 1-3 must carry the pinned commit (git get-tar-commit-id), or it is refused.
# Exits 2, printing why and the two ways to provide the source, when none is reachable.
#
#   scripts/third_party/third_party.sh fstests
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# shellcheck source=../../config/third_party.conf
source "$ROOT/config/third_party.conf"

name=${1:-}
commit_var=${name}_COMMIT upstream_var=${name}_UPSTREAM
[ -n "$name" ] && [ -n "${!commit_var:-}" ] || die "usage: scripts/third_party/third_party.sh fstests|blktests"
commit=${!commit_var} upstream=${!upstream_var}

# A tarball of the pinned commit in a directory (its name carries a prefix of the commit, and
# git get-tar-commit-id confirms the whole of it), or nothing.
from_dir() {
	local dir=$1 f id short
	[ -d "$dir" ] || return 0
	for f in "$dir/$name"-*.tar.gz; do
		[ -f "$f" ] || continue
		short=${f##*/"$name"-}
		short=${short%.tar.gz}
		[[ "$short" =~ ^[0-9a-f]{7,40}$ ]] && [[ "$commit" == "$short"* ]] || continue
		id=$(zcat "$f" 2>/dev/null | git get-tar-commit-id 2>/dev/null || true)
		if [ "$id" = "$commit" ]; then
			echo "$f"
			return 0
		fi
		say "third_party: $f is not commit $commit (it says '${id:-nothing}'); ignored"
	done
}

shared=$(cd "$ROOT/.." && pwd)/shared/third_party
cache=$CACHE/third_party
for dir in ${RUST_LOOP_THIRD_PARTY:+"$RUST_LOOP_THIRD_PARTY"} "$shared" "$cache"; do
	found=$(from_dir "$dir")
	if [ -n "$found" ]; then
		echo "$found"
		exit 0
	fi
done

why="no $name source at commit ${commit:0:12}: not in \$RUST_LOOP_THIRD_PARTY (${RUST_LOOP_THIRD_PARTY:-unset}), $shared or $cache"
if [ "${RUST_LOOP_FETCH:-1}" != 1 ]; then
	reason="$why; fetching is off (RUST_LOOP_FETCH=0)"
elif ! command -v git >/dev/null; then
	reason="$why; git is not installed to fetch it"
else
	say "third_party: fetching $name at ${commit:0:12} from $upstream"
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.fetch-$name.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	if timeout "${THIRD_PARTY_TIMEOUT:-300}" git -c advice.detachedHead=false clone -q --no-checkout \
		"$upstream" "$tmp/repo" >&2 &&
		git -C "$tmp/repo" cat-file -e "$commit^{commit}" 2>/dev/null &&
		[ "$(git -C "$tmp/repo" rev-parse "$commit^{commit}")" = "$commit" ] &&
		git -C "$tmp/repo" archive --format=tar "$commit" | gzip -n >"$tmp/out.tar.gz" &&
		[ "$(zcat "$tmp/out.tar.gz" | git get-tar-commit-id)" = "$commit" ]; then
		mv "$tmp/out.tar.gz" "$cache/$name-$commit.tar.gz"
		say "third_party: $name at $commit in $cache"
		echo "$cache/$name-$commit.tar.gz"
		exit 0
	fi
	reason="$why; fetching $upstream at that commit failed (no network to it?)"
fi
cat >&2 <<MSG
third_party: $reason.
Provide it either way:
  - put a snapshot named $name-${commit:0:8}.tar.gz (git archive of commit $commit) in a
    directory and set RUST_LOOP_THIRD_PARTY to that directory, or in ../shared/third_party/;
  - or let the scripts fetch it: network access to $upstream (RUST_LOOP_FETCH=1, the default).
MSG
exit 2
