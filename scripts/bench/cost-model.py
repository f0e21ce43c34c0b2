#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Projects `make split`'s per-thread costs onto hosts with more CPUs (BENCHMARKS.md "Many cores").

  scripts/bench/cost-model.py [SPLIT_JSON] [--rate R] [--device D] [--latency-us L] [--cpus 2,4,16,64]
                        [--markdown] [--check WALL_JSON]

A bottleneck model, no queueing: each design's IOPS on N CPUs at R instructions per second per
CPU is the least of
  device     D, the backing device's IOPS at depth (the raw file reaches it when CPUs allow);
  CPUs       N * R / total          every instruction of an I/O, on any CPU;
  submitters min(J, N) * R / submit J jobs (fio tasks), each a serial thread (the softirqs,
                                    writeback and other threads count in CPUs only);
  workers    W * R / worker         W serial worker threads, each a request's worker share
                                    (loop.c: 1 per cgroup; rust_loop: the workers of the
                                    hardware queues in use and of their next queues, which take
                                    requests while a busy queue's worker has some waiting
                                    (dispatch.rs spread_worker, from 4 CPUs): min(queues, 2 J),
                                    on fewer CPUs min(queues, J));
and for a job that waits for each I/O (psync, QD1): 1 / (total / R + L), all of it in series.
Costs are instructions per I/O from split.json (one vCPU, icount: exact), per design:
  raw             the file, O_DIRECT (submit only)
  loop            loop.c (its worker: one per cgroup)
  rust_loop       the default policy, 1 hardware queue (the module's default today)
  rust_loop_inline / rust_loop_worker   deep queues inline / every request on the worker
  rust_loop_percpu  the default policy with a hardware queue per CPU: rust_loop's costs, W =
                  min(queues, 2 J) workers from 4 CPUs (min(queues, J) below), queues =
                  min(N, MAX_QUEUES) (--max-queues, default 8)
--check compares the 1- and 2-CPU projections with wall-clock runs (scripts/guest/guest-bench.py's
bench.json of VM_CPUS=1 and VM_CPUS=2 runs, given as ONE.json,TWO.json): IOPS, with R fitted on
the one-CPU run's raw cells, and the scaling (2 CPUs over 1, 2 hardware queues over 1), where R
cancels out; prints each error (median over rounds, the rounds' spread in brackets).
"""

import argparse
import json
import statistics
import sys

JOBS = {"psync-randread-4k": 1, "randread-4k-qd32": 1, "randwrite-4k-qd32": 1,
        "seqread-1m-qd8": 1, "seqwrite-1m-qd8": 1, "rw-4k-qd16-12jobs": 12}
QD1 = {"psync-randread-4k"}
DESIGNS = ["raw", "loop", "rust_loop", "rust_loop_inline", "rust_loop_worker", "rust_loop_percpu"]


def costs(split):
    """{(mode, workload, design): {"total", "submit", "worker", "busiest"}} from split.json."""
    out = {}
    for c in split["cells"]:
        i = c["instr_per_io"]
        # Only the fio tasks are a job's serial chain: ksoftirqd, the backing file system's
        # kworkers and other tasks run beside it, on any CPU (in `total`).
        k = {"total": c["total_per_io"], "submit": i["submit"],
             "worker": i["worker"], "busiest": c["busiest_worker_per_io"],
             "threads": c["worker_threads"]}
        out[(c["mode"], c["workload"], c["target"])] = k
        if c["target"] == "rust_loop":
            out[(c["mode"], c["workload"], "rust_loop_percpu")] = dict(k)
    return out


def workers(design, n, jobs, max_queues, measured_threads):
    if design == "raw":
        return 0
    if design == "loop":
        return 1  # one worker per blkcg: every fio job here is in the root cgroup
    if design == "rust_loop_percpu":
        queues = max(1, min(n, max_queues))
        # A second worker per deep queue from SPREAD_MIN_CPUS (4) online CPUs.
        return min(queues, 2 * jobs if n >= 4 else jobs)
    return max(1, measured_threads)  # one hardware queue: its worker (cgroup workers aside)


def project(k, design, wl, n, rate, device, latency):
    """(IOPS, the bound that set it)."""
    if wl in QD1:
        return 1.0 / (k["total"] / rate + latency), "latency"
    jobs = JOBS.get(wl, 1)
    bounds = {"device": device, "CPUs": n * rate / k["total"]}
    if k["submit"] > 0:
        bounds["submitters"] = min(jobs, n) * rate / k["submit"]
    w = workers(design, n, jobs, ARGS.max_queues, k.get("threads", 1))
    if w and k["worker"] > 0:
        # Each request's worker share runs on one of w threads.
        bounds["workers"] = w * rate / k["worker"]
    name = min(bounds, key=bounds.get)
    return bounds[name], name


def table(c, cpus, rate, device, latency, markdown):
    rows = []
    modes = sorted({m for m, _, _ in c}, key=lambda m: m != "dio")
    for mode in modes:
        for wl in [w for w in JOBS if (mode, w, "loop") in c]:
            for n in cpus:
                got = {}
                for d in DESIGNS:
                    k = c.get((mode, wl, d))
                    if k:
                        got[d] = project(k, d, wl, n, rate, device, latency)
                loop = got.get("loop", (0, ""))[0]
                raw = got.get("raw", (0, ""))[0]
                cells = []
                for d in DESIGNS:
                    if d not in got:
                        cells.append("")
                        continue
                    v, why = got[d]
                    rel = f" ({v / loop:.2f}x loop, {v / raw:.2f}x raw)" if loop and raw and d not in ("loop", "raw") else ""
                    cells.append(f"{v / 1000:,.0f}k {why}{rel}")
                rows.append([mode, wl, str(n)] + cells)
    head = ["mode", "workload", "CPUs"] + DESIGNS
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        out = ["\t".join(head)] + ["\t".join(r) for r in rows]
    return "\n".join(out)


def check(c, paths, device, latency):
    """Fits R on the 1-CPU wall-clock run's raw cells; predicts the rest of both runs."""
    one, two = (json.load(open(p)) for p in paths.split(","))

    def medians(bench):
        # bench.json: samples of {driver, backing, mode, workload, iops}.
        by = {}
        for s in bench.get("samples", []):
            if s.get("backing") != "nullb" or "iops" not in s:
                continue
            by.setdefault((s["mode"], s["workload"], s["driver"]), []).append(s["iops"])
        return {k: (statistics.median(v), min(v), max(v)) for k, v in by.items()}

    m1, m2 = medians(one), medians(two)
    fits = [v[0] * c[("dio", wl, "raw")]["total"] for (mode, wl, d), v in m1.items()
            if d == "raw" and ("dio", wl, "raw") in c and wl not in QD1]
    if not fits:
        sys.exit("--check: no raw cells in the one-CPU run")
    rate = statistics.median(fits)
    print(f"fitted R = {rate / 1e6:,.0f}M instructions/s per vCPU (TCG), from {len(fits)} raw cells")
    names = {"rust_loop_mq2": "rust_loop_percpu"}
    errs = []
    for n, m in ((1, m1), (2, m2)):
        for (mode, wl, d), (med, lo, hi) in sorted(m.items()):
            k = c.get((mode, wl, names.get(d, d)))
            if not k:
                continue
            p, why = project(k, names.get(d, d), wl, n, rate, device, latency)
            e = p / med - 1
            errs.append(abs(e))
            print(f"{n} CPU {mode:8} {wl:18} {d:16} measured {med:8,.0f} ({lo:,.0f}-{hi:,.0f}) "
                  f"projected {p:8,.0f} ({why}) error {e:+.0%}")
    print(f"IOPS: median |error| {statistics.median(errs):.0%}, max {max(errs):.0%} over {len(errs)} cells")
    # Scaling, where R cancels: 2 CPUs over 1 CPU per design, and 2 queues over 1 on 2 CPUs.
    serrs = []
    pairs = [(f"{d} 2/1 CPUs", (1, m1, d), (2, m2, d)) for d in sorted({d for (_, _, d) in m1})]
    pairs.append(("2/1 queues, 2 CPUs", (2, m2, "rust_loop"), (2, m2, "rust_loop_mq2")))
    for label, (na, ma, da), (nb, mb, db) in pairs:
        for wl in JOBS:
            a, b = ma.get(("dio", wl, da)), mb.get(("dio", wl, db))
            ka, kb = c.get(("dio", wl, names.get(da, da))), c.get(("dio", wl, names.get(db, db)))
            if not (a and b and ka and kb):
                continue
            pa = project(ka, names.get(da, da), wl, na, rate, device, latency)[0]
            pb = project(kb, names.get(db, db), wl, nb, rate, device, latency)[0]
            meas = b[0] / a[0]
            lo, hi = b[1] / a[2], b[2] / a[1]
            e = (pb / pa) / meas - 1
            serrs.append(abs(e))
            print(f"scaling {label:26} {wl:18} measured {meas:5.2f} ({lo:.2f}-{hi:.2f}) projected {pb / pa:5.2f} error {e:+.0%}")
    if serrs:
        print(f"scaling: median |error| {statistics.median(serrs):.0%}, max {max(serrs):.0%} over {len(serrs)} pairs")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("split", nargs="?", default="results/split/split.json")
    ap.add_argument("--rate", type=float, default=2e9, help="instructions per second per CPU")
    ap.add_argument("--device", type=float, default=1e6, help="backing device IOPS at depth")
    ap.add_argument("--latency-us", type=float, default=10.0, help="device latency at QD1")
    ap.add_argument("--cpus", default="2,4,16,64")
    ap.add_argument("--max-queues", type=int, default=8)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check", help="ONE.json,TWO.json: wall-clock bench.json of 1 and 2 vCPUs")
    ARGS = ap.parse_args()
    c = costs(json.load(open(ARGS.split)))
    if ARGS.check:
        check(c, ARGS.check, float("inf"), 0.0)
        return
    cpus = [int(x) for x in ARGS.cpus.split(",")]
    print(table(c, cpus, ARGS.rate, ARGS.device, ARGS.latency_us * 1e-6, ARGS.markdown))


ARGS = None
if __name__ == "__main__":
    main()
