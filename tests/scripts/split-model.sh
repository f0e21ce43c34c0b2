#!/usr/bin/env bash
# Host-side test of scripts/bench/split-report.py and scripts/bench/cost-model.py (no VM):
#
#   bash tests/scripts/split-model.sh
#
# Two made-up cells (snapshots as scripts/guest/guest-split.py writes them) with known run times: the
# report must split them by thread class exactly (fio -> submit, rust_loop/K and a kworker that
# names loop0 at either snapshot -> worker, a writeback kworker -> backing, ksoftirqd -> softirq,
# the measuring task left out) and give the busiest worker; the
# model must pick the bound that the arithmetic says (one worker thread caps loop.c; per-CPU
# queues lift it to the CPUs, then the device; one job's queue gets two workers).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

d=$tmp/split
mkdir -p "$d"
"$py" - "$d" <<'EOF'
import json, sys
d = sys.argv[1]
def cell(target, threads_before, threads_after, ios, jiffies_after=None, irq_time=False,
         workload="rw-4k-qd16-12jobs"):
    snap = lambda t, io, ns, j: {"monotonic_ns": ns, "uptime": 0, "ios": io,
                                 "cpu_jiffies": j, "threads": t}
    m = {"target": target, "mode": "dio", "workload": workload, "cpus": 1,
         "measuring_tid": "99", "hz": 100, "irq_time_accounting": irq_time,
         "before": snap(threads_before, 1000, 0, [0] * 10),
         "after": snap(threads_after, 1000 + ios, 2 * 10**9, jiffies_after or [0] * 10)}
    json.dump(m, open(f"{d}/{target}-dio-{workload}.json", "w"))
# rust_loop: 1000 I/Os; fio 2 tasks 6M + 4M, workers 5M and 3M, ksoftirqd 1M, measuring 7M
cell("rust_loop",
     {"1": ["fio", 0], "2": ["fio", 0], "3": ["rust_loop/0", 0], "4": ["rust_loop/1", 0],
      "5": ["ksoftirqd/0", 0], "99": ["python3", 0]},
     {"1": ["fio", 6_000_000], "2": ["fio", 4_000_000], "3": ["rust_loop/0", 5_000_000],
      "4": ["rust_loop/1", 3_000_000], "5": ["ksoftirqd/0", 1_000_000],
      "6": ["kworker/0:1-events", 500_000], "99": ["python3", 7_000_000]}, 1000)
# loop.c: fio 9M, its kworkers 11M + 2M (the second ran writeback last), writeback 0.5M, 1000 I/Os
cell("loop", {"1": ["fio", 0], "7": ["kworker/u4:2+loop0", 0], "8": ["kworker/u4:3+loop0", 0],
              "9": ["kworker/u4:5-events_unbound", 0]},
     {"1": ["fio", 9_000_000], "7": ["kworker/u4:2+loop0", 11_000_000],
      "8": ["kworker/u4:3-flush-252:0", 2_000_000],
      "9": ["kworker/u4:5+flush-252:0", 500_000]}, 1000)
# raw: fio 15M
cell("raw", {"1": ["fio", 0]}, {"1": ["fio", 15_000_000]}, 1000)
# all on the worker, interrupt time accounted apart (KERNEL=irqtime): fio 4M, worker 5M, and
# /proc/stat's irq 1 + softirq 2 (USER_HZ 100: 30 ms) -> 30,000 instructions per I/O; without
# the accounting the same ticks are only a share
cell("rust_loop_worker", {"1": ["fio", 0], "3": ["rust_loop/0", 0]},
     {"1": ["fio", 4_000_000], "3": ["rust_loop/0", 5_000_000]}, 1000,
     jiffies_after=[0, 0, 1, 0, 0, 1, 2, 0, 0, 0], irq_time=True)
# One job at QD32: fio 6M, one worker 9M, 1000 I/Os, both drivers
for t, w in (("rust_loop", "rust_loop/0"), ("loop", "kworker/u4:2+loop0")):
    cell(t, {"1": ["fio", 0], "3": [w, 0]}, {"1": ["fio", 6_000_000], "3": [w, 9_000_000]},
         1000, workload="randread-4k-qd32")
cell("raw", {"1": ["fio", 0]}, {"1": ["fio", 13_000_000]}, 1000, workload="randread-4k-qd32")
EOF
"$py" scripts/bench/split-report.py "$d" >/dev/null || fail "split-report.py failed"
"$py" - "$d/split.json" <<'EOF' || fail "split-report.py's figures are wrong"
import json, sys
cells = {c["target"]: c for c in json.load(open(sys.argv[1]))["cells"]}
r, l = cells["rust_loop"], cells["loop"]
want = {"submit": 10000, "worker": 8000, "backing": 0, "softirq": 1000, "other": 500,
        "interrupt": 0}
assert r["instr_per_io"] == want, r["instr_per_io"]
assert r["busiest_worker_per_io"] == 5000 and r["worker_threads"] == 2, r
assert r["total_per_io"] == 19500, r["total_per_io"]
assert l["instr_per_io"]["worker"] == 13000 and l["instr_per_io"]["submit"] == 9000, l
assert l["instr_per_io"]["backing"] == 500 and l["instr_per_io"]["other"] == 0, l
assert abs(r["busy_share"] - 19.5e6 / 2e9) < 1e-9, r["busy_share"]
assert r["instr_per_io"]["interrupt"] == 0, r
w = cells["rust_loop_worker"]
assert w["instr_per_io"]["interrupt"] == 30000 and w["total_per_io"] == 39000, w
assert abs(w["irq_share"] - 0.25) < 1e-9 and abs(w["softirq_share"] - 0.5) < 1e-9, w
EOF
grep -q "| dio | rw-4k-qd16-12jobs | rust_loop | 1,000 | 19,500 | 10,000 | 8,000 | 5,000 | 2 | 0 | 1,000 | 500 | – |" "$d/split.md" ||
	fail "split.md lacks rust_loop's row: $(cat "$d/split.md")"

# The model at R = 1e9/s, device 1M IOPS, 12 jobs:
#  loop on 16 CPUs: workers 1 * 1e9 / 13000 = 76,923 (below CPUs 16e9/22500 = 711k)
#  rust_loop (2 measured worker threads): 2 * 1e9 / 8000 = 250k (CPUs 16e9/19500 = 820k)
#  rust_loop_percpu on 16 CPUs: 8 queues -> 1M by workers, CPUs 820,513 -> CPUs
#  raw on 2 CPUs: CPUs 2e9/15000 = 133,333
out=$("$py" scripts/bench/cost-model.py "$d/split.json" --rate 1e9 --device 1e6 --cpus 2,16) ||
	fail "cost-model.py failed"
row16=$(grep -P '^dio\trw-4k-qd16-12jobs\t16\t' <<<"$out")
row2=$(grep -P '^dio\trw-4k-qd16-12jobs\t2\t' <<<"$out")
grep -q $'\t77k workers\t' <<<"$row16" || fail "loop on 16 CPUs: $row16"
grep -q $'\t250k workers (3.25x loop' <<<"$row16" || fail "rust_loop on 16 CPUs: $row16"
grep -q $'\t821k CPUs (10.67x loop' <<<"$row16" || fail "rust_loop_percpu on 16 CPUs: $row16"
grep -q $'^dio\trw-4k-qd16-12jobs\t2\t133k CPUs\t' <<<"$row2" || fail "raw on 2 CPUs: $row2"
# One job at QD32 on 16 CPUs: loop.c's one worker 1e9/9000 = 111k; rust_loop's queue per CPU
# gives the job's queue's worker and the next one's (W = 2): 222k, so the job itself bounds it,
# 1e9/6000 = 167k (1.50x); on 2 CPUs there is no second worker (fewer than 4 CPUs): 111k.
rowq=$(grep -P '^dio\trandread-4k-qd32\t16\t' <<<"$out")
grep -q $'\t111k workers\t111k workers (1.00x loop' <<<"$rowq" || fail "one job, one worker, 16 CPUs: $rowq"
grep -q $'\t167k submitters (1.50x loop' <<<"$rowq" || fail "one job, rust_loop_percpu, 16 CPUs: $rowq"
rowq2=$(grep -P '^dio\trandread-4k-qd32\t2\t' <<<"$out")
grep -qP '\t111k workers \(1.00x loop[^\t]*$' <<<"$rowq2" || fail "one job, rust_loop_percpu, 2 CPUs: $rowq2"

if [ "$failed" != 0 ]; then
	echo "$out"
	exit 1
fi
echo "split-model: all cases passed"
