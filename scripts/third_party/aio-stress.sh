#!/usr/bin/env bash
# Builds tests/aio-stress, the load of fstests' generic/113 (tests/dio-hang), from the fstests
# source at its pinned commit (scripts/third_party/third_party.sh: $RUST_LOOP_THIRD_PARTY,
# ../shared/third_party, the cache, or fetched upstream; the source is not copied into the
# project). Without any source, writes why to tests/aio-stress.missing instead, and the tests that
# need it are skipped with that reason while every other test runs. Exits non-zero only on a real
# failure (a source that does not build).
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
say "tests: building aio-stress from the fstests source (tests/dio-hang)"
rm -f tests/aio-stress tests/aio-stress.missing
err=$(mktemp)
trap 'rm -f "$err"' EXIT
rc=0
fstests_tar=$(bash scripts/third_party/third_party.sh fstests 2>"$err") || rc=$?
if [ $rc = 2 ]; then
	sed -n '/^third_party: /,$p' "$err" | sed 's/^third_party: //' >tests/aio-stress.missing
	say "tests: no fstests source; the tests that need aio-stress will be skipped: $(head -n 1 tests/aio-stress.missing)"
	exit 0
fi
[ $rc = 0 ] || { cat "$err" >&2; die "scripts/third_party/third_party.sh fstests failed"; }
aio_dir=$CACHE/aio-stress-$(sha256sum "$fstests_tar" | cut -c1-12)
if [ ! -x "$aio_dir/aio-stress" ]; then
	rm -rf "$aio_dir" && mkdir -p "$aio_dir"
	tar -xzf "$fstests_tar" -C "$aio_dir" --wildcards --no-anchored 'ltp/aio-stress.c' ||
		die "ltp/aio-stress.c not found in $fstests_tar"
	gcc -O2 -w -o "$aio_dir/aio-stress.tmp" "$(find "$aio_dir" -name aio-stress.c | head -n 1)" -laio -lpthread ||
		die "building aio-stress failed (needs libaio-dev: scripts/setup.sh installs it)"
	mv "$aio_dir/aio-stress.tmp" "$aio_dir/aio-stress"
fi
cp "$aio_dir/aio-stress" tests/aio-stress
