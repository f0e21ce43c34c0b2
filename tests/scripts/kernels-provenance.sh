#!/usr/bin/env bash
# Host-side check of the kernel results' provenance (scripts/kernels/kernels_table.py), in a small
# git repository of its own: a result records its commit, its tree (clean, dirty, dirty-driver), CI
# (CI=true) or a person, whole or partial; README's "Supported kernels" table shows "yes" only for
# a whole result whose commit's driver sources (rust_loop/, rust_loop.rs, uapi/, Kbuild,
# packaging/) are the checkout's, and "stale" for every other result: no commit (rows from before
# provenance), an unknown commit, a driver change after it (committed or not), uncommitted driver
# changes when it ran; after any such change README's table fails --check until remade.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }

p=$tmp/prov
mkdir -p "$p/config" "$p/docs" "$p/scripts/kernels" "$p/rust_loop" "$p/packaging" "$p/uapi"
cp scripts/kernels/kernels_table.py scripts/kernels/kernels.py scripts/kernels/debian_archive.py "$p/scripts/kernels/"
printf '%s\n' \
	"k1 trixie trixie-backports amd64 7.9.1+deb13-amd64 7.9.1-1~bpo13+1 linux-source-7.9 build,smoke,suite" \
	"k2 sid sid amd64 7.9.2+deb14-amd64 7.9.2-1 linux-source-7.9 build,subset,package" >"$p/config/kernels.conf"
# The record holds one row from before provenance: no commit.
printf '# name\tstep\tresult\tdetail\tdate\nk2\tbuild\tok\trustc 1.97.1\t2026-12-01\n' >"$p/docs/kernels-results.tsv"
{
	echo "intro"
	grep -F '<!-- kernels-table: made by' README.md
	grep -F '<!-- kernels-table end -->' README.md
	echo "outro"
} >"$p/README.md"
echo 'fn a() {}' >"$p/rust_loop/a.rs"
echo 'obj-m := x.o' >"$p/Kbuild"
echo 'conf' >"$p/packaging/dkms.conf"
echo 'doc' >"$p/docs/x.md"
echo 'results/' >"$p/.gitignore"
g() { git -C "$p" -c user.name=t -c user.email=t@t "$@" >/dev/null; }
g init -q
g add -A
g commit -q -m c1
c1=$(git -C "$p" rev-parse HEAD)
short=${c1:0:7}
today=$(date +%F)
# kt DIR ARGS...: the table tool of the project in DIR, run there, CI and RUN_PROVENANCE unset.
kt() { (cd "$1" && shift && env -u RUN_PROVENANCE -u CI "$py" scripts/kernels/kernels_table.py "$@"); }
# row TABLE NAME, cell TABLE NAME COLUMN (5 build, 6 smoke, 7 subset, 8 suite, 9 package).
row() { grep -F "| \`$2\` |" <<<"$1" || true; }
cell() { row "$1" "$2" | awk -F' [|] ' -v c="$3" '{ print $c }' | sed 's/ |$//'; }
last() { tail -n 1 "$p/results/matrix/results.tsv" | cut -f "$1"; }

# --append: the provenance of the run.
kt "$p" --append k1 build ok "rustc 1.85.1"
[ "$(last 1-4,6-9)" = "k1	build	ok	rustc 1.85.1	$c1	clean	hand	whole" ] ||
	fail "--append on a clean tree by hand: $(last 1-9)"
[ "$(last 5)" = "$today" ] || fail "--append's date: $(last 5)"
(cd "$p" && env -u RUN_PROVENANCE CI=true "$py" scripts/kernels/kernels_table.py --append k1 smoke FAIL 99)
[ "$(last 8)" = ci ] || fail "a run with CI=true is not recorded as ci: $(last 8)"
kt "$p" --append k1 suite ok "5 passed, 0 failed, 0 skipped" partial
[ "$(last 9)" = partial ] || fail "a partial run is not recorded as partial: $(last 9)"
kt "$p" --append k1 smoke ok 1 somewhat 2>/dev/null && fail "--append accepts the scope 'somewhat'"
kt "$p" --append k1 smoky ok 1 2>/dev/null && fail "--append accepts the step 'smoky'"
echo 'doc 2' >"$p/docs/x.md"
kt "$p" --append k2 build ok "rustc 1.97.1"
[ "$(last 7)" = dirty ] || fail "a change outside the driver is not recorded as 'dirty': $(last 7)"
echo 'fn b() {}' >"$p/rust_loop/b.rs"
kt "$p" --append k2 subset ok "9 passed, 0 failed, 0 skipped"
[ "$(last 7)" = dirty-driver ] || fail "a new driver file is not recorded as 'dirty-driver': $(last 7)"
rm "$p/rust_loop/b.rs"
# A run's provenance is the one taken when it started (RUN_PROVENANCE, scripts/common.sh).
(cd "$p" && RUN_PROVENANCE="$c1 clean ci" "$py" scripts/kernels/kernels_table.py --append k2 package ok 7 partial)
[ "$(last 6-9)" = "$c1	clean	ci	partial" ] || fail "--append does not record RUN_PROVENANCE: $(last 6-9)"
[ "$(kt "$p" --provenance)" = "$c1 dirty hand" ] || fail "--provenance: $(kt "$p" --provenance)"

# The table: a fresh result shows its commit and who ran it; the others are partial or stale.
kt "$p" --update >/dev/null
grep -qx 'outro' "$p/README.md" || fail "--update lost README's text after the table"
t=$(kt "$p" --print)
[ "$(cell "$t" k1 5)" = "yes (\`$short\`, by hand, $today)" ] || fail "a fresh build by hand: $(cell "$t" k1 5)"
[ "$(cell "$t" k1 6)" = "**FAILED** (\`$short\`, CI, $today)" ] || fail "a failed smoke boot by CI: $(cell "$t" k1 6)"
[ "$(cell "$t" k1 8)" = "partial: ok, 5 passed, 0 failed, 0 skipped (\`$short\`, by hand, $today)" ] ||
	fail "a partial suite run: $(cell "$t" k1 8)"
[ "$(cell "$t" k2 5)" = "yes (\`$short\`, dirty tree, by hand, $today)" ] ||
	fail "a build on a tree dirty outside the driver: $(cell "$t" k2 5)"
[ "$(cell "$t" k2 7)" = "stale: ok, 9 passed, 0 failed, 0 skipped (\`$short\`, by hand, $today; uncommitted driver changes)" ] ||
	fail "a run with uncommitted driver changes: $(cell "$t" k2 7)"
[ "$(cell "$t" k2 9)" = "partial: ok (\`$short\`, CI, $today)" ] || fail "a package test given the artefacts: $(cell "$t" k2 9)"
grep -qxF "k2	build	ok	rustc 1.97.1	$today	$c1	dirty	hand	whole" "$p/docs/kernels-results.tsv" ||
	fail "the record does not keep k2's last build with its provenance: $(cat "$p/docs/kernels-results.tsv")"
kt "$p" --check || fail "--check fails right after --update"

# A row without a commit is stale, and so is one whose commit this repository lacks; a whole
# result that is stale gives way to a fresh partial one.
{
	printf 'k2\tbuild\tok\trustc 1.97.1\t2026-12-01\n'
	printf 'k1\tbuild\tok\trustc 1.85.1\t2026-12-01\t%s\tclean\tci\twhole\n' "$(printf '1%.0s' {1..40})"
	printf 'k1\tsuite\tok\t9 passed, 0 failed, 0 skipped\t2026-12-01\n'
} >"$p/results/matrix/results.tsv"
t=$(kt "$p" --print-results)
[ "$(cell "$t" k2 5)" = "stale: ok (2026-12-01; no commit)" ] || fail "a row without a commit: $(cell "$t" k2 5)"
[ "$(cell "$t" k1 5)" = "stale: ok (\`1111111\`, CI, 2026-12-01; unknown commit)" ] ||
	fail "a row of an unknown commit: $(cell "$t" k1 5)"
[[ "$(cell "$t" k1 8)" == "partial: ok, 5 passed"* ]] || fail "a stale whole result hides a fresh partial one: $(cell "$t" k1 8)"
rm -rf "$p/results"

# A docs-only commit keeps the results fresh; a driver change, committed or not, makes every
# earlier result stale and README's table fails --check.
g add -A
g commit -q -m c2
kt "$p" --check || fail "--check fails after a docs-only commit"
[[ "$(cell "$(kt "$p" --print)" k1 5)" == "yes "* ]] || fail "a docs-only commit made a result stale"
for change in rust_loop/a.rs rust_loop.rs Kbuild packaging/dkms.conf uapi/new.h; do
	rm -rf "$tmp/p2" && cp -a "$p" "$tmp/p2"
	echo "// changed" >>"$tmp/p2/$change"
	git -C "$tmp/p2" add -A
	for committed in no yes; do
		[ $committed = no ] || git -C "$tmp/p2" -c user.name=t -c user.email=t@t commit -q -m change
		t=$(kt "$tmp/p2" --print)
		[ "$(cell "$t" k1 5)" = "stale: ok (\`$short\`, by hand, $today; driver changed since)" ] ||
			fail "$change changed (committed: $committed): k1's build shows $(cell "$t" k1 5)"
		! grep -q 'yes' <<<"$(row "$t" k1)$(row "$t" k2)" || fail "$change changed (committed: $committed): a 'yes' is left: $t"
		kt "$tmp/p2" --check 2>/dev/null && fail "$change changed (committed: $committed): README's table passes --check"
	done
done

exit "$failed"
