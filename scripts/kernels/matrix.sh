#!/usr/bin/env bash
# `make matrix`: builds rust_loop for every kernel of the matrix (config/kernels.conf), each with
# that kernel's own toolchain in its suite's build root (scripts/kernels/stock.sh), warning-free
# (-Dwarnings) and clippy clean, in a copy of the sources of its own
# (results/matrix/<name>/src), so that the kernels' builds do not overwrite each other or the
# checkout's rust_loop.ko.
#
#   scripts/kernels/matrix.sh [NAME...]     (default: every row; MATRIX=<names> does the same)
#
# Writes results/matrix/<name>/{stock.log,build.log,rust_loop.ko}, appends a row per kernel to
# results/matrix/results.tsv (name, "build", ok or FAIL, the rustc, the date and the run's
# provenance: README's "Supported kernels" table is made from it,
# scripts/kernels/kernels_table.py), prints a line per kernel and "N passed, N failed"; exits
# non-zero when any kernel's build fails.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
[ "$KERNEL" = stock ] && [ -z "${KDIR:-}" ] || die "make matrix builds for the stock kernels (KERNEL=stock, no KDIR)"

names=("$@")
[ ${#names[@]} -gt 0 ] || read -r -a names <<<"${MATRIX:-}"
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(stock_names)
out=results/matrix
mkdir -p "$out"
run_provenance
passed=0 failed=0
# The files a build needs: what git tracks of the module's sources (a checkout's build products
# stay behind).
sources=(Kbuild Makefile rust_loop.rs rust_loop uapi)
for name in "${names[@]}"; do
	STOCK=$name stock_row
	dir=$out/$name
	t0=$SECONDS
	rm -rf "$dir" && mkdir -p "$dir/src"
	log=$dir/build.log
	result=ok
	(
		# The build root's messages apart (stock.log): the archive's own warnings (an index past
		# its Valid-Until) are not the build's, which must have none.
		STOCK=$name bash scripts/kernels/stock.sh >/dev/null 2>"$dir/stock.log" || { cat "$dir/stock.log"; exit 1; }
		git ls-files -z --cached --others --exclude-standard -- "${sources[@]}" | xargs -0 cp --parents -t "$dir/src" || exit 1
		# Module and clippy, -Dwarnings; any other warning (C, kbuild) fails too.
		STOCK=$name bash scripts/kernels/kmake.sh M="$ROOT/$dir/src" KRUSTFLAGS=-Dwarnings modules || exit 1
		cp "$dir/src/rust_loop.ko" "$dir/" || exit 1
		rm -f "$dir/src/rust_loop_crate.o"
		STOCK=$name bash scripts/kernels/kmake.sh M="$ROOT/$dir/src" KRUSTFLAGS=-Dwarnings CLIPPY=1 rust_loop_crate.o || exit 1
	) >"$log" 2>&1 || result=FAIL
	if [ $result = ok ] && grep -qiE '(^|: )warning[:[]' "$log"; then
		result="FAIL (warnings)"
	fi
	secs=$((SECONDS - t0))
	rustc=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="rustc \([^ ]*\).*/\1/p' "$(STOCK=$name kernel_dir)/.config" 2>/dev/null)
	result_row "$name" build "${result%% *}" "rustc ${rustc:-?}"
	if [ "$result" = ok ]; then
		passed=$((passed + 1))
		printf 'ok   %-10s %-28s %4ss\n' "$name" "$STOCK_KREL" "$secs"
	else
		failed=$((failed + 1))
		printf '%s %-10s %-28s %4ss (%s)\n' FAIL "$name" "$STOCK_KREL" "$secs" "$log"
		grep -iE 'error|warning' "$log" | head -n 15 | sed 's/^/     | /'
	fi
	[ "$result" != ok ] || rm -rf "$dir/src"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
