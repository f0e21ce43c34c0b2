#!/usr/bin/env bash
# Host-side test of scripts/bench/bench-report.py on an instruction-counted run (no kernel, no VM):
#
#   bash tests/scripts/bench-report-icount.sh
#
# A synthetic bench.json with "clock": "icount" (IOPS = 1e9 / instructions per I/O). Checks: the
# cost table gives instructions per I/O and overheads over the raw file; --gate passes when
# rust_loop's overhead is within the factor (or within the noise floor: 1 % of the C
# loop's instructions per I/O, or the cell's spread over rounds when larger) and exits 3, naming
# the cell, when it is not; a run without --gate never fails on cost.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# make_json FILE RUST_INSNS [ROUND2_RUST ROUND2_LOOP]: raw 10000, C loop 14000 (overhead 4000),
# rust_loop RUST_INSNS and rust_loop 2 hwq 12000 instructions per I/O in one dio cell; with the
# last two, a second round where rust_loop and the C loop take those (raw and 2 hwq the same)
make_json() {
	"$py" - "$@" <<'PY'
import json, sys
path, rust = sys.argv[1], float(sys.argv[2])
rounds = [{"raw": 10000, "loop": 14000, "rust_loop": rust, "rust_loop_mq2": 12000}]
if len(sys.argv) > 3:
    rounds.append(dict(rounds[0], rust_loop=float(sys.argv[3]), loop=float(sys.argv[4])))
meta = {"date": "2026-12-01T00:00:00+00:00", "kernel": "test", "cpus": 2, "cpu_model": "test",
        "mem_total_kib": 4 << 20, "accel": "TCG", "clock": "icount", "fio": "fio-3.33",
        "rounds": len(rounds), "runtime_s": 1, "file_mib": 256, "pagecache_read_mib": 0,
        "drivers": ["raw", "loop", "rust_loop", "rust_loop_mq2"], "backings": ["nullb"],
        "modes": ["dio"], "workloads": ["randread-4k-qd32"]}
samples = [{"round": i + 1, "driver": d, "backing": "nullb", "mode": "dio",
            "workload": "randread-4k-qd32", "iops": 1e9 / insns}
           for i, r in enumerate(rounds) for d, insns in r.items()]
json.dump({"meta": meta, "notes": [], "samples": samples, "pagecache": [], "errors": []},
          open(path, "w"))
PY
}

# Within the gate: overhead 4200 <= 1.05 x 4000.
make_json "$tmp/ok.json" 14200
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/ok.json" --gate 1.05 2>&1) || rc=$?
[ $rc = 0 ] || fail "overhead 4200 vs 4000 failed the 1.05 gate (rc=$rc): $out"
grep -qE '^\| dio \| randread-4k-qd32 \| 10,000 \| 14,000 \| 14,200 \| 12,000 \| 4,000 \| 4,200 \| 2,000 \| 1.05 \| 0.50 \|' <<<"$out" ||
	fail "cost table row wrong: $(grep '^| dio' <<<"$out")"
# Over the factor but within the noise floor (1 % of 14000 = 140): 4300 - 4200 = 100.
make_json "$tmp/floor.json" 14300
rc=0
"$py" scripts/bench/bench-report.py "$tmp/floor.json" --gate 1.05 >"$tmp/floor.out" 2>&1 || rc=$?
[ $rc = 0 ] || fail "an excess within the noise floor failed the gate (rc=$rc): $(tail -3 "$tmp/floor.out")"
# Over the gate: 5000 > 4200 + 140.
make_json "$tmp/bad.json" 15000
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/bad.json" --gate 1.05 2>&1) || rc=$?
[ $rc = 3 ] || fail "overhead 5000 vs 4000 passed the 1.05 gate (rc=$rc)"
grep -q 'perfcheck FAIL: nullb/dio/randread-4k-qd32 rust_loop: overhead 5,000 vs C loop 4,000' <<<"$out" ||
	fail "the failure does not name the cell: $(tail -3 <<<"$out")"
# Two rounds. Rounds that agree (rust_loop 14900, C loop 14000: 700 over 1.05 x) keep the 1 %
# floor: failed. Rounds 1,400 apart for rust_loop and 700 for the C loop (a noisy cell) raise the
# floor to the mean spread, 1,050: 300 over passes, 1,800 over fails, the floor named.
make_json "$tmp/quiet2.json" 14900 14900 14000
rc=0
"$py" scripts/bench/bench-report.py "$tmp/quiet2.json" --gate 1.05 >/dev/null 2>&1 || rc=$?
[ $rc = 3 ] || fail "two agreeing rounds 700 over the gate passed it (rc=$rc)"
make_json "$tmp/noisy2.json" 14200 15600 14700
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/noisy2.json" --gate 1.05 2>&1) || rc=$?
[ $rc = 0 ] || fail "an excess within the rounds' spread failed the gate (rc=$rc): $(tail -3 <<<"$out")"
make_json "$tmp/noisy2bad.json" 15700 17100 14700
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/noisy2bad.json" --gate 1.05 2>&1) || rc=$?
[ $rc = 3 ] || fail "an excess beyond the rounds' spread passed the gate (rc=$rc)"
grep -qE 'overhead 6,3[0-9]{2} vs C loop 4,3[0-9]{2} instructions/I/O \(over 1.05 x by 1,8[0-9]{2}, noise floor 1,050\)' <<<"$out" ||
	fail "the failure does not give the excess and floor: $(grep 'perfcheck FAIL' <<<"$out")"
# An exempt cell over the gate is reported, not failed; another cell is still gated.
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/bad.json" --gate 1.05 --gate-exempt dio/randread-4k-qd32 2>&1) || rc=$?
[ $rc = 0 ] || fail "an exempt cell failed the gate (rc=$rc)"
grep -q 'over the gate but not gated (--gate-exempt): nullb/dio/randread-4k-qd32 rust_loop' <<<"$out" ||
	fail "the exempt cell over the gate is not reported: $(tail -3 <<<"$out")"
rc=0
"$py" scripts/bench/bench-report.py "$tmp/bad.json" --gate 1.05 --gate-exempt dio/seqread-1m-qd8 >/dev/null 2>&1 || rc=$?
[ $rc = 3 ] || fail "exempting another cell let randread through (rc=$rc)"
# Without --gate, cost never fails the report.
rc=0
"$py" scripts/bench/bench-report.py "$tmp/bad.json" >/dev/null 2>&1 || rc=$?
[ $rc = 0 ] || fail "the report without --gate failed (rc=$rc)"
grep -q '## Instructions per I/O' "$tmp/summary.md" || fail "summary.md has no cost table"

# A/B (rust_loop_b): two rounds, A 14000 and 14400, B 14700 and 14900 instructions per I/O.
"$py" - "$tmp/ab.json" <<'PY'
import json, sys
rounds = [{"raw": 10000, "loop": 14000, "rust_loop": 14000, "rust_loop_b": 14700},
          {"raw": 10000, "loop": 14000, "rust_loop": 14400, "rust_loop_b": 14900}]
meta = {"date": "2026-12-01T00:00:00+00:00", "kernel": "test", "cpus": 2, "cpu_model": "test",
        "mem_total_kib": 4 << 20, "accel": "TCG", "clock": "icount", "fio": "fio-3.33",
        "rounds": 2, "runtime_s": 1, "file_mib": 256, "pagecache_read_mib": 0,
        "drivers": ["raw", "loop", "rust_loop", "rust_loop_b"], "backings": ["nullb"],
        "modes": ["dio"], "workloads": ["psync-randread-4k"], "b_ko": "/x/rust_loop.ko",
        "b_params": ""}
samples = [{"round": i + 1, "driver": d, "backing": "nullb", "mode": "dio",
            "workload": "psync-randread-4k", "iops": 1e9 / insns}
           for i, r in enumerate(rounds) for d, insns in r.items()]
json.dump({"meta": meta, "notes": [], "samples": samples, "pagecache": [], "errors": []},
          open(sys.argv[1], "w"))
PY
rc=0
out=$("$py" scripts/bench/bench-report.py "$tmp/ab.json" 2>&1) || rc=$?
[ $rc = 0 ] || fail "the A/B report failed (rc=$rc): $(tail -3 <<<"$out")"
grep -q '^## A/B: rust_loop (A) against rust_loop B (`/x/rust_loop.ko`), same boot' "$tmp/summary.md" ||
	fail "summary.md has no A/B table"
grep -qF '| nullb | dio | psync-randread-4k | 14,000, 14,400 | 14,700, 14,900 | 14,200 | 14,800 | 1.042 | 1.050, 1.035 | +600 |' "$tmp/summary.md" ||
	fail "A/B row wrong: $(grep '^| nullb | dio' "$tmp/summary.md")"
"$py" -c 'import json,sys; ab=json.load(open(sys.argv[1]))["ab"]; assert len(ab)==1 and round(ab[0]["b-a"])==600' "$tmp/ab.json" ||
	fail "bench.json has no ab entry"
# Without rust_loop_b there is no A/B table.
grep -q '## A/B' <("$py" scripts/bench/bench-report.py "$tmp/ok.json" 2>&1; cat "$tmp/summary.md") &&
	fail "an A/B table without rust_loop_b samples"

[ $failed = 0 ] && echo "ok"
exit $failed
