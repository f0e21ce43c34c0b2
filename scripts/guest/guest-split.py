#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest half of scripts/bench/split.sh (runs in the instruction-counted VM as root).

For each target (raw file, loop.ko, rust_loop.ko under each submission policy), mode and workload:
attaches the device over the bench's null_blk-backed XFS file (guest-bench.py's own set-up),
starts fio, and once I/O flows takes two snapshots SPLIT_RUNTIME guest seconds apart: every
task's run time (/proc/PID/task/TID/schedstat, nanoseconds), /proc/stat's CPU line and the I/Os
completed (/proc/diskstats). Under `-icount shift=0,sleep=off` on one vCPU a task's run time is
the instructions it executed (interrupts taken while it ran included); idle time is skipped
time, no instructions. One SPLIT_OUT/<cell>.json per cell; scripts/bench/split-report.py classifies.

Buffered cells run with steady writeback (vm.dirty_background_bytes = 16 MiB): each window pays
for writing back what it dirtied, whichever driver runs. With the default threshold (a tenth of
memory) writeback of the backing file starts inside one driver's window and not the other's, by
timing alone.

Environment (scripts/bench/split.sh sets them):
  SPLIT_TARGETS    comma list of raw, loop, rust_loop (default policy), rust_loop_inline
                   (nowait_max_depth=4096: deep queues stay inline), rust_loop_worker
                   (nowait_max_depth=0: the worker submits everything), rust_loop_mq2 (2 queues)
  SPLIT_MODES      dio,buffered      SPLIT_WORKLOADS   guest-bench.py's workload names
  SPLIT_RUNTIME    guest seconds between the snapshots (default 2)
  SPLIT_OUT        results directory
"""

import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guest_bench_nullb import gb  # noqa: E402

ENV = os.environ
TARGETS = gb.env_list("SPLIT_TARGETS", ["raw", "loop", "rust_loop", "rust_loop_inline",
                                        "rust_loop_worker"])
MODES = gb.env_list("SPLIT_MODES", ["dio", "buffered"])
WLS = gb.env_list("SPLIT_WORKLOADS", ["psync-randread-4k", "randread-4k-qd32",
                                      "randwrite-4k-qd32", "rw-4k-qd16-12jobs"])
RUNTIME = float(ENV.get("SPLIT_RUNTIME", "2"))
OUT = ENV["SPLIT_OUT"]
# Guest seconds fio runs before and after the recorded window.
LEAD, TAIL = 1.0, 1.0

# target -> (driver, rust_loop per-device nowait_max_depth, hardware queues)
POLICIES = {
    "raw": ("raw", None, None),
    "loop": ("loop", None, None),
    "rust_loop": ("rust_loop", None, 1),
    "rust_loop_inline": ("rust_loop", 4096, 1),
    "rust_loop_worker": ("rust_loop", 0, 1),
    "rust_loop_mq2": ("rust_loop", None, 2),
}


def diskstat_ios(name):
    """Reads + writes completed by block device NAME (/proc/diskstats)."""
    with open("/proc/diskstats") as f:
        for line in f:
            v = line.split()
            if v[2] == name:
                return int(v[3]) + int(v[7])
    raise RuntimeError(f"{name} not in /proc/diskstats")


def threads():
    """{tid: [comm, nanoseconds run]} of every task (/proc/PID/task/TID/schedstat). A kworker's
    comm names the workqueue it last ran work for ("kworker/u4:2+loop0")."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ns = int(f.read().split()[0])
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except (OSError, ValueError, IndexError):
                continue
            out[tid] = [comm, ns]
    return out


def snapshot(stat_dev):
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return {"monotonic_ns": time.monotonic_ns(), "uptime": up, "ios": diskstat_ios(stat_dev),
            "cpu_jiffies": cpu, "threads": threads()}


VM = "/proc/sys/vm"
STEADY_WRITEBACK = str(16 << 20)


def steady_writeback(on):
    """Background writeback from 16 MiB of dirty pages (on), or the kernel's default ratio back.
    Writing one of the two sysctls clears the other."""
    if on:
        gb.write(f"{VM}/dirty_background_bytes", STEADY_WRITEBACK)
    else:
        gb.write(f"{VM}/dirty_background_ratio", "10")


def run_cell(target, mode, wl, dev, stat_dev, backing):
    cell = f"{target}-{mode}-{wl}"
    gb.RUNTIME = LEAD + RUNTIME + TAIL
    job = gb.fio_jobfile(dev, [wl], backing, target == "raw")
    job = "\n".join(l for l in job.splitlines() if not l.startswith("exec_")) + "\n"
    gb.write(f"{gb.WORK}/split.fio", job)
    gb.drop_file_cache(backing)
    fio = subprocess.Popen(gb.FIO + ["--output-format=json", f"{gb.WORK}/split.fio"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait for I/O to flow (fio's start-up under TCG takes a while), then LEAD more.
    ios = diskstat_ios(stat_dev)
    for _ in range(600):
        time.sleep(0.1)
        if diskstat_ios(stat_dev) > ios + 100 or fio.poll() is not None:
            break
    time.sleep(LEAD)
    before = snapshot(stat_dev)
    time.sleep(RUNTIME)
    after = snapshot(stat_dev)
    _, ferr = fio.communicate()
    if fio.returncode != 0 or after["ios"] <= before["ios"]:
        raise RuntimeError(f"fio failed ({fio.returncode}) or no I/O in the window: {ferr[-400:]}")
    if not any(ns > before["threads"].get(tid, [c, 0])[1] for tid, (c, ns) in after["threads"].items()
               if c == "fio"):
        raise RuntimeError("the fio tasks show no run time: this kernel keeps no per-task "
                           "run times (/proc/PID/schedstat needs CONFIG_SCHED_INFO)")
    meta = {"target": target, "mode": mode, "workload": wl, "device": dev, "stat_device": stat_dev,
            "cpus": os.cpu_count(), "measuring_tid": str(threading.get_native_id()),
            "hz": gb.HZ, "nullb_irqmode": int(gb.NULLB_IRQMODE),
            "irq_time_accounting": ENV.get("SPLIT_IRQ_TIME") == "1",
            "dirty_background_bytes": int(gb.read(f"{VM}/dirty_background_bytes", "0")),
            "before": before, "after": after}
    sd = f"/sys/block/{os.path.basename(dev)}/rust_loop"
    if os.path.isdir(sd):
        meta["nowait_max_depth"] = gb.read(f"{sd}/nowait_max_depth", "?")
        meta["nr_hw_queues"] = len(os.listdir(f"/sys/block/{os.path.basename(dev)}/mq"))
    gb.write(f"{OUT}/{cell}.json", json.dumps(meta))
    gb.log(f"{cell}: {after['ios'] - before['ios']} I/Os in the window")


def main():
    files = gb.setup_backings()
    backing = files["nullb"]
    failures = 0
    for target in TARGETS:
        if target not in POLICIES:
            sys.exit(f"unknown target {target}; one of {', '.join(POLICIES)}")
        name, depth, queues = POLICIES[target]
        if queues and queues > (os.cpu_count() or 1):
            gb.log(f"{target}: skipped ({queues} hardware queues need as many CPUs)")
            continue
        drv = {"raw": gb.Raw(), "loop": gb.Loop("loop")}.get(name) or gb.Loop("rust_loop", queues)
        drv.load()
        for mode in MODES:
            if target == "raw" and mode != "dio":
                continue
            if target not in ("raw", "loop", "rust_loop") and mode != "dio":
                continue  # buffered I/O always goes to the worker: the policy does not apply
            dev, _ = drv.attach(backing, mode)
            steady_writeback(mode == "buffered")
            stat_dev = "nullb0" if target == "raw" else os.path.basename(dev)
            try:
                if depth is not None:
                    gb.write(f"/sys/block/{stat_dev}/rust_loop/nowait_max_depth", str(depth))
                for wl in WLS:
                    try:
                        run_cell(target, mode, wl, dev, stat_dev, backing)
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        failures += 1
                        gb.log(f"FAIL {target}-{mode}-{wl}: {e}")
            finally:
                steady_writeback(False)
                if depth is not None:
                    gb.write(f"/sys/block/{stat_dev}/rust_loop/nowait_max_depth", "1")
                drv.detach(dev)
    gb.unload_loop_drivers()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
