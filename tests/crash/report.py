#!/usr/bin/env python3
"""The crash runs' figures (the JSON files crash.py wrote) as tables, and their verdict.

    report.py DIR [--driver rust_loop|loop] [--cuts N] [--points N] [--shutdown-cuts N]
              [--paths] [--summary]

Prints one row per run: cuts and replayed points checked, objects checked, acknowledged writes
lost, fsck and mount failures, the time to recover; then per driver and mode the points checked
and the writes lost. Exits 1 when a run of the driver(s) named lost anything, failed a check,
failed outright, or checked fewer points than asked; with --paths (rust_loop), also when a way a
write ends was not taken (its counter stayed 0).
"""
import argparse
import glob
import json
import os
import sys

# The ways a write (or a flush) ends in rust_loop, each with the counter, summed over runs, that
# shows it was taken (README "Counters"), and the runs that must take it.
PATHS = [
    ("NOWAIT inline (queue_rq submits, ki_complete ends)", "nowait_completions", "shutdown dio"),
    ("worker (hardware queue's kthread)", "worker_submissions", "all"),
    ("second worker of a deep queue (>= 4 CPUs, >= 2 queues)", "worker_spread", "dio"),
    ("per-cgroup worker", "cgroup_worker_submissions", "all"),
    ("completion batch of a worker", "completions_batched", "all"),
    ("flush racing writes of other hardware queues", "flushes_racing", "all"),
    ("discard then flush", "discards", "all"),
    ("write-zeroes then flush", "write_zeroes", "all"),
]
# The workload's own counts of the races it made (crash/workload.py).
RACES = [
    ("LOOP_SET_STATUS64 / LOOP_SET_DIRECT_IO with a flush in flight", "knobs.racing_flush"),
    ("LOOP_CLR_FD during a flush, then detach at the last close", "detach.clr_during_flush"),
    ("LOOP_CHANGE_FD while flushes are issued", "changefd.changes"),
]


def load(d):
    runs = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        with open(f) as fh:
            r = json.load(fh)
        r["file"] = os.path.basename(f)
        runs.append(r)
    return runs


def fmt_rec(c):
    if c.get("recover_mean") is None:
        return "-"
    return f"{c['recover_mean']:.1f}/{c['recover_max']:.1f}"


def table(runs):
    print(f"{'driver':<10} {'stack':<8} {'mode':<8} {'backing':<7} {'upper':<5} "
          f"{'cuts':>5} {'lost':>5} {'fsck!':>5} {'recover s':>10} {'points':>6} {'lost':>5} "
          f"{'fsck!':>5} {'objects':>8} {'acks':>6} {'log MiB':>8}  error")
    for r in runs:
        c, p = r["cuts"], r["replay"]
        fails_c = c["fsck_failed"] + c["mount_failed"]
        fails_p = p["fsck_failed"] + p["mount_failed"]
        print(f"{r['driver']:<10} {r['stack']:<8} {r['mode']:<8} {r['backing']:<7} {r['upper']:<5} "
              f"{c['points']:>5} {c['lost']:>5} {fails_c:>5} {fmt_rec(c):>10} {p['points']:>6} "
              f"{p['lost']:>5} {fails_p:>5} {c['objects'] + p['objects']:>8} {r['acks']:>6} "
              f"{r['log_mib']:>8}  {r['error'] or ''}")


def summary(runs):
    """Per driver and mode: points checked (cuts + replayed marks) and writes lost."""
    agg = {}
    for r in runs:
        k = (r["driver"], r["mode"])
        a = agg.setdefault(k, [0, 0, 0, 0, 0])
        a[0] += r["cuts"]["points"]
        a[1] += r["replay"]["points"]
        a[2] += r["cuts"]["lost"] + r["replay"]["lost"]
        a[3] += sum(r[x]["fsck_failed"] + r[x]["mount_failed"] for x in ("cuts", "replay"))
        a[4] += 1 if r["error"] else 0
    print(f"{'driver':<10} {'mode':<9} {'cuts':>5} {'replayed':>8} {'points':>7} {'writes lost':>11} "
          f"{'checks failed':>13} {'runs failed':>11}")
    for (drv, mode), a in sorted(agg.items()):
        print(f"{drv:<10} {mode:<9} {a[0]:>5} {a[1]:>8} {a[0] + a[1]:>7} {a[2]:>11} {a[3]:>13} "
              f"{a[4]:>11}")


def paths(runs):
    """rust_loop's counters summed over the runs: each way a write ends, taken or not."""
    bad = []
    cpus = min((r.get("cpus") or 1 for r in runs), default=1)
    print(f"{'way a write ends':<58} {'counter':<26} {'count':>9}")
    for what, counter, which in PATHS:
        sel = [r for r in runs if which == "all" or
               (which == "dio" and r["mode"] == "dio") or
               (which == "shutdown dio" and r["stack"] == "shutdown" and r["mode"] == "dio")]
        n = sum(r["counters"].get(counter, 0) for r in sel)
        note = ""
        if counter == "worker_spread" and cpus < 4:
            note = f"  (not asked: {cpus} online CPUs)"
        elif sel and n == 0:
            bad.append(f"{what}: {counter} stayed 0")
        print(f"{what:<58} {counter:<26} {n:>9}{note}")
    for what, key in RACES:
        n = sum(r["work"].get(key, 0) for r in runs)
        if runs and n == 0:
            bad.append(f"{what}: none made")
        print(f"{what:<58} {key:<26} {n:>9}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--driver")
    ap.add_argument("--cuts", type=int, default=0)
    ap.add_argument("--points", type=int, default=0)
    ap.add_argument("--shutdown-cuts", type=int, default=0)
    ap.add_argument("--paths", action="store_true")
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args()
    runs = [r for r in load(a.dir) if not a.driver or r["driver"] == a.driver]
    if not runs:
        print(f"no crash run results in {a.dir}")
        sys.exit(1)
    table(runs)
    if a.summary:
        print()
        summary(runs)
    bad = []
    for r in runs:
        name = f"{r['driver']} {r['stack']} {r['mode']} {r['backing']}/{r['upper']}"
        if r["error"]:
            bad.append(f"{name}: {r['error']}")
        for k in ("cuts", "replay"):
            c = r[k]
            if c["lost"] or c["fsck_failed"] or c["mount_failed"]:
                bad.append(f"{name}: {k}: {c['lost']} lost, {c['fsck_failed']} fsck and "
                           f"{c['mount_failed']} mount failures: " + "; ".join(c["details"][:5]))
        want_cuts = a.shutdown_cuts if r["stack"] == "shutdown" else a.cuts
        if not r["error"] and r["cuts"]["points"] < want_cuts:
            bad.append(f"{name}: {r['cuts']['points']} cuts checked of {want_cuts}")
        if not r["error"] and r["stack"] == "flakey" and r["replay"]["points"] < min(a.points, r["marks"]):
            bad.append(f"{name}: {r['replay']['points']} replayed points of {a.points}")
        if r.get("marks_failed"):
            bad.append(f"{name}: {r['marks_failed']} dm-log-writes marks not placed")
    if a.paths:
        print()
        bad += paths(runs)
    for b in bad:
        print(f"FAIL: {b}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
