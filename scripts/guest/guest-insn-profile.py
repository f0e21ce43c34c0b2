#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest half of scripts/bench/insn-profile.sh (runs in the instruction-counted VM as root).

Sets up the bench's null_blk backing (guest-bench.py's own functions); for each driver of
INSN_DRIVERS attaches it, saves /proc/kallsyms (with the driver's module loaded), and runs the
workload between two snapshots of the plugin's counts (scripts/bench/insn-count.c), which the guest
asks for by entering the kernel's `sysfs(2)` handler; writes <driver>.json (I/Os, snapshots).
"""

import ctypes
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guest_bench_nullb import gb  # noqa: E402

OUT = os.environ["INSN_OUT"]
DRIVERS = os.environ.get("INSN_DRIVERS", "loop,rust_loop").split(",")
MODE = os.environ.get("INSN_MODE", "dio")
WL = os.environ.get("INSN_WORKLOAD", "randread-4k-qd32")
SYS_SYSFS = 139  # x86-64
LIBC = ctypes.CDLL(None, use_errno=True)


def snapshot(n):
    """Has the plugin write snap-N (it does so when the guest enters the trigger)."""
    LIBC.syscall(SYS_SYSFS, 3)
    path = f"{OUT}/snap-{n}"
    for _ in range(300):
        if os.path.exists(path):
            return path
        time.sleep(0.1)
    sys.exit(f"the plugin wrote no {path}: is QEMU running scripts/bench/insn-count.c with dir={OUT}?")


def main():
    if WL not in gb.WORKLOADS:
        sys.exit(f"unknown workload {WL}; one of {', '.join(gb.WORKLOADS)}")
    unknown = [d for d in DRIVERS if d not in ("raw", "loop", "rust_loop", "rust_loop_b")]
    if unknown:
        sys.exit(f"INSN_DRIVERS: unknown {unknown}; raw, loop, rust_loop, rust_loop_b")
    files = gb.setup_backings()
    trigger = next((line.split()[0] for line in open("/proc/kallsyms")
                    if line.split()[2] == "__x64_sys_sysfs"), None)
    if not trigger:
        sys.exit("no __x64_sys_sysfs in /proc/kallsyms")
    gb.write(f"{OUT}/trigger", trigger + "\n")
    # The plugin reads the trigger's address while it translates code: let it translate some.
    for _ in range(20):
        subprocess.run(["true"])
    gb.RUNTIME = int(os.environ.get("INSN_RUNTIME", "6"))
    n = 0
    for d in DRIVERS:
        drv = {"raw": gb.Raw(), "loop": gb.Loop("loop"), "rust_loop": gb.Loop("rust_loop"),
               "rust_loop_b": gb.Loop("rust_loop", ko=gb.KO_B, params_env="BENCH_B_PARAMS")}[d]
        drv.load()
        dev, info = drv.attach(files["nullb"], MODE)
        subprocess.run(f"cat /proc/kallsyms > {OUT}/kallsyms-{d}", shell=True, check=True)
        job = gb.fio_jobfile(dev, [WL], files["nullb"], d == "raw")
        job = "\n".join(line for line in job.splitlines() if not line.startswith("exec_")) + "\n"
        gb.write(f"{OUT}/{d}.fio", job)
        gb.drop_file_cache(files["nullb"])
        before = snapshot(n)
        r = subprocess.run(["fio", "--output-format=json", f"{OUT}/{d}.fio"], text=True,
                           capture_output=True)
        after = snapshot(n + 1)
        n += 2
        if r.returncode != 0 or "{" not in r.stdout:
            sys.exit(f"fio failed ({r.returncode}): {r.stderr[-600:]}")
        fio = json.loads(r.stdout[r.stdout.index("{"):])
        ios = sum(j["read"]["total_ios"] + j["write"]["total_ios"] for j in fio["jobs"])
        gb.write(f"{OUT}/{d}.json", json.dumps({"driver": d, "info": info, "ios": ios,
                                                 "before": os.path.basename(before),
                                                 "after": os.path.basename(after)}))
        gb.log(f"{d} {MODE} {WL} on {dev} {info}: {ios} I/Os")
        drv.detach(dev)
        gb.unload_loop_drivers()


if __name__ == "__main__":
    main()
