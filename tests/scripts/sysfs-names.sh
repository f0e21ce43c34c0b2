#!/usr/bin/env bash
# Host-side check that docs/counters.md's tables list exactly the files the driver creates:
# "Counters", the debugfs files (/sys/kernel/debug/rust_loop/loopN/: the counters, declared once
# in the `counters!` lists of rust_loop/stats.rs, then the files of LISTS and INJECT in
# rust_loop/device/debugfs.rs), and "Knobs", the sysfs files (/sys/block/loopN/rust_loop/:
# KNOB_ATTRS in rust_loop/device/sysfs.rs).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Counters: the field names inside each `counters! { ... }`.
awk '/^counters! \{/ { on = 1; next } on && /^\}/ { on = 0 } on' rust_loop/stats.rs |
	sed -nE 's/^ +([a-z_]+): Atomic.*/\1/p' >"$tmp/counters"
# The other debugfs files: the names in `const LISTS` and `const INJECT`.
grep -E '^const (LISTS|INJECT): ' rust_loop/device/debugfs.rs |
	grep -oE 'c"[a-z_]+"' | sed -E 's/c"(.*)"/\1/' >"$tmp/others"
# Knobs: the names of the attributes in KNOB_ATTRS.
awk '/^static KNOB_ATTRS/ { on = 1 } on && /^\];/ { on = 0 } on' rust_loop/device/sysfs.rs |
	grep -oE 'c"[a-z_]+"' | sed -E 's/c"(.*)"/\1/' >"$tmp/knobs"
sort -u "$tmp/counters" "$tmp/others" >"$tmp/debugfs"
sort -u "$tmp/knobs" >"$tmp/sysfs"
# docs/counters.md: the first column of the table under "### Counters" / "### Knobs".
table() {
	awk -v h="### $1" '$0 == h { on = 1; next } /^##/ { on = 0 } on && /^\| `/' docs/counters.md |
		cut -d'|' -f2 | grep -oE '`[a-z_]+`' | tr -d '`' | sort -u
}
table Counters >"$tmp/doc-debugfs"
table Knobs >"$tmp/doc-sysfs"

[ "$(wc -l <"$tmp/counters")" -ge 20 ] || fail "found only $(wc -l <"$tmp/counters") counters in rust_loop/stats.rs"
[ "$(wc -l <"$tmp/others")" -ge 2 ] || fail "found only $(wc -l <"$tmp/others") other debugfs files in rust_loop/device/debugfs.rs"
[ "$(wc -l <"$tmp/knobs")" -ge 3 ] || fail "found only $(wc -l <"$tmp/knobs") knobs in rust_loop/device/sysfs.rs"
for t in debugfs:Counters sysfs:Knobs; do
	what=${t%%:*} title=${t#*:}
	missing=$(comm -23 "$tmp/$what" "$tmp/doc-$what" | xargs)
	extra=$(comm -13 "$tmp/$what" "$tmp/doc-$what" | xargs)
	[ -z "$missing" ] || fail "docs/counters.md's \"$title\" table lacks these $what files: $missing"
	[ -z "$extra" ] || fail "docs/counters.md's \"$title\" table lists $what files the driver does not create: $extra"
done
if [ "$failed" = 0 ]; then
	echo "ok: docs/counters.md lists the $(wc -l <"$tmp/debugfs") debugfs files ($(wc -l <"$tmp/counters") counters) and the $(wc -l <"$tmp/sysfs") knobs"
fi
exit "$failed"
