#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Host half of scripts/bench/bench.sh: turns results/bench/bench.json (every sample, written by
scripts/guest/guest-bench.py in the VM) into medians, ratios and PASS/MISS verdicts.

    bench-report.py results/bench/bench.json [--vm-seconds N] [--gate F]

Writes, beside the JSON: summary.md (tables of medians and ratios, the verdicts) and ratios.png
(bar chart of the ratios, if matplotlib is importable); adds "medians", "ratios", "targets" to the
JSON. Prints the verdicts. Exits 0 on a MISS: the verdicts are information, not a gate.

An instruction-counted run (meta "clock": "icount", make bench BENCH_CLOCK=icount) adds the cost
table: instructions per I/O (1e9 / IOPS), the overhead of each driver over the raw file, and
rust_loop's overhead as a fraction of the C loop's. With --gate F (make perfcheck) the report
exits 3 when, in any cell, rust_loop's (or rust_loop 2 hwq's) overhead exceeds F x the C loop's
by more than the noise floor: 1 % of the C loop's instructions per I/O, or, when larger, the
cell's own spread over rounds (max - min instructions per I/O, the mean of the two drivers').
"""

import argparse
import json
import os
import statistics
import sys

DRIVERS = ["raw", "loop", "rust_loop", "rust_loop_mq2", "rust_loop_b", "ublk"]
LABEL = {"raw": "raw file (O_DIRECT)", "loop": "C loop", "rust_loop": "rust_loop",
         "rust_loop_mq2": "rust_loop 2 hw queues", "rust_loop_b": "rust_loop B",
         "ublk": "ublk (rublk)"}
METRICS = ["iops", "bw_mib_s", "cpu_us_per_io", "ctxt_per_io", "lat_mean_us", "clat_p99_us"]
RATIOS = [("rust_loop/loop", "loop"), ("rust_loop/ublk", "ublk"), ("rust_loop/raw", "raw")]

# Thresholds for the page-cache targets, as a fraction of the data read.
PC_DIO_MAX = 0.05
PC_BUF_RANGE = (0.90, 1.10)
PC_DONTCACHE_MAX = 0.10  # rust_loop's dontcache growth / its normal buffered growth (issue 17)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, nd=0):
    if v is None:
        return "–"
    if nd == 0:
        return f"{v:,.0f}"
    return f"{v:.{nd}f}"


def ab_table(backings, modes, workloads, by_round, meta, icount):
    """rust_loop (A) against rust_loop_b (B), cell by cell: per-round values (instructions per
    I/O under icount, else IOPS), medians, B/A of the medians and per round. [] without B."""
    def value(driver, b, mode, wl, rnd):
        s = by_round.get((driver, b, mode, wl, rnd))
        if not s or not s.get("iops"):
            return None
        return 1e9 / s["iops"] if icount else s["iops"]

    out = []
    for b in backings:
        for mode in modes:
            for wl in workloads:
                a_s, b_s, pairs = [], [], []
                for rnd in range(1, meta["rounds"] + 1):
                    va, vb = value("rust_loop", b, mode, wl, rnd), value("rust_loop_b", b, mode, wl, rnd)
                    if va is not None:
                        a_s.append(va)
                    if vb is not None:
                        b_s.append(vb)
                    if va and vb:
                        pairs.append(vb / va)
                if not a_s or not b_s:
                    continue
                ma, mb = statistics.median(a_s), statistics.median(b_s)
                out.append({"backing": b, "mode": mode, "workload": wl, "a": a_s, "b": b_s,
                            "a_median": ma, "b_median": mb, "b/a": mb / ma if ma else None,
                            "b/a per round": pairs, "b-a": mb - ma})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--vm-seconds", type=float, default=None)
    ap.add_argument("--host-load", default=None, help="host-load.txt from bench.sh")
    ap.add_argument("--gate", type=float, default=None,
                    help="icount runs: exit 3 if rust_loop's overhead > GATE x the C loop's in a cell")
    ap.add_argument("--gate-exempt", default="",
                    help="comma list of MODE/WORKLOAD cells reported but not gated (known gaps)")
    a = ap.parse_args()
    with open(a.json) as f:
        res = json.load(f)
    meta = res["meta"]
    if a.vm_seconds is not None:
        meta["vm_s"] = a.vm_seconds
    if a.host_load and os.path.exists(a.host_load):
        rows = []
        with open(a.host_load) as f:
            for line in f:
                p = line.split()
                if len(p) == 3:
                    rows.append((float(p[1]), int(p[2])))
        if rows:
            meta["host_load1_mean"] = round(statistics.fmean(r[0] for r in rows), 2)
            meta["host_load1_max"] = max(r[0] for r in rows)
            meta["host_qemu_max"] = max(r[1] for r in rows)
    out_dir = os.path.dirname(os.path.abspath(a.json))
    samples = res["samples"]
    workloads = meta["workloads"]
    # dontcache (rust_loop's buffered mode with cache_mode=dontcache) has no C loop counterpart:
    # it gets its own table instead of rust/C ratios.
    modes = [m for m in meta["modes"] if m != "dontcache"]
    dontcache = "dontcache" in meta["modes"]
    backings = [b for b in meta["backings"] if any(s["backing"] == b for s in samples)]

    # medians[(driver, backing, mode, workload)] = {metric: median, "n": samples}
    groups = {}
    for s in samples:
        groups.setdefault((s["driver"], s["backing"], s["mode"], s["workload"]), []).append(s)
    medians = {}
    spreads = []
    for k, ss in groups.items():
        m = {x: med([s.get(x) for s in ss]) for x in METRICS}
        m["n"] = len(ss)
        iops = [s["iops"] for s in ss if s.get("iops")]
        if len(iops) > 1 and m["iops"]:
            m["iops_min"], m["iops_max"] = min(iops), max(iops)
            m["iops_spread"] = (max(iops) - min(iops)) / m["iops"]
            spreads.append(m["iops_spread"])
        m["dio"] = ss[0].get("dev_dio")
        medians[k] = m

    def get(driver, backing, mode, wl, metric="iops"):
        if driver == "raw":
            mode = "dio"  # the raw file is always read with O_DIRECT: the limit for both modes
        m = medians.get((driver, backing, mode, wl))
        return m.get(metric) if m else None

    def ratio(backing, mode, wl, other, metric="iops"):
        r, o = get("rust_loop", backing, mode, wl, metric), get(other, backing, mode, wl, metric)
        return r / o if r is not None and o else None

    by_round = {(s["driver"], s["backing"], s["mode"], s["workload"], s["round"]): s for s in samples}

    def round_ratios(backing, mode, wl, other):
        """rust_loop / other within each round (the two ran minutes apart at most)."""
        out = []
        for rnd in range(1, meta["rounds"] + 1):
            r = by_round.get(("rust_loop", backing, mode, wl, rnd))
            o = by_round.get((other, backing, "dio" if other == "raw" else mode, wl, rnd))
            if r and o and o.get("iops"):
                out.append(r["iops"] / o["iops"])
        return out

    def detail(r, other_label, rr):
        d = f"{fmt(r, 2)} x {other_label}"
        if len(rr) > 1:
            d += " (per round: " + ", ".join(f"{x:.2f}" for x in rr) + ")"
        return d

    ratios = {}
    for b in backings:
        for mode in modes:
            for wl in workloads:
                ratios[f"{b}/{mode}/{wl}"] = {n: ratio(b, mode, wl, o) for n, o in RATIOS}
                ratios[f"{b}/{mode}/{wl}"]["rust_loop/loop per round"] = round_ratios(b, mode, wl, "loop")

    # --- targets --------------------------------------------------------------------------------
    targets = []

    def target(name, ok, detail):
        verdict = "MISS (no data)" if ok is None else ("PASS" if ok else "MISS")
        targets.append({"target": name, "verdict": verdict, "detail": detail})

    icount = meta.get("clock") == "icount"
    cost = {}  # "backing/mode/workload" -> instructions per I/O, overheads and their ratios
    gate_fail = []
    gate_exempt = []  # cells over the gate that --gate-exempt lets pass (reported)
    exempt = {x.strip() for x in a.gate_exempt.split(",") if x.strip()}
    if icount:
        def ipio(d, b, mode, wl):
            v = get(d, b, mode, wl)
            return 1e9 / v if v else None

        def ipio_spread(d, b, mode, wl):
            """Max - min instructions per I/O of a driver's cell over the rounds: how far its
            median can move between runs of the same code (the 12-job cell moves by a few
            percent of its total, several times the gate's margin on its overhead)."""
            v = [1e9 / s["iops"] for rnd in range(1, meta["rounds"] + 1)
                 if (s := by_round.get((d, b, mode, wl, rnd))) and s.get("iops")]
            return max(v) - min(v) if len(v) > 1 else 0.0

        for b in backings:
            for mode in modes:
                for wl in workloads:
                    raw = ipio("raw", b, mode, wl)
                    c = {d: ipio(d, b, mode, wl) for d in ("raw", "loop", "rust_loop", "rust_loop_mq2")}
                    ovh = {d: (c[d] - raw if c[d] is not None and raw is not None else None)
                           for d in ("loop", "rust_loop", "rust_loop_mq2")}
                    e = {"ipio": c, "overhead": ovh}
                    for d in ("rust_loop", "rust_loop_mq2"):
                        o, oc = ovh[d], ovh["loop"]
                        e[f"{d}/loop overhead"] = o / oc if o is not None and oc and oc > 0 else None
                        if a.gate is not None and o is not None and oc is not None and c["loop"]:
                            excess = o - a.gate * max(oc, 0.0)
                            floor = max(0.01 * c["loop"], (ipio_spread(d, b, mode, wl)
                                                           + ipio_spread("loop", b, mode, wl)) / 2)
                            e[f"{d} gate floor"] = floor
                            if excess > floor:
                                msg = (f"{b}/{mode}/{wl} {LABEL[d]}: overhead {o:,.0f} vs C loop "
                                       f"{oc:,.0f} instructions/I/O (over {a.gate:g} x by "
                                       f"{excess:,.0f}, noise floor {floor:,.0f})")
                                (gate_exempt if f"{mode}/{wl}" in exempt else gate_fail).append(msg)
                    cost[f"{b}/{mode}/{wl}"] = e
        for d in ("rust_loop", "rust_loop_mq2"):
            dio = [(k, v[f"{d}/loop overhead"]) for k, v in cost.items()
                   if "/dio/" in k and v["ipio"][d] is not None]
            if dio:
                miss = [(k, r) for k, r in dio if r is None or r > 0.5]
                target(f"icount: every dio cell, {LABEL[d]} overhead <= 0.5 x C loop's", not miss,
                       f"{len(dio) - len(miss)}/{len(dio)} cells"
                       + ("; above: " + ", ".join(f"{k} {fmt(r, 2)}" for k, r in miss) if miss else ""))
        buf = [(k, ratio(*k.split("/"), "loop")) for k in cost if "/buffered/" in k]
        if buf:
            miss = [(k, r) for k, r in buf if r is None or r < 1.0]
            target("icount: every buffered cell, rust_loop IOPS >= 1.0 x C loop", not miss,
                   f"{len(buf) - len(miss)}/{len(buf)} cells"
                   + ("; below: " + ", ".join(f"{k} {fmt(r, 2)}" for k, r in miss) if miss else ""))
        if a.gate is not None:
            target(f"perfcheck: no cell with rust_loop overhead > {a.gate:g} x C loop's (+ noise floor)",
                   not gate_fail, "; ".join(gate_fail) or "all cells within")
            if exempt:
                target(f"perfcheck, cells not gated ({', '.join(sorted(exempt))}): within the gate",
                       not gate_exempt, "; ".join(gate_exempt) or "within")

    for b in backings:
        r = ratio(b, "dio", "randread-4k-qd32", "raw")
        target(f"{b}: dio randread 4k QD32, rust_loop >= 0.8 x raw", None if r is None else r >= 0.8,
               detail(r, "raw", round_ratios(b, "dio", "randread-4k-qd32", "raw")))
    cells_ok, cells_miss, cells_na = [], [], []
    for b in backings:
        for mode in modes:
            for wl in workloads:
                r = ratio(b, mode, wl, "loop")
                name = f"{b}/{mode}/{wl}"
                (cells_na if r is None else cells_ok if r >= 1.0 else cells_miss).append((name, r))
    n_cells = len(cells_ok) + len(cells_miss) + len(cells_na)
    target("every cell: rust_loop >= 1.0 x C loop (same mode)",
           None if not (cells_ok or cells_miss) else not cells_miss and not cells_na,
           f"{len(cells_ok)}/{n_cells} cells >= 1.0"
           + (f"; below: " + ", ".join(f"{n} {fmt(r, 2)}" for n, r in cells_miss) if cells_miss else "")
           + (f"; no data: " + ", ".join(n for n, _ in cells_na) if cells_na else ""))
    for b in backings:
        r = ratio(b, "dio", "rw-4k-qd16-12jobs", "loop")
        target(f"{b}: dio 12-job rw 4k QD16, rust_loop >= 1.3 x C loop",
               None if r is None else r >= 1.3,
               detail(r, "C loop", round_ratios(b, "dio", "rw-4k-qd16-12jobs", "loop")))
    # nr_hw_queues 2 vs 1 (the multi-queue issue's target).
    for b in backings:
        wl = "rw-4k-qd16-12jobs"
        q2, q1, raw = (get("rust_loop_mq2", b, "dio", wl), get("rust_loop", b, "dio", wl),
                       get("raw", b, "dio", wl))
        r1 = q2 / q1 if q2 is not None and q1 else None
        r2 = q2 / raw if q2 is not None and raw else None
        target(f"{b}: dio 12-job rw 4k QD16, 2 hw queues >= 1.1 x 1 queue",
               None if r1 is None else r1 >= 1.1, f"{fmt(r1, 2)} x 1 queue")
        target(f"{b}: dio 12-job rw 4k QD16, 2 hw queues >= 0.9 x raw",
               None if r2 is None else r2 >= 0.9, f"{fmt(r2, 2)} x raw")
    # A run with BENCH_PAGECACHE_MB=0 read nothing (older runs recorded such empty reads).
    pcs = {(p["driver"], p["mode"]): p for p in res.get("pagecache", []) if p.get("read_mib")}
    p = pcs.get(("rust_loop", "dio"))
    frac = p["growth_mib"] / p["read_mib"] if p else None
    target(f"dio page-cache growth ~ 0 (rust_loop, <= {PC_DIO_MAX:.0%} of the data read)",
           None if p is None else frac <= PC_DIO_MAX,
           f"+{fmt(p['growth_mib'], 1)} MiB for {p['read_mib']} MiB read" if p else "not measured")
    p = pcs.get(("rust_loop", "buffered"))
    frac = p["growth_mib"] / p["read_mib"] if p else None
    target(f"buffered page-cache growth ~ data read (rust_loop, {PC_BUF_RANGE[0]:.0%}..{PC_BUF_RANGE[1]:.0%})",
           None if p is None else PC_BUF_RANGE[0] <= frac <= PC_BUF_RANGE[1],
           f"+{fmt(p['growth_mib'], 1)} MiB for {p['read_mib']} MiB read" if p else "not measured")

    pb, pd = pcs.get(("rust_loop", "buffered")), pcs.get(("rust_loop", "dontcache"))
    for what, key in (("read", "growth_mib"), ("write", "write_growth_mib")):
        ok = detail_pc = None
        if pb and pd and pb.get(key) is not None and pd.get(key) is not None:
            ok = pd[key] <= PC_DONTCACHE_MAX * max(pb[key], 0.0)
            detail_pc = f"+{pd[key]:.1f} MiB vs buffered +{pb[key]:.1f} MiB"
        if dontcache or ok is not None:
            target(f"dontcache page-cache growth after a {what} <= {PC_DONTCACHE_MAX:.0%} of buffered's "
                   "(rust_loop)", ok, detail_pc or "not measured")

    # --- markdown -------------------------------------------------------------------------------
    L = []
    L.append("# rust_loop benchmark results\n")
    L.append(f"- taken {meta['date']} on kernel {meta['kernel']}, {meta.get('accel', '?')}, "
             f"{meta['cpus']} vCPUs ({meta['cpu_model']}), {meta['mem_total_kib'] // 1024} MiB guest RAM; "
             f"git {meta.get('git') or '?'}")
    where = {"disk": "on the virtio disk (`disk`)", "nullb": "on a memory-backed null_blk (`nullb`)"}
    L.append(f"- {meta['rounds']} round(s) of {meta['runtime_s']:g} s cells, drivers alternating within "
             f"each backing/mode group, medians over rounds; {meta['file_mib']} MiB preconditioned backing file on XFS "
             + " and ".join(where[b] for b in backings if b in where))
    if meta.get("clock") == "icount":
        L.append("- clock: **icount** (QEMU `-icount shift=0,sleep=off`): one nanosecond of guest time per guest "
                 "instruction, idle time skipped, so IOPS = 1e9 / instructions per I/O of the whole guest; the host's "
                 "load does not move these numbers (the vCPUs run in turn: no overlap is modelled)")
    L.append(f"- {meta['fio']}; rublk: {meta.get('rublk') or 'not available'}"
             + (f" (options {' '.join(meta['ublk_opts'])})" if meta.get("ublk_opts") else ""))
    t = [f"setup {meta.get('setup_s', '?')} s", f"cells {meta.get('bench_s', '?')} s"]
    if meta.get("vm_s") is not None:
        t.append(f"VM total {meta['vm_s']:.0f} s")
    L.append(f"- time: {', '.join(t)}")
    if meta.get("host_load1_mean") is not None:
        L.append(f"- host load during the run: 1-min load average mean {meta['host_load1_mean']}, "
                 f"max {meta['host_load1_max']} on {meta['cpus']} cores; up to "
                 f"{meta['host_qemu_max']} qemu processes (this VM included)")
    if spreads:
        meta["iops_spread_median"] = statistics.median(spreads)
        meta["iops_spread_max"] = max(spreads)
        L.append(f"- run-to-run noise: (max - min) / median IOPS of a cell across rounds is "
                 f"{statistics.median(spreads):.0%} in the median cell, {max(spreads):.0%} at worst")
    if meta.get("clock") != "icount":
        L.append("- absolute numbers under TCG mean little: read the ratios.")
    L.append("- the raw file is always read with O_DIRECT, so `rust_loop/raw` in buffered rows compares "
             "against the dio limit.")
    for n in res.get("notes", []):
        L.append(f"- NOTE: {n}")
    for e in res.get("errors", []):
        L.append(f"- ERROR: {e}")
    L.append("")
    L.append("## Targets\n")
    L.append("| target | verdict | measured |")
    L.append("|---|---|---|")
    for t in targets:
        L.append(f"| {t['target']} | **{t['verdict']}** | {t['detail']} |")
    L.append("")
    cost_at = len(L)
    for b in backings if icount else []:
        L.append(f"## Instructions per I/O, backing `{b}` (instruction-counted: 1e9 / IOPS; median)\n")
        L.append("Overhead = a driver's instructions per I/O minus the raw file's (O_DIRECT). "
                 "`rust/C ovh` = rust_loop's overhead / the C loop's: below 1.0, rust_loop spends "
                 "less CPU per I/O than loop.c on top of the file.\n")
        L.append("| mode | workload | raw | C loop | rust_loop | rust 2 hwq | C ovh | rust ovh | "
                 "rust 2 hwq ovh | rust/C ovh | rust 2 hwq/C ovh | rust/C IOPS |")
        L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for mode in modes:
            for wl in workloads:
                e = cost[f"{b}/{mode}/{wl}"]
                ip, ov = e["ipio"], e["overhead"]
                L.append(f"| {mode} | {wl} | {fmt(ip['raw'])} | {fmt(ip['loop'])} | {fmt(ip['rust_loop'])} | "
                         f"{fmt(ip['rust_loop_mq2'])} | {fmt(ov['loop'])} | {fmt(ov['rust_loop'])} | "
                         f"{fmt(ov['rust_loop_mq2'])} | {fmt(e['rust_loop/loop overhead'], 2)} | "
                         f"{fmt(e['rust_loop_mq2/loop overhead'], 2)} | "
                         f"{fmt(ratios[f'{b}/{mode}/{wl}']['rust_loop/loop'], 2)} |")
        L.append("")
    cost_md = L[cost_at:]
    ab = ab_table(backings, modes + (["dontcache"] if dontcache else []), workloads, by_round,
                  meta, icount)
    if ab:
        b_what = ", ".join(x for x in (meta.get("b_ko") and f"`{meta['b_ko']}`",
                                       meta.get("b_params") and f"parameters `{meta['b_params']}`") if x)
        L.append(f"## A/B: rust_loop (A) against rust_loop B ({b_what}), same boot\n")
        unit = "instructions per I/O (1e9 / IOPS)" if icount else "IOPS"
        L.append(f"Per round, {unit}; `B/A` of the medians, and per round (the two ran in the same "
                 "round, minutes apart at most)." + (" `B-A` in instructions per I/O." if icount else "")
                 + "\n")
        L.append("| backing | mode | workload | A per round | B per round | A median | B median | B/A | "
                 "B/A per round |" + (" B-A |" if icount else ""))
        L.append("|---|---|---|---|---|--:|--:|--:|---|" + ("--:|" if icount else ""))
        for e in ab:
            L.append(f"| {e['backing']} | {e['mode']} | {e['workload']} | "
                     + ", ".join(fmt(x) for x in e["a"]) + " | " + ", ".join(fmt(x) for x in e["b"])
                     + f" | {fmt(e['a_median'])} | {fmt(e['b_median'])} | {fmt(e['b/a'], 3)} | "
                     + ", ".join(f"{x:.3f}" for x in e["b/a per round"]) + " |"
                     + (f" {e['b-a']:+,.0f} |" if icount else ""))
        L.append("")
        res["ab"] = ab
    for b in backings if dontcache else []:
        L.append(f"## rust_loop cache modes, backing `{b}` (IOPS, median; 1M workloads: MiB/s)\n")
        L.append("`dontcache`: buffered mode with `cache_mode=dontcache` (backing I/O with "
                 "`IOCB_DONTCACHE`); the C loop's buffered mode for comparison.\n")
        L.append("| workload | C loop buffered | rust_loop buffered | rust_loop dontcache | rust_loop dio | "
                 "dontcache / buffered |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for wl in workloads:
            rb, rd = get("rust_loop", b, "buffered", wl), get("rust_loop", b, "dontcache", wl)
            L.append(f"| {wl} | {fmt(get('loop', b, 'buffered', wl))} | {fmt(rb)} | {fmt(rd)} | "
                     f"{fmt(get('rust_loop', b, 'dio', wl))} | "
                     f"{fmt(rd / rb if rd is not None and rb else None, 2)} |")
        L.append("")
    for b in backings:
        L.append(f"## IOPS, backing `{b}` (median; 1M workloads: IOPS = MiB/s)\n")
        L.append("| mode | workload | raw | C loop | rust_loop | rust_loop 2 hwq | ublk | rust/C loop "
                 "| rust/ublk | rust/raw | rust/C loop per round |")
        L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for mode in modes:
            for wl in workloads:
                r = ratios[f"{b}/{mode}/{wl}"]
                L.append(f"| {mode} | {wl} | {fmt(get('raw', b, mode, wl))} | "
                         f"{fmt(get('loop', b, mode, wl))} | {fmt(get('rust_loop', b, mode, wl))} | "
                         f"{fmt(get('rust_loop_mq2', b, mode, wl))} | "
                         f"{fmt(get('ublk', b, mode, wl))} | {fmt(r['rust_loop/loop'], 2)} | "
                         f"{fmt(r['rust_loop/ublk'], 2)} | {fmt(r['rust_loop/raw'], 2)} | "
                         + (" ".join(f"{x:.2f}" for x in round_ratios(b, mode, wl, "loop")) or "–") + " |")
        L.append("")
        L.append(f"### CPU µs per I/O and context switches per I/O, backing `{b}` (median, whole guest)\n")
        L.append("| mode | workload | " + " | ".join(f"{LABEL[d]} CPU" for d in DRIVERS) + " | "
                 + " | ".join(f"{LABEL[d]} ctx" for d in DRIVERS) + " |")
        L.append("|---|---|" + "--:|" * (2 * len(DRIVERS)))
        for mode in modes:
            for wl in workloads:
                L.append(f"| {mode} | {wl} | "
                         + " | ".join(fmt(get(d, b, mode, wl, 'cpu_us_per_io'), 1) for d in DRIVERS) + " | "
                         + " | ".join(fmt(get(d, b, mode, wl, 'ctxt_per_io'), 2) for d in DRIVERS) + " |")
        L.append("")
    if pcs:
        L.append(f"## Page-cache growth reading, then writing, {meta['pagecache_read_mib']} MiB with "
                 "O_DIRECT through the device (backing `disk`, caches dropped first)\n")
        L.append("| driver | mode | device dio | read: Cached growth MiB | growth / data read | read time s "
                 "| write: Cached growth MiB | write time s |")
        L.append("|---|---|--:|--:|--:|--:|--:|--:|")
        for d in DRIVERS:
            for mode in ["buffered", "dontcache", "dio"]:
                p = pcs.get((d, mode))
                if p:
                    w = p.get("write_growth_mib")
                    L.append(f"| {LABEL[d]} | {mode} | {p.get('dev_dio')} | {p['growth_mib']:.1f} | "
                             f"{p['growth_mib'] / p['read_mib']:.2f} | {p['secs']:.1f} | "
                             f"{fmt(w, 1)} | {fmt(p.get('write_secs'), 1)} |")
        L.append("")
    L.append("Every sample: `bench.json` (`samples`, `pagecache`); chart: `ratios.png`.")
    md = "\n".join(L) + "\n"
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(md)

    res["medians"] = [{"driver": k[0], "backing": k[1], "mode": k[2], "workload": k[3], **v}
                      for k, v in sorted(medians.items())]
    res["ratios"] = ratios
    res["targets"] = targets
    if icount:
        res["cost"] = cost
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)

    # --- chart ----------------------------------------------------------------------------------
    chart = os.path.join(out_dir, "ratios.png")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench-report: matplotlib not importable, no chart", file=sys.stderr)
        chart = None
    if chart and backings:
        cells = [(mode, wl) for mode in modes for wl in workloads]
        fig, axes = plt.subplots(len(backings), 1, figsize=(max(10, 1.15 * len(cells) + 2), 4.6 * len(backings)),
                                 squeeze=False)
        colors = {"rust_loop/loop": "#1f77b4", "rust_loop/ublk": "#ff7f0e", "rust_loop/raw": "#7f7f7f"}
        names = {"rust_loop/loop": "rust_loop / C loop", "rust_loop/ublk": "rust_loop / ublk (rublk)",
                 "rust_loop/raw": "rust_loop / raw file O_DIRECT"}
        w = 0.27
        for ax, b in zip(axes[:, 0], backings):
            allv = []
            for i, (rn, _) in enumerate(RATIOS):
                xs, ys = [], []
                for j, (mode, wl) in enumerate(cells):
                    v = ratios[f"{b}/{mode}/{wl}"][rn]
                    if v:
                        xs.append(j + (i - 1) * w)
                        ys.append(v)
                        allv.append(v)
                bars = ax.bar(xs, ys, w, label=names[rn], color=colors[rn])
                for x, y in zip(xs, ys):
                    ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.axhline(0.8, color="grey", lw=0.6, ls="--")
            ax.axhline(1.3, color="grey", lw=0.6, ls=":")
            ax.set_yscale("log")
            if allv:
                ax.set_ylim(min(min(allv), 0.5) / 1.6, max(max(allv), 2.0) * 4)
            ax.set_xticks(range(len(cells)))
            ax.set_xticklabels([f"{m}\n{wl}" for m, wl in cells], fontsize=7.5, rotation=30, ha="right")
            ax.set_ylabel("IOPS ratio (log)")
            lo, hi = ax.get_ylim()
            cands = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
            if hi / lo < 30:  # room for the target lines' own labels
                cands += (0.8, 1.3)
            ticks = sorted(t for t in cands if lo <= t <= hi)
            ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_title(f"backing: XFS on {'virtio disk' if b == 'disk' else 'memory-backed null_blk'}",
                         fontsize=10)
            for j in range(1, len(cells)):
                if cells[j][0] != cells[j - 1][0]:
                    ax.axvline(j - 0.5, color="grey", lw=0.5)
            ax.legend(fontsize=8, loc="upper right", ncol=3, framealpha=0.9)
        fig.suptitle(f"rust_loop IOPS ratios (medians of {meta['rounds']} round(s) x {meta['runtime_s']:g} s; "
                     f"{meta.get('accel', '?')}, {meta['cpus']} vCPUs; lines at 0.8, 1.0, 1.3)", fontsize=11)
        fig.tight_layout()
        fig.savefig(chart, dpi=110)

    print()
    print(f"bench: {len(samples)} samples, {len(res.get('errors', []))} errors; medians of "
          f"{meta['rounds']} rounds x {meta['runtime_s']:g}s")
    for n in res.get("notes", []):
        print(f"NOTE: {n}")
    print()
    width = max(len(t["target"]) for t in targets) if targets else 10
    for t in targets:
        print(f"{t['verdict']:14s} {t['target']:{width}s}  {t['detail']}")
    print()
    print(f"wrote {os.path.join(out_dir, 'summary.md')}" + (f", {chart}" if chart else "") + f", {a.json}")
    if icount:
        print()
        print("\n".join(x for x in cost_md if x.startswith("|")))
    if gate_exempt:
        print()
        print("perfcheck: over the gate but not gated (--gate-exempt): " + "; ".join(gate_exempt))
    if gate_fail:
        print()
        print("perfcheck FAIL: " + "; ".join(gate_fail))
        sys.exit(3)


if __name__ == "__main__":
    main()
