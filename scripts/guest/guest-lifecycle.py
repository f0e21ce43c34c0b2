#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest half of scripts/bench/lifecycle.sh (runs inside the VM as root, udev running).

For each driver (loop.ko, rust_loop.ko; LIFECYCLE_DRIVERS), loaded with max_loop=0 so that no
device exists beforehand:
  1. the idle cost: LIFECYCLE_IDLE devices created with LOOP_CTL_ADD and left unbound: memory
     (MemAvailable, Slab, VmallocUsed) and kernel threads per device;
  2. the lifecycle of LIFECYCLE_N devices, from 1 task and from LIFECYCLE_TASKS tasks (processes,
     each its own range of device numbers): LOOP_CTL_ADD N, open /dev/loopN, LOOP_CONFIGURE on a
     1 MiB backing file, read one 4 KiB block (O_DIRECT), LOOP_CLR_FD + close, LOOP_CTL_REMOVE N;
     devices per second (until the last LOOP_CTL_REMOVE returned, and until `udevadm settle`
     returned after it: udev can lag the tasks), p50/p99 latency of each step. LIFECYCLE_NUMBERS (default
     "distinct,lowest") runs it once per way of numbering the devices: "distinct" gives every
     device a number of its own (LOOP_CTL_ADD N, each task its own range), "lowest" takes the
     lowest free number (LOOP_CTL_ADD -1, as losetup -f ends up doing once the devices are
     gone), so numbers come back as devices are removed.
With LIFECYCLE_PROFILE=1 each lifecycle run (until udev settled) is recorded with
`perf record -e cpu-clock -a` and LIFECYCLE_OUT/profile-DRIVER-NUMBERS-TASKS.txt gives the guest's
CPU per device by command (udev's workers, the tasks, kernel threads), by module and by symbol.
Writes LIFECYCLE_OUT/lifecycle.json and prints a table.
"""

import json
import mmap
import signal
import multiprocessing
import os
import collections
import statistics
import subprocess
import sys
import threading
import time
import fcntl
import importlib.util

# guest-bench.py's helpers (unloading both loop drivers).
_spec = importlib.util.spec_from_file_location(
    "guest_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest-bench.py"))
GB = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GB)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = os.environ
N = int(ENV.get("LIFECYCLE_N", "1000"))
TASKS = int(ENV.get("LIFECYCLE_TASKS", "8"))
IDLE = int(ENV.get("LIFECYCLE_IDLE", "1000"))
DRIVERS = ENV.get("LIFECYCLE_DRIVERS", "loop,rust_loop").split(",")
NUMBERS = ENV.get("LIFECYCLE_NUMBERS", "distinct,lowest").split(",")
OUT = ENV.get("LIFECYCLE_OUT", os.path.join(ROOT, "results", "lifecycle"))
KO = os.path.join(ROOT, "rust_loop.ko")
PROFILE = ENV.get("LIFECYCLE_PROFILE", "0") == "1"
PROFILE_HZ = 999
WORK = "/tmp/lifecycle"

# The loop ABI as the tests define it (tests/loopioctl.py: ioctl numbers, struct loop_config).
_spec = importlib.util.spec_from_file_location("loopioctl", os.path.join(ROOT, "tests", "loopioctl.py"))
LIO = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(LIO)
LOOP_CLR_FD, LOOP_CONFIGURE = LIO.LOOP_CLR_FD, LIO.LOOP_CONFIGURE
LOOP_CTL_ADD, LOOP_CTL_REMOVE = LIO.LOOP_CTL_ADD, LIO.LOOP_CTL_REMOVE
CONFIG = LIO.CONFIG
LO_FLAGS_READ_ONLY = 1
STEPS = ["add", "open", "configure", "read", "clear", "remove"]


sh = GB.sh  # run a command, raise on failure unless check=False


def ioctl(fd, cmd, arg=0):
    return fcntl.ioctl(fd, cmd, arg)


def unload():
    GB.unload_loop_drivers()


def load(driver):
    unload()
    cmd = (["modprobe", "loop", "max_loop=0"] if driver == "loop"
           else ["insmod", KO, "max_loop=0"] + ENV.get("LIFECYCLE_RUST_LOOP_PARAMS", "").split())
    for _ in range(50):
        if sh(cmd, check=False).returncode == 0:
            break
        time.sleep(0.2)
    else:
        sh(cmd)
    for _ in range(50):
        if os.path.exists("/dev/loop-control"):
            return
        time.sleep(0.1)
    raise RuntimeError("no /dev/loop-control")


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])
    return out


def kthreads():
    """Kernel threads (children of kthreadd, pid 2)."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == "2":
                        n += 1
            except (OSError, IndexError):
                pass
    return n


def cpu_busy_s():
    """Seconds of CPU time the guest spent busy (all CPUs: /proc/stat, everything but idle and
    iowait), so that a run's CPU time per device can be told from its waiting."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def settle():
    sh(["udevadm", "settle", "-t", "120"], check=False)


def idle_cost(driver):
    load(driver)
    settle()
    time.sleep(1)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    m0, t0 = meminfo(), kthreads()
    ctl = os.open("/dev/loop-control", os.O_RDWR)
    try:
        for i in range(IDLE):
            ioctl(ctl, LOOP_CTL_ADD, i)
        settle()
        time.sleep(1)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        m1, t1 = meminfo(), kthreads()
        for i in range(IDLE):
            ioctl(ctl, LOOP_CTL_REMOVE, i)
    finally:
        os.close(ctl)
    settle()
    per = {k: (m0[k] - m1[k] if k == "MemAvailable" else m1[k] - m0[k]) / IDLE
           for k in ("MemAvailable", "Slab", "SUnreclaim", "VmallocUsed", "Percpu")}
    return {"devices": IDLE, "kib_per_device": per, "kthreads_per_device": (t1 - t0) / IDLE,
            "kthreads_before": t0, "kthreads_after": t1}


def one_device(ctl, i, backing_fd, buf, lat):
    """One device's lifecycle: number i, or the lowest free one if i is None."""
    t = time.perf_counter()
    i = ioctl(ctl, LOOP_CTL_ADD, -1 if i is None else i)
    t1 = time.perf_counter()
    path = f"/dev/loop{i}"
    for _ in range(2000):  # devtmpfs makes the node at add_disk: normally there at once
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            break
        except FileNotFoundError:
            time.sleep(0.001)
    else:
        raise RuntimeError(f"{path} did not appear")
    t2 = time.perf_counter()
    # fd, block_size; lo_device, lo_inode, lo_rdevice, lo_offset, lo_sizelimit; lo_number,
    # lo_encrypt_type, lo_encrypt_key_size, lo_flags; names and key; lo_init[2]; __reserved[8]
    cfg = CONFIG.pack(backing_fd, 0, 0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_READ_ONLY, b"", b"", b"",
                      0, 0, *([0] * 8))
    ioctl(fd, LOOP_CONFIGURE, cfg)
    t3 = time.perf_counter()
    if os.preadv(fd, [buf], 0) != 4096:
        raise RuntimeError(f"short read on {path}")
    t4 = time.perf_counter()
    ioctl(fd, LOOP_CLR_FD)
    os.close(fd)  # the last close unbinds (LOOP_CLR_FD on an open device is deferred to it)
    t5 = time.perf_counter()
    for _ in range(200):
        try:
            ioctl(ctl, LOOP_CTL_REMOVE, i)
            break
        except OSError as e:  # EBUSY while udev still has the device open
            if e.errno != 16:
                raise
            time.sleep(0.005)
    else:
        raise RuntimeError(f"LOOP_CTL_REMOVE {i}: EBUSY for 1 s")
    t6 = time.perf_counter()
    for s, a, b in zip(STEPS, (t, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6)):
        lat[s].append(b - a)


def worker(first, count, backing, q, lowest):
    lat = {s: [] for s in STEPS}
    ctl = os.open("/dev/loop-control", os.O_RDWR)
    bfd = os.open(backing, os.O_RDONLY)
    buf = mmap.mmap(-1, 4096)
    err = None
    try:
        for i in range(first, first + count):
            one_device(ctl, None if lowest else i, bfd, buf, lat)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        err = str(e)
    os.close(bfd)
    os.close(ctl)
    q.put((lat, err))


def profile_start():
    """perf record of the whole guest (cpu-clock; perf cannot write over 9p: the guest's tmpfs)."""
    data, ctl, ack = f"{WORK}/perf.data", f"{WORK}/perf.ctl", f"{WORK}/perf.ack"
    for fifo in (ctl, ack):
        if os.path.exists(fifo):
            os.unlink(fifo)
        os.mkfifo(fifo)
    # Started disabled (-D -1) and enabled through its control FIFO once it is ready: perf's
    # start-up (synthesizing every task's maps) takes seconds under TCG, longer than a short run.
    proc = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PROFILE_HZ),
                             "-a", "-D", "-1", "--control", f"fifo:{ctl},{ack}", "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with open(ctl, "w") as c, open(ack) as a:
        c.write("enable\n")
        c.flush()
        a.readline()
    return data, proc


class WaitSampler(threading.Thread):
    """Every 20 ms (runs of several tasks), where the run's sleeping tasks wait: for each task of the run (the lifecycle
    processes, udev's workers, kernel workers) not on a CPU, its state and wchan, and for tasks in
    uninterruptible sleep the top of the kernel stack. What the CPU profile cannot show: a
    run's idle time is somebody's waiting."""

    COMMS = ("python3", "(udev-worker)", "systemd-udevd", "udevadm", "kworker", "rust_loop")

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.counts = collections.Counter()
        self.samples = 0

    def run(self):
        me = str(os.getpid())
        while not self.stop.wait(0.02):
            self.samples += 1
            for p in os.listdir("/proc"):
                if not p.isdigit() or p == me:
                    continue
                try:
                    with open(f"/proc/{p}/stat") as f:
                        st = f.read()
                    comm = st[st.index("(") + 1:st.rindex(")")]
                    state = st[st.rindex(")") + 2]
                    if state not in "DS" or not comm.startswith(self.COMMS):
                        continue
                    with open(f"/proc/{p}/wchan") as f:
                        wchan = f.read().strip() or "-"
                    where = wchan
                    if state == "D":
                        with open(f"/proc/{p}/stack") as f:
                            frames = [ln.split()[1].split("+")[0] for ln in f if len(ln.split()) > 1]
                        where = " < ".join(frames[:6])
                except (OSError, ValueError, IndexError):
                    continue
                cls = comm.split("/")[0].split("-")[0] if comm.startswith("kworker") else comm
                self.counts[(cls, state, where)] += 1

    def report(self):
        self.stop.set()
        self.join()
        out = [f"\n## waiting tasks, {self.samples} samples at 20 ms (task-samples; D: stack top)\n"]
        for (comm, state, where), n in self.counts.most_common(40):
            out.append(f"{n:8d}  {comm:16s} {state}  {where}\n")
        return out


def profile_report(data, proc, name, devices, waits=None):
    """Stops the recording and writes the guest's CPU per device by command, module and symbol."""
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=600)[1]
    head = (f"# {name}: perf record -e cpu-clock -F {PROFILE_HZ} -a over the run until udev "
            f"settled, {devices} devices; ms/device = samples / {PROFILE_HZ} Hz * 1000 / devices\n")
    out = [head]
    # The tasks' own CPU (their system calls: add_disk, del_gendisk, the driver) apart from udev's.
    for sort, only in (("comm", []), ("dso", []), ("sym", []), ("sym", ["--comms", "python3"])):
        r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-n",
                            "--sort", sort, "--percent-limit", "0.3"] + only,
                           text=True, capture_output=True)
        out.append(f"\n## by {sort}{', the lifecycle tasks only' if only else ''}\n")
        for line in r.stdout.splitlines():
            f = line.split()
            # Rows are "pct% samples name...": add the samples as ms of CPU per device.
            if len(f) >= 3 and f[0].endswith("%") and f[1].isdigit() and devices:
                line += f"   [{int(f[1]) * 1e3 / PROFILE_HZ / devices:.3f} ms/device]"
            out.append(line + "\n")
        if r.returncode:
            out.append(r.stderr[-400:] + "\n")
    if waits:
        out += waits.report()
    if proc.returncode not in (0, -signal.SIGINT, 130):
        out.append(f"perf record exited {proc.returncode}: {err[-400:]}\n")
    with open(os.path.join(OUT, f"profile-{name}.txt"), "w") as f:
        f.writelines(out)


def lifecycle(driver, tasks, backing, numbers):
    load(driver)
    settle()
    prof = profile_start() if PROFILE else None
    waits = WaitSampler() if PROFILE and tasks > 1 else None
    if waits:
        waits.start()
    per = N // tasks
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker,
                                     args=(k * per, per, backing, q, numbers == "lowest"))
             for k in range(tasks)]
    t0, c0 = time.perf_counter(), cpu_busy_s()
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    settle()
    # Until udev has handled every event of the run too: the tasks can finish ahead of udev,
    # whose backlog (probing each device after its change events) is work of the run as well.
    settled = time.perf_counter() - t0
    cpu = cpu_busy_s() - c0
    errors = [e for _, e in results if e]
    lat = {s: [x for r, _ in results for x in r[s]] for s in STEPS}
    done = len(lat["remove"])
    if prof:
        profile_report(*prof, f"{driver}-{numbers}-{tasks}", done, waits)
    res = {"driver": driver, "tasks": tasks, "numbers": numbers, "devices": done, "wall_s": wall,
           "devices_per_s": done / wall if wall else 0, "errors": errors,
           "settled_s": settled, "devices_per_s_settled": done / settled if settled else 0,
           "cpu_ms_per_device": cpu * 1e3 / done if done else 0}
    for s in STEPS:
        xs = sorted(lat[s])
        if xs:
            res[f"{s}_p50_ms"] = statistics.median(xs) * 1e3
            res[f"{s}_p99_ms"] = xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3
    return res


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    backing = f"{WORK}/backing.img"
    with open(backing, "wb") as f:
        f.write(os.urandom(1 << 20))
    res = {"n": N, "tasks": TASKS, "idle_devices": IDLE, "kernel": os.uname().release,
           "idle": {}, "runs": []}
    for d in DRIVERS:
        print(f"{d}: idle cost of {IDLE} unbound devices", flush=True)
        res["idle"][d] = idle_cost(d)
        print(f"  {json.dumps(res['idle'][d])}", flush=True)
        for numbers in NUMBERS:
            for tasks in (1, TASKS):
                print(f"{d}: lifecycle of {N} devices from {tasks} task(s), {numbers} numbers",
                      flush=True)
                r = lifecycle(d, tasks, backing, numbers)
                res["runs"].append(r)
                print(f"  {r['devices']} devices in {r['wall_s']:.1f}s: {r['devices_per_s']:.1f}/s"
                      + (f"; errors: {r['errors']}" if r["errors"] else ""), flush=True)
    unload()
    with open(os.path.join(OUT, "lifecycle.json"), "w") as f:
        json.dump(res, f, indent=1)
    # The table.
    L = ["| driver | numbers | tasks | devices/s | devices/s settled | CPU ms/device | "
         + " | ".join(f"{s} p50/p99 ms" for s in STEPS) + " |",
         "|---|---|--:|--:|--:|--:|" + "--:|" * len(STEPS)]
    for r in res["runs"]:
        L.append(f"| {r['driver']} | {r['numbers']} | {r['tasks']} | {r['devices_per_s']:.1f} | "
                 f"{r['devices_per_s_settled']:.1f} | {r['cpu_ms_per_device']:.1f} | "
                 + " | ".join(f"{r.get(s + '_p50_ms', 0):.2f} / {r.get(s + '_p99_ms', 0):.2f}"
                              for s in STEPS) + " |")
    L += ["", "| driver | idle device: KiB MemAvailable | KiB slab | KiB vmalloc | KiB percpu | kernel threads |",
          "|---|--:|--:|--:|--:|--:|"]
    for d, v in res["idle"].items():
        k = v["kib_per_device"]
        L.append(f"| {d} | {k['MemAvailable']:.1f} | {k['Slab']:.1f} | {k['VmallocUsed']:.1f} | "
                 f"{k['Percpu']:.1f} | {v['kthreads_per_device']:.2f} |")
    ratios = []
    for numbers in NUMBERS:
        for tasks in (1, TASKS):
            c, rr = (next((r for r in res["runs"] if r["driver"] == d and r["tasks"] == tasks
                           and r["numbers"] == numbers), None) for d in ("loop", "rust_loop"))
            if c and rr and c["devices_per_s"]:
                settled = (f"{rr['devices_per_s_settled'] / c['devices_per_s_settled']:.2f}"
                           if c["devices_per_s_settled"] else "-")
                ratios.append(f"{tasks} task(s), {numbers} numbers: rust_loop / C loop devices "
                              f"per second = {rr['devices_per_s'] / c['devices_per_s']:.2f} "
                              f"(until udev settled: {settled})")
    L += [""] + ratios
    md = "\n".join(L) + "\n"
    with open(os.path.join(OUT, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    bad = [r for r in res["runs"] if r["errors"] or r["devices"] != N // r["tasks"] * r["tasks"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
