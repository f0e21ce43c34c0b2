#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest half of scripts/bench/profile.sh (runs in the instruction-counted VM as root).

Sets up the bench's null_blk backing (guest-bench.py's own functions), attaches the driver,
and runs one workload under `perf record -e cpu-clock -a`; writes the reports to PROFILE_OUT.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guest_bench_nullb import gb  # noqa: E402

DRIVER = os.environ["PROFILE_DRIVER"]
MODE = os.environ["PROFILE_MODE"]
WL = os.environ["PROFILE_WORKLOAD"]
RUNTIME = int(os.environ.get("PROFILE_RUNTIME", "2"))
FREQ = int(os.environ.get("PROFILE_FREQ", "20000"))
CALLGRAPH = os.environ.get("PROFILE_CALLGRAPH", "0") == "1"
OUT = os.environ["PROFILE_OUT"]


def main():
    if WL not in gb.WORKLOADS:
        sys.exit(f"unknown workload {WL}; one of {', '.join(gb.WORKLOADS)}")
    files = gb.setup_backings()
    drv = {"raw": gb.Raw(), "loop": gb.Loop("loop"), "rust_loop": gb.Loop("rust_loop"),
           "rust_loop_mq2": gb.Loop("rust_loop", 2)}[DRIVER]
    drv.load()
    dev, info = drv.attach(files["nullb"], MODE)
    gb.log(f"{DRIVER} {MODE} {WL} on {dev} {info}: perf record -e cpu-clock -F {FREQ} -a")
    gb.RUNTIME = RUNTIME
    job = gb.fio_jobfile(dev, [WL], files["nullb"], DRIVER == "raw")
    job = "\n".join(l for l in job.splitlines() if not l.startswith("exec_")) + "\n"
    gb.write(f"{OUT}/job.fio", job)
    gb.drop_file_cache(files["nullb"])
    # perf cannot write its data over 9p (EFAULT): record in the guest's tmpfs, copy afterwards.
    data = f"{gb.WORK}/perf.data"
    r = subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", str(FREQ), "-a", "-o", data]
                       + (["-g"] if CALLGRAPH else []) + ["--", "fio", "--output-format=json", f"{OUT}/job.fio"],
                       text=True, capture_output=True)
    out = r.stdout
    if r.returncode != 0 or "{" not in out:
        sys.exit(f"perf/fio failed ({r.returncode}): {r.stderr[-600:]}")
    fio = json.loads(out[out.index("{"):])
    gb.write(f"{OUT}/fio.json", json.dumps(fio, indent=1))
    j = fio["jobs"][0]
    iops = j["read"]["iops"] + j["write"]["iops"]
    head = (f"# {DRIVER} {MODE} {WL}: {iops:,.0f} IOPS = {1e9 / iops:,.0f} instructions per I/O "
            f"(icount); samples: cpu-clock at {FREQ} Hz of guest time, whole guest\n")
    for name, sort in (("report.txt", "sym"), ("by-dso.txt", "dso"), ("by-thread.txt", "comm,sym")):
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", sort,
                              "--percent-limit", "0.2"], text=True, capture_output=True)
        gb.write(f"{OUT}/{name}", head + rep.stdout + (rep.stderr[-400:] if rep.returncode else ""))
    if CALLGRAPH:
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "sym",
                              "-G", "--percent-limit", "1"], text=True, capture_output=True)
        gb.write(f"{OUT}/callers.txt", head + rep.stdout)
    shutil.copy(data, f"{OUT}/perf.data")
    # rust_loop's knobs (sysfs) and counters (debugfs).
    name = os.path.basename(dev)
    if os.path.isdir(f"/sys/block/{name}/rust_loop"):
        subprocess.run(["mount", "-t", "debugfs", "debugfs", "/sys/kernel/debug"], capture_output=True)
        gb.write(f"{OUT}/counters.txt", "".join(
            f"{n} {gb.read(os.path.join(sd, n), '?')}\n"
            for sd in (f"/sys/block/{name}/rust_loop", f"/sys/kernel/debug/rust_loop/{name}")
            if os.path.isdir(sd) for n in sorted(os.listdir(sd))))
    drv.detach(dev)
    gb.log(f"done: {head.strip()}")


if __name__ == "__main__":
    main()
