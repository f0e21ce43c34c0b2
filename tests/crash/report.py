#!/usr/bin/env python3
"""The crash runs' figures (the JSON files crash.py wrote) as tables, and their verdict.

    report.py DIR [--driver rust_loop|loop] [--cuts N] [--points N] [--shutdown-cuts N]
              [--matrix FILE] [--paths | --require-paths] [--runs] [--markdown]

Prints per driver, mode and file system on the loop device: the cuts (dm-flakey and
FS_IOC_SHUTDOWN) and replayed points checked, the objects checked, the acknowledged writes lost,
the file-system checks (clean of run), and the time to recover; with --runs, one row per run
first; with --paths, the ways a write ends that rust_loop's counters show taken, per mode.
Exits 1 when a run of the driver(s) named lost anything, failed a check, failed outright,
checked fewer points than asked or no object at all, when the runs are not those of --matrix (a
file of "driver stack mode backing upper" lines, the runs the command made: one missing, say a
test that skipped, or one of an earlier run fails), and with --require-paths (which implies
--paths) when a way a write ends that the runs must take was not taken (its counter stayed 0).
The suite's short form shows the ways without requiring them: a few cuts need not race an ioctl
with a flush.
"""
import argparse
import glob
import json
import os
import sys

# The ways a write (or a flush) ends in rust_loop (docs/counters.md), each with its counter
# and the modes whose runs must take it; "dio" also needs the shutdown stack (the flakey
# stack's device-mapper targets take no REQ_NOWAIT bio, so the NOWAIT path stands aside there).
PATHS = [
    ("NOWAIT inline (queue_rq submits, ki_complete ends)", "nowait_completions", "dio"),
    ("worker (the hardware queue's thread)", "worker_submissions", "any"),
    ("second worker of a deep queue", "worker_spread", "any"),
    ("per-cgroup worker", "cgroup_worker_submissions", "any"),
    ("completion batch of a worker", "completions_batched", "any"),
    ("flush racing writes of other hardware queues", "flushes_racing", "any"),
    ("flush racing LOOP_SET_STATUS", "flushes_racing_set_status", "any"),
    # LOOP_CHANGE_FD takes only a read-only device, which (as loop.c's) advertises no write
    # cache: the block layer sends it no flush. It races the device's reads instead.
    ("LOOP_CHANGE_FD racing reads (no flush comes)", "change_fd_racing_io", "any"),
    ("flush racing LOOP_CLR_FD (detach at last close)", "flushes_racing_clr_fd", "any"),
    ("discard, then a flush", "flushes_after_discard", "any"),
    ("write-zeroes, then a flush", "flushes_after_write_zeroes", "any"),
]
# A deep queue spreads to the next queue's worker only with 2 hardware queues and the CPUs to
# keep both busy (dispatch::spread_worker).
SPREAD_MIN_CPUS = 4
# The races the workload made (crash/workload.py), for both drivers: loop.c has no counters.
RACES = [
    ("LOOP_SET_STATUS64/LOOP_SET_DIRECT_IO, a flush in flight", "knobs.racing_flush"),
    ("LOOP_CLR_FD during a flush", "detach.clr_during_flush"),
    ("LOOP_CHANGE_FD, reads issued meanwhile", "changefd.changes"),
]


def load(d):
    runs = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        with open(f) as fh:
            r = json.load(fh)
        r["file"] = os.path.basename(f)
        runs.append(r)
    return runs


def fmt_rec(mean, mx):
    return "-" if mean is None else f"{mean:.1f}/{mx:.1f}"


def runs_table(runs):
    print(f"{'driver':<10} {'stack':<8} {'mode':<8} {'backing':<7} {'upper':<5} "
          f"{'cuts':>5} {'lost':>5} {'fsck!':>5} {'recover s':>10} {'points':>6} {'lost':>5} "
          f"{'fsck!':>5} {'objects':>8} {'acks':>6} {'log MiB':>8} {'secs':>6}  error")
    for r in runs:
        c, p = r["cuts"], r["replay"]
        fails_c = c["fsck_failed"] + c["mount_failed"]
        fails_p = p["fsck_failed"] + p["mount_failed"]
        secs = r.get("run_secs", 0) + sum(v for k, v in r.get("phases", {}).items()
                                          if k in ("regions", "build", "replay"))
        print(f"{r['driver']:<10} {r['stack']:<8} {r['mode']:<8} {r['backing']:<7} {r['upper']:<5} "
              f"{c['points']:>5} {c['lost']:>5} {fails_c:>5} "
              f"{fmt_rec(c.get('recover_mean'), c.get('recover_max')):>10} {p['points']:>6} "
              f"{p['lost']:>5} {fails_p:>5} {c['objects'] + p['objects']:>8} {r['acks']:>6} "
              f"{r['log_mib']:>8} {secs:>6.0f}  {r['error'] or ''}")


def emit(header, rows, md):
    """A table: `header` as (title, "<" or ">") pairs, `rows` of strings; aligned text, or
    Markdown with `md` (for docs/testing.md)."""
    if md:
        print("| " + " | ".join(t for t, _ in header) + " |")
        print("|" + "|".join("---" if al == "<" else "--:" for _, al in header) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(t), *(len(r[i]) for r in rows)) if rows else len(t)
              for i, (t, _) in enumerate(header)]
    for row in [[t for t, _ in header]] + rows:
        print(" ".join(f"{c:{al}{w}}" for c, (_, al), w in zip(row, header, widths)).rstrip())


def summary(runs, md=False):
    """Per driver, mode and file system on the loop device."""
    agg = {}
    for r in runs:
        a = agg.setdefault((r["driver"], r["mode"], r["upper"]), {
            "cuts": 0, "shutdown": 0, "replayed": 0, "objects": 0, "lost": 0, "fscks": 0,
            "fsck_failed": 0, "mount_failed": 0, "rec": [], "rec_max": 0.0, "failed": 0})
        c, p = r["cuts"], r["replay"]
        a["shutdown" if r["stack"] == "shutdown" else "cuts"] += c["points"]
        a["replayed"] += p["points"]
        for x in (c, p):
            a["objects"] += x["objects"]
            a["lost"] += x["lost"]
            a["fscks"] += x.get("fscks", x["points"])
            a["fsck_failed"] += x["fsck_failed"]
            a["mount_failed"] += x["mount_failed"]
        # The time to recover after a cut (a replayed point mounts a snapshot: not a recovery).
        if c.get("recover_mean") is not None:
            a["rec"].append((c["recover_mean"], c["points"]))
            a["rec_max"] = max(a["rec_max"], c["recover_max"])
        a["failed"] += 1 if r["error"] else 0
    rows = []
    for (drv, mode, fs), a in sorted(agg.items()):
        n = sum(w for _, w in a["rec"])
        mean = sum(m * w for m, w in a["rec"]) / n if n else None
        points = a["cuts"] + a["shutdown"] + a["replayed"]
        rows.append([drv, mode, fs, str(a["cuts"]), str(a["shutdown"]), str(a["replayed"]),
                     str(points), str(a["objects"]), str(a["lost"]),
                     f"{a['fscks'] - a['fsck_failed']}/{a['fscks']}", str(a["mount_failed"]),
                     fmt_rec(mean, a["rec_max"]), str(a["failed"])])
    emit([("driver", "<"), ("mode", "<"), ("fs", "<"), ("cuts", ">"), ("shutdown", ">"),
          ("replayed", ">"), ("points", ">"), ("objects", ">"), ("lost", ">"),
          ("fsck clean", ">"), ("mount!", ">"), ("recover s", ">"), ("runs failed", ">")],
         rows, md)


def paths(runs, md=False):
    """rust_loop's counters summed over its runs, per mode: each way a write ends, taken or
    not. Returns the failures."""
    bad = []
    modes = sorted({r["mode"] for r in runs})
    cpus = min((r.get("cpus") or 1 for r in runs), default=1)
    rows = []
    for what, counter, where in PATHS:
        per = {m: sum(r["counters"].get(counter, 0) for r in runs if r["mode"] == m)
               for m in modes}
        note = ""
        need = [m for m in modes if where in ("any", m)]
        if counter == "worker_spread" and cpus < SPREAD_MIN_CPUS:
            note = f"not required: {cpus} CPUs"
        elif counter == "nowait_completions" and not any(
                r["stack"] == "shutdown" and r["mode"] == "dio" for r in runs):
            note = "not required: no shutdown run"
        elif need and sum(per[m] for m in need) == 0:
            bad.append(f"{what}: {counter} stayed 0 in the {'/'.join(need)} runs")
            note = "NOT TAKEN"
        rows.append([what, f"`{counter}`" if md else counter] +
                    [str(per[m]) for m in modes] + [note])
    header = [("way a write ends (rust_loop)", "<"), ("counter", "<")] + [(m, ">") for m in modes]
    if any(row[-1] for row in rows):
        header.append(("", "<"))
    else:
        rows = [row[:-1] for row in rows]
    emit(header, rows, md)
    return bad


def races(runs, md=False):
    drivers = sorted({r["driver"] for r in runs})
    rows = [[what, key] + [str(sum(r["work"].get(key, 0) for r in runs if r["driver"] == d))
                           for d in drivers] for what, key in RACES]
    emit([("races the workload made", "<"), ("count", "<")] + [(d, ">") for d in drivers],
         rows, md)


def verdict(runs, a):
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
        if not r["error"] and r["stack"] == "flakey" and \
                r["replay"]["points"] < min(a.points, r["marks"]):
            bad.append(f"{name}: {r['replay']['points']} replayed points of {a.points}")
        if r.get("marks_failed"):
            bad.append(f"{name}: {r['marks_failed']} dm-log-writes marks not placed")
        if not r["error"] and r["cuts"]["objects"] + r["replay"]["objects"] == 0:
            bad.append(f"{name}: checked no object (the workload acknowledged nothing durable?)")
    return bad


def run_key(r):
    return (r["driver"], r["stack"], r["mode"], r["backing"], r["upper"])


def matrix_check(runs, path, driver):
    """The runs against the matrix the command asked for: each run once, no other."""
    with open(path) as fh:
        want = [tuple(line.split()) for line in fh if line.strip()]
    want = [w for w in want if not driver or w[0] == driver]
    bad = []
    if any(len(w) != 5 for w in want):
        return [f"{path}: not 'driver stack mode backing upper' lines"]
    have = [run_key(r) for r in runs]
    missing = [w for w in want if w not in have]
    extra = [h for h in have if h not in want]
    dups = sorted({h for h in have if have.count(h) > 1})
    if missing or extra or dups:
        bad.append(f"{len(runs)} runs, the matrix has {len(want)}")
    bad += [f"{' '.join(w)}: no result (the run did not happen, or skipped)" for w in missing]
    bad += [f"{' '.join(h)}: a result of no run of this matrix" for h in extra]
    bad += [f"{' '.join(h)}: more than one result" for h in dups]
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--driver")
    ap.add_argument("--cuts", type=int, default=0)
    ap.add_argument("--points", type=int, default=0)
    ap.add_argument("--shutdown-cuts", type=int, default=0)
    ap.add_argument("--matrix", help="the runs expected: 'driver stack mode backing upper' lines")
    ap.add_argument("--paths", action="store_true")
    ap.add_argument("--require-paths", action="store_true")
    ap.add_argument("--runs", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the tables as Markdown")
    a = ap.parse_args()
    runs = [r for r in load(a.dir) if not a.driver or r["driver"] == a.driver]
    if not runs:
        print(f"FAIL: no crash run results in {a.dir}")
        sys.exit(1)
    if a.runs:
        runs_table(runs)
        print()
    summary(runs, a.markdown)
    bad = verdict(runs, a)
    if a.matrix:
        bad = matrix_check(runs, a.matrix, a.driver) + bad
    rust = [r for r in runs if r["driver"] == "rust_loop"]
    if (a.paths or a.require_paths) and rust:
        print()
        untaken = paths(rust, a.markdown)
        if a.require_paths:
            bad += untaken
    print()
    races(runs, a.markdown)
    for b in bad:
        print(f"FAIL: {b}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
