#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The report of scripts/bench/insn-profile.sh: the guest kernel's instructions per I/O, by function.

  scripts/bench/insn-report.py DIR [--top N]

Reads DIR/<driver>.json, the plugin's two snapshots around each driver's fio run and the
driver's kallsyms; writes DIR/report.md: per driver the kernel's instructions per I/O and its
module's functions; then each driver against the first one (INSN_DRIVERS' order), the functions
that differ most. Exact counts (every executed block's instructions), kernel only: fio's own
user-space instructions and the guest's idle are not in them. A block is charged to the
function it starts in.
"""

import argparse
import bisect
import collections
import json
import os
import re
import subprocess


def symbols(path):
    syms = []
    for line in open(path):
        p = line.split()
        if len(p) < 3 or p[1] not in "tTwW":
            continue
        a = int(p[0], 16)
        if a:
            syms.append((a, p[2] + (" " + p[3] if len(p) > 3 else "")))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def counts(path):
    m = collections.Counter()
    for line in open(path):
        va, n, e = line.split()
        m[(int(va, 16), int(n))] += int(e)
    return m


def demangle(names):
    """{name: readable name}: Rust symbols through c++filt (binutils reads Rust's v0 mangling),
    without the crate's hash and module path prefix."""
    rust = sorted({n.split(" ")[0] for n in names if n.startswith("_R")})
    out = {}
    try:
        r = subprocess.run(["c++filt"], input="\n".join(rust), text=True, capture_output=True,
                           check=True)
        plain = dict(zip(rust, r.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        plain = {}
    for n in names:
        sym, _, mod = n.partition(" ")
        readable = re.sub(r"rust_loop\[[0-9a-f]+\]::(rust_loop::)?", "", plain.get(sym, sym))
        out[n] = readable + (" " + mod if mod else "")
    return out


def per_io(d, drv):
    meta = json.load(open(f"{d}/{drv}.json"))
    addrs, names = symbols(f"{d}/kallsyms-{drv}")
    a, b = counts(f"{d}/{meta['before']}"), counts(f"{d}/{meta['after']}")
    out = collections.Counter()
    for (va, n), e in b.items():
        de = e - a.get((va, n), 0)
        if de > 0:
            i = bisect.bisect_right(addrs, va) - 1
            out[names[i] if i >= 0 else "?"] += de * n
    readable = demangle(out)
    return meta, {readable[k]: v / meta["ios"] for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    drivers = [x for x in os.environ.get("INSN_DRIVERS", "").split(",") if x] or sorted(
        f[:-5] for f in os.listdir(args.dir) if f.endswith(".json"))
    res = {}
    lines = ["# Kernel instructions per I/O, by function (`make insn-profile`)", ""]
    for drv in drivers:
        meta, res[drv] = per_io(args.dir, drv)
        total = sum(res[drv].values())
        mod = {k: v for k, v in res[drv].items() if k.endswith("[loop]") or k.endswith("[rust_loop]")}
        lines += [f"## {drv} ({meta['info']}): {meta['ios']:,} I/Os, {total:,.0f} kernel instructions "
                  f"per I/O; its module's code {sum(mod.values()):,.0f}", "",
                  "| function | instructions per I/O |", "|---|--:|"]
        lines += [f"| `{k}` | {v:,.1f} |" for k, v in sorted(mod.items(), key=lambda x: -x[1]) if v >= 0.5]
        lines.append("")
    base = drivers[0]
    for other in drivers[1:]:
        diff = sum(res[other].values()) - sum(res[base].values())
        lines += [f"## {other} against {base}: {diff:+,.0f} instructions per I/O", "",
                  f"| function | {base} | {other} | difference |", "|---|--:|--:|--:|"]
        keys = set(res[base]) | set(res[other])
        for k in sorted(keys, key=lambda k: -abs(res[other].get(k, 0) - res[base].get(k, 0)))[:args.top]:
            x, y = res[base].get(k, 0), res[other].get(k, 0)
            lines.append(f"| `{k}` | {x:,.1f} | {y:,.1f} | {y - x:+,.1f} |")
        lines.append("")
    text = "\n".join(lines)
    open(f"{args.dir}/report.md", "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
