#!/usr/bin/env bash
# Host-side check that docs/counters.md's tables ("Counters", "Knobs") list exactly the files the
# driver creates: the counters (/sys/kernel/debug/rust_loop/loopN/, declared once, in the
# `counters!` lists of rust_loop/stats.rs) and the knobs (/sys/block/loopN/rust_loop/,
# KNOB_ATTRS in rust_loop/device/sysfs.rs).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Counters: the field names inside each `counters! { ... }`.
awk '/^counters! \{/ { on = 1; next } on && /^\}/ { on = 0 } on' rust_loop/stats.rs |
	sed -nE 's/^ +([a-z_]+): Atomic.*/\1/p' >"$tmp/counters"
# Knobs: the names of the attributes in KNOB_ATTRS.
awk '/^static KNOB_ATTRS/ { on = 1 } on && /^\];/ { on = 0 } on' rust_loop/device/sysfs.rs |
	grep -oE 'c"[a-z_]+"' | sed -E 's/c"(.*)"/\1/' >"$tmp/knobs"
sort -u "$tmp/counters" "$tmp/knobs" >"$tmp/driver"
# docs/counters.md: the first column of the tables under "### Counters" and "### Knobs".
awk '/^### (Counters|Knobs)$/ { on = 1; next } /^##/ { on = 0 } on && /^\| `/' docs/counters.md |
	cut -d'|' -f2 | grep -oE '`[a-z_]+`' | tr -d '`' | sort -u >"$tmp/readme"

[ "$(wc -l <"$tmp/counters")" -ge 20 ] || fail "found only $(wc -l <"$tmp/counters") counters in rust_loop/stats.rs"
[ "$(wc -l <"$tmp/knobs")" -ge 3 ] || fail "found only $(wc -l <"$tmp/knobs") knobs in rust_loop/device/sysfs.rs"
missing=$(comm -23 "$tmp/driver" "$tmp/readme" | xargs)
extra=$(comm -13 "$tmp/driver" "$tmp/readme" | xargs)
[ -z "$missing" ] || fail "docs/counters.md's tables lack: $missing"
[ -z "$extra" ] || fail "docs/counters.md's tables list files the driver does not create: $extra"
if [ "$failed" = 0 ]; then
	echo "ok: docs/counters.md lists the $(wc -l <"$tmp/driver") files of rust_loop/ ($(wc -l <"$tmp/counters") counters, $(wc -l <"$tmp/knobs") knobs)"
fi
exit "$failed"
