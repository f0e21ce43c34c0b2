#!/usr/bin/env bash
# Host-side test of scripts/bench/bench-report.py on a run with rust_loop's dontcache cache mode (no
# kernel, no VM):
#
#   bash tests/scripts/bench-report-dontcache.sh
#
# A synthetic bench.json with buffered, dio and dontcache cells and page-cache figures. Checks:
# the cache-mode table puts dontcache next to buffered and dio; the page-cache table has the
# read and write growth of each mode; the dontcache targets pass when its growth is within 10 %
# of buffered's and miss when it is not; the rust/C tables leave dontcache out.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# make_json FILE DONTCACHE_WRITE_GROWTH_MIB
make_json() {
	"$py" - "$1" "$2" <<'PY'
import json, sys
path, wgrowth = sys.argv[1], float(sys.argv[2])
meta = {"date": "2026-12-01T00:00:00+00:00", "kernel": "test", "cpus": 2, "cpu_model": "test",
        "mem_total_kib": 4 << 20, "accel": "TCG", "clock": "wall", "fio": "fio-3.33",
        "rounds": 1, "runtime_s": 1, "file_mib": 1024, "pagecache_read_mib": 1024,
        "drivers": ["raw", "loop", "rust_loop"], "backings": ["disk"],
        "modes": ["buffered", "dio", "dontcache"], "workloads": ["randread-4k-qd32"]}
iops = {("raw", "dio"): 9000, ("loop", "buffered"): 4000, ("loop", "dio"): 6000,
        ("rust_loop", "buffered"): 4400, ("rust_loop", "dio"): 7000, ("rust_loop", "dontcache"): 2200}
samples = [{"round": 1, "driver": d, "backing": "disk", "mode": m, "workload": "randread-4k-qd32",
            "iops": v, "bw_mib_s": v / 256} for (d, m), v in iops.items()]
pc = [{"driver": "rust_loop", "backing": "disk", "mode": "buffered", "dev_dio": 0, "read_mib": 1024,
       "growth_mib": 1020.0, "secs": 10.0, "write_mib": 1024, "write_growth_mib": 1000.0, "write_secs": 20.0},
      {"driver": "rust_loop", "backing": "disk", "mode": "dontcache", "dev_dio": 0, "read_mib": 1024,
       "growth_mib": 3.0, "secs": 12.0, "write_mib": 1024, "write_growth_mib": wgrowth, "write_secs": 25.0},
      {"driver": "rust_loop", "backing": "disk", "mode": "dio", "dev_dio": 1, "read_mib": 1024,
       "growth_mib": 0.5, "secs": 8.0, "write_mib": 1024, "write_growth_mib": 0.2, "write_secs": 9.0}]
json.dump({"meta": meta, "notes": [], "samples": samples, "pagecache": pc, "errors": []},
          open(path, "w"))
PY
}

make_json "$tmp/ok.json" 2.0
out=$("$py" scripts/bench/bench-report.py "$tmp/ok.json" 2>&1) || fail "the report failed: $(tail -3 <<<"$out")"
md=$tmp/summary.md
grep -qE '^\| randread-4k-qd32 \| 4,000 \| 4,400 \| 2,200 \| 7,000 \| 0.50 \|' "$md" ||
	fail "cache-mode row wrong: $(grep -A3 'cache modes' "$md")"
grep -qE '^\| rust_loop \| dontcache \| 0 \| 3.0 \| 0.00 \| 12.0 \| 2.0 \| 25.0 \|' "$md" ||
	fail "page-cache row of dontcache wrong: $(grep '^| rust_loop |' "$md")"
grep -qE 'PASS.*dontcache page-cache growth after a read|dontcache page-cache growth after a read.*PASS' "$md" ||
	fail "the dontcache read target did not pass: $(grep 'dontcache page-cache' "$md")"
grep -qE 'PASS.*dontcache page-cache growth after a write|dontcache page-cache growth after a write.*PASS' "$md" ||
	fail "the dontcache write target did not pass: $(grep 'dontcache page-cache' "$md")"
grep -qE '^\| dontcache \|' "$md" && fail "a rust/C table has a dontcache row"

# 150 MiB after writing 1 GiB, against buffered's 1000: over 10 %.
make_json "$tmp/bad.json" 150
"$py" scripts/bench/bench-report.py "$tmp/bad.json" >/dev/null 2>&1 || true
grep -qE 'MISS.*dontcache page-cache growth after a write|dontcache page-cache growth after a write.*MISS' "$tmp/summary.md" ||
	fail "the dontcache write target passed with 150 of 1000 MiB: $(grep 'dontcache page-cache' "$tmp/summary.md")"

[ $failed = 0 ] && echo "ok"
exit $failed
