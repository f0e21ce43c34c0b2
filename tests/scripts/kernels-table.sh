#!/usr/bin/env bash
# Host-side checks of the kernel matrix's files: every row of config/kernels.conf is well formed
# (8 columns, a unique name, a release made of its ABI name and a known flavour, steps CI knows),
# README's "Supported kernels" table is the one the matrix and docs/kernels-results.tsv make
# (scripts/kernels/kernels_table.py --check: a row added without `make kernels-table`, or a table edited
# by hand, fails), and a matrix the table generator is given a new row shows it as "not run".
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

awk '!/^[[:space:]]*(#|$)/' config/kernels.conf >"$tmp/rows"
[ "$(wc -l <"$tmp/rows")" -ge 7 ] || fail "config/kernels.conf has only $(wc -l <"$tmp/rows") rows"
while read -r name root pkgs arch krel version source runs extra; do
	[ -n "$runs" ] && [ -z "$extra" ] || fail "row $name: not 8 columns"
	case "$arch" in amd64 | arm64) ;; *) fail "row $name: architecture '$arch'" ;; esac
	case "${krel#*-}" in amd64 | cloud-amd64 | rt-amd64 | arm64 | cloud-arm64 | rt-arm64 | arm64-16k) ;;
	*) fail "row $name: release $krel has no known flavour" ;;
	esac
	[[ "$source" == linux-source-* ]] || fail "row $name: source package '$source'"
	for step in ${runs//,/ }; do
		case "$step" in build | smoke | subset | suite | package) ;; *) fail "row $name: step '$step'" ;; esac
	done
	[[ ",$runs," == *,build,* ]] || fail "row $name: every kernel of the matrix is built (runs has no 'build')"
done <"$tmp/rows"
dups=$(awk '{print $1}' "$tmp/rows" | sort | uniq -d | xargs)
[ -z "$dups" ] || fail "duplicate names in config/kernels.conf: $dups"

$py scripts/kernels/kernels_table.py --check || fail "README's kernels table is stale"

# The generator on a matrix with one more row: the new kernel shows, with nothing run yet.
mkdir -p "$tmp/p/config" "$tmp/p/docs" "$tmp/p/scripts/kernels"
cp config/kernels.conf "$tmp/p/config/"
echo "7.9-test trixie trixie-backports amd64 7.9.1+deb13-amd64 7.9.1-1~bpo13+1 linux-source-7.9 build,smoke" >>"$tmp/p/config/kernels.conf"
cp docs/kernels-results.tsv "$tmp/p/docs/"
cp scripts/kernels/kernels_table.py scripts/kernels/kernels.py scripts/kernels/debian_archive.py "$tmp/p/scripts/kernels/"
out=$($py "$tmp/p/scripts/kernels/kernels_table.py" --print)
echo "$out" | grep -q '^| `7.9-test` | `7.9.1+deb13-amd64` | .* | not run | not run | – | – | – |$' ||
	fail "a new row does not show as 'not run': $(echo "$out" | grep 7.9-test)"

exit "$failed"
