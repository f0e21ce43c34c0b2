#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The host half of scripts/bench/split.sh: splits each cell's instructions by the thread that ran them.

  scripts/bench/split-report.py DIR      (DIR: results/split, one <cell>.json per cell)

Under icount on one vCPU a task's run time in nanoseconds is the instructions it executed
(interrupts it took included). Classes, by task name:
  submit    the fio tasks (system calls: the block layer and whatever the driver does inline)
  worker    the driver's threads: rust_loop's `rust_loop/K` workers; for loop.c the kworkers
            that ran its work items (their name ends in the workqueue of the last item they
            ran, "kworker/u4:2+loop0": one that names `loopN` at either snapshot)
  backing   kworkers that ran the backing file system's own work: writeback ("flush-MAJ:MIN")
            and XFS ("xfs-log/nullb0", "xfs-conv/..."), by the same name at either snapshot
  softirq   the ksoftirqd threads (softirqs run on an interrupt's exit are in the interrupted task)
  other     every other task but the measuring script; idle: the window's skipped time
  interrupt (KERNEL=irqtime only: interrupt time accounted apart) /proc/stat's irq + softirq
            time, which the tasks' run times then leave out: what runs in interrupt and
            softirq context (the completions of a device that interrupts, SPLIT_NULLB_IRQMODE=2),
            idle or not; in USER_HZ units (10 ms), so give it a few seconds (SPLIT_RUNTIME)
irq_share and softirq_share are /proc/stat's irq and softirq over its busy time. Without
interrupt time accounting they are tick samples (a tick cannot land inside an interrupt, so the
irq share reads 0) and the interrupts' instructions count in the task they interrupted.
Writes DIR/split.json and DIR/split.md. Exit status 1 when no cell could be read.
"""

import glob
import json
import os
import sys

CLASSES = ["submit", "worker", "backing", "softirq", "other", "interrupt"]


def workqueue_of(comm):
    """The workqueue a kworker last ran an item of ("kworker/u4:2+loop0" -> "loop0"; '+': running
    it now), or None. Pool names ("u4:2", "0:0H") hold neither '+' nor '-'."""
    if not comm.startswith("kworker/"):
        return None
    rest = comm[len("kworker/"):]
    cut = [i for i in (rest.find("+"), rest.find("-")) if i >= 0]
    return rest[min(cut) + 1:] if cut else None


def classify(comm, comm_before, target):
    if comm == "fio":
        return "submit"
    if comm.startswith("rust_loop/"):
        return "worker"
    if comm.startswith("ksoftirqd/"):
        return "softirq"
    wqs = [w for w in (workqueue_of(comm), workqueue_of(comm_before)) if w]
    if target == "loop" and any(w.startswith("loop") and w[4:].isdigit() for w in wqs):
        return "worker"
    if any(w.startswith("flush-") or w.startswith("xfs") for w in wqs):
        return "backing"
    return "other"


def cell_split(path):
    m = json.load(open(path))
    b, a = m["before"], m["after"]
    ios = a["ios"] - b["ios"]
    ns = dict.fromkeys(CLASSES, 0)
    workers, others = {}, {}
    for tid, (comm, run) in a["threads"].items():
        if tid == m["measuring_tid"]:
            continue
        d = run - b["threads"].get(tid, [comm, 0])[1]
        if d <= 0:
            continue
        c = classify(comm, b["threads"].get(tid, [comm, 0])[0], m["target"])
        ns[c] += d
        if c == "worker":
            workers[tid] = workers.get(tid, 0) + d
        elif c == "other":
            name = comm.split("/")[0]
            others[name] = others.get(name, 0) + d
    window = (a["monotonic_ns"] - b["monotonic_ns"]) * m.get("cpus", 1)
    j0, j1 = b["cpu_jiffies"], a["cpu_jiffies"]
    dj = [y - x for x, y in zip(j0, j1)]
    busy_ticks = sum(dj[:8]) - dj[3] - dj[4]
    if m.get("irq_time_accounting"):
        ns["interrupt"] = (dj[5] + dj[6]) * 10**9 // m.get("hz", 100)
    busy = sum(ns.values())
    res = {k: m[k] for k in ("target", "mode", "workload", "cpus") if k in m}
    res.update({
        "nowait_max_depth": m.get("nowait_max_depth"),
        "nr_hw_queues": m.get("nr_hw_queues"),
        "ios": ios,
        "window_ns": window,
        "instr_per_io": {c: ns[c] / ios for c in CLASSES},
        "total_per_io": busy / ios,
        # Guest time per I/O: what 1e9 / IOPS gives (busy plus skipped idle time).
        "guest_ns_per_io": window / ios,
        "busy_share": busy / window if window else 0,
        "worker_threads": len(workers),
        "busiest_worker_per_io": max(workers.values(), default=0) / ios,
        "irq_share": dj[5] / busy_ticks if busy_ticks > 0 else 0,
        "softirq_share": dj[6] / busy_ticks if busy_ticks > 0 else 0,
        "nullb_irqmode": m.get("nullb_irqmode", 0),
        "dirty_background_bytes": m.get("dirty_background_bytes", 0),
        "irq_time_accounting": bool(m.get("irq_time_accounting")),
        "other_top": sorted(((k, v / ios) for k, v in others.items()), key=lambda kv: -kv[1])[:4],
        "exact": m.get("cpus", 1) == 1,
    })
    return res


def fmt(x):
    return f"{x:,.0f}"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "results/split"
    cells, errors = [], []
    for path in sorted(glob.glob(f"{root}/*.json")):
        if os.path.basename(path) == "split.json":
            continue
        try:
            cells.append(cell_split(path))
        except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
            errors.append(f"{os.path.basename(path)}: {e!r}")
    order = {t: i for i, t in enumerate(["raw", "loop", "rust_loop", "rust_loop_inline",
                                          "rust_loop_worker", "rust_loop_mq2"])}
    wls = ["psync-randread-4k", "randread-4k-qd32", "randwrite-4k-qd32", "seqread-1m-qd8",
           "seqwrite-1m-qd8", "rw-4k-qd16-12jobs"]
    cells.sort(key=lambda c: (c["mode"] != "dio", wls.index(c["workload"]) if c["workload"] in wls else 9,
                              order.get(c["target"], 9)))
    with open(f"{root}/split.json", "w") as f:
        json.dump({"cells": cells, "errors": errors}, f, indent=1)
    cpus = sorted({c.get("cpus") for c in cells}, key=str)
    L = [f"Instructions per I/O by the thread that ran them (`make split`: icount, "
         f"{'/'.join(str(c) for c in cpus)} vCPU{'' if cpus == [1] else 's: run time, not instructions'}). "
         "submit: the fio tasks; workers: the driver's threads (all; the busiest one); "
         "backing: the backing file system's kworkers (writeback, XFS); "
         "softirq: ksoftirqd; other: other tasks; interrupt: interrupt and softirq context "
         "(KERNEL=irqtime only); busy: the window's share not idle; "
         "irq / softirq: shares of busy ticks in interrupts and in softirqs (estimates, inside "
         "the columns before); null_blk irqmode "
         f"{'/'.join(sorted({str(c['nullb_irqmode']) for c in cells}))}; buffered cells' "
         "background writeback from "
         f"{'/'.join(sorted({str(c['dirty_background_bytes'] >> 20) + ' MiB' if c['dirty_background_bytes'] else 'a tenth of memory' for c in cells if c['mode'] == 'buffered'})) or '-'}.", "",
         "| mode | workload | target | I/Os | total | submit | workers | busiest worker | threads "
         "| backing | softirq | other | interrupt | busy | irq / softirq |",
         "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for c in cells:
        i = c["instr_per_io"]
        L.append(f"| {c['mode']} | {c['workload']} | {c['target']} | {c['ios']:,} | {fmt(c['total_per_io'])} "
                 f"| {fmt(i['submit'])} | {fmt(i['worker'])} | {fmt(c['busiest_worker_per_io'])} "
                 f"| {c['worker_threads']} | {fmt(i['backing'])} | {fmt(i['softirq'])} | {fmt(i['other'])} "
                 f"| {fmt(i['interrupt']) if c['irq_time_accounting'] else '–'} "
                 f"| {c['busy_share']:.2f} | {c['irq_share']:.2f} / {c['softirq_share']:.2f} |")
    if errors:
        L += ["", "Cells that could not be read:"] + [f"- {e}" for e in errors]
    with open(f"{root}/split.md", "w") as f:
        f.write("\n".join(L) + "\n")
    sys.exit(0 if cells else 1)


if __name__ == "__main__":
    main()
