#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest half of scripts/bench/bench.sh (runs inside the VM as root).

Prepares two XFS backing files (one on the virtio disk of vm.sh --disk, one on a memory-backed
null_blk device), then runs every fio cell against each target — the raw backing file with
O_DIRECT, the C loop.ko, rust_loop.ko and the rublk ublk loop target — in buffered and dio mode,
for BENCH_ROUNDS rounds. The drivers alternate within each (backing, mode) group, in an order
rotated from group to group (loop.ko and rust_loop.ko both use major 7: only one is loaded at a
time); a driver's workloads run in one fio process, and fio's exec hooks snapshot /proc/stat
around each job for the context-switch and CPU-time deltas. Then it measures the page-cache growth
of an O_DIRECT read through each driver in each mode. Every sample goes to $BENCH_OUT/bench.json,
rewritten after each group; scripts/bench/bench-report.py turns it into the tables, the chart and the
PASS/MISS verdicts.

Environment (scripts/bench/bench.sh sets them; defaults in brackets):
  BENCH_RUNTIME [3]        seconds per fio cell
  BENCH_ROUNDS [3]         rounds (medians over rounds)
  BENCH_FILE_MB [1024]     size of each backing file
  BENCH_PAGECACHE_MB [=BENCH_FILE_MB]   data read by the page-cache test (0: no page-cache test)
  BENCH_DRIVERS [raw,loop,rust_loop,ublk]  BENCH_BACKINGS [disk,nullb]  BENCH_MODES [buffered,dio]
  BENCH_WORKLOADS [all]    comma list of workload names (see WORKLOADS)
  BENCH_MQ_WORKLOADS [randread-4k-qd32,rw-4k-qd16-12jobs]  workloads of rust_loop_mq2 ("all": every one)
  BENCH_RUST_LOOP_PARAMS   module parameters for `insmod rust_loop.ko` (experiments), e.g. nowait_max_depth=0
  BENCH_B_KO               driver rust_loop_b: this rust_loop.ko (another build; default: rust_loop.ko)
  BENCH_B_PARAMS           driver rust_loop_b: its module parameters (default: none)
  BENCH_CLOCK [wall]       wall, or icount (the guest's clock counts instructions: recorded in meta)
  BENCH_NULLB_IRQMODE [0]  null_blk's completions: 0 on the submitter's stack, 1 softirq, 2 timer
                           interrupt (after completion_nsec, 10 us): a device that interrupts
  BENCH_RUBLK              path of the rublk binary ("" = skip the ublk cells)
  BENCH_RUBLK_NOTE         why rublk is missing (recorded in the JSON)
  BENCH_UBLK_OPTS          extra `rublk add loop` options (default: none, i.e. rublk's defaults)
  BENCH_DISK [/dev/vda or /dev/sda]    the virtio disk (vm.sh --disk) for the XFS backing
  BENCH_OUT [results/bench]
"""

import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = os.environ


def env_list(name, default):
    v = ENV.get(name, "").strip()
    return [x for x in v.replace(" ", ",").split(",") if x] if v else list(default)


RUNTIME = float(ENV.get("BENCH_RUNTIME", "3"))
ROUNDS = int(ENV.get("BENCH_ROUNDS", "3"))
FILE_MB = int(ENV.get("BENCH_FILE_MB", "1024"))
PAGECACHE_MB = min(int(ENV.get("BENCH_PAGECACHE_MB", str(FILE_MB))), FILE_MB)
OUT = ENV.get("BENCH_OUT", os.path.join(ROOT, "results", "bench"))
DISK = ENV.get("BENCH_DISK", "")  # "": the first of /dev/vda, /dev/sda to appear
RUBLK = ENV.get("BENCH_RUBLK", "")
RUBLK_NOTE = ENV.get("BENCH_RUBLK_NOTE", "")
UBLK_OPTS = shlex.split(ENV.get("BENCH_UBLK_OPTS", ""))
KO = os.path.join(ROOT, "rust_loop.ko")
WORK = "/tmp/bench"

# name -> fio options. Every cell runs time-based with direct=1 on the device (or, for "raw", on
# the backing file): the mode under test is the one of the driver's own I/O to the backing file.
WORKLOADS = {
    "randread-4k-qd32": dict(rw="randread", bs="4k", ioengine="libaio", iodepth=32),
    "randwrite-4k-qd32": dict(rw="randwrite", bs="4k", ioengine="libaio", iodepth=32),
    "seqread-1m-qd8": dict(rw="read", bs="1M", ioengine="libaio", iodepth=8),
    "seqwrite-1m-qd8": dict(rw="write", bs="1M", ioengine="libaio", iodepth=8),
    # 12 jobs of sequential mixed 50/50 read/write (fio rw=rw), each in its own 1/12 of the device
    "rw-4k-qd16-12jobs": dict(rw="rw", rwmixread=50, bs="4k", ioengine="libaio", iodepth=16,
                              numjobs=12),
    "psync-randread-4k": dict(rw="randread", bs="4k", ioengine="psync", iodepth=1),
}
# rust_loop_mq2: rust_loop with 2 hardware queues (and workers) per device, dio only, on the
# workloads in MQ_WORKLOADS.
# rust_loop_b: an A/B experiment beside rust_loop in the same boot, its rounds interleaved with
# rust_loop's: another build (BENCH_B_KO) and/or other module parameters (BENCH_B_PARAMS).
ALL_DRIVERS = ["raw", "loop", "rust_loop", "rust_loop_mq2", "rust_loop_b", "ublk"]
KO_B = ENV.get("BENCH_B_KO", "") or KO
MQ_WORKLOADS = env_list("BENCH_MQ_WORKLOADS", ["randread-4k-qd32", "rw-4k-qd16-12jobs"])
if MQ_WORKLOADS == ["all"]:
    MQ_WORKLOADS = list(WORKLOADS)
CLOCK = ENV.get("BENCH_CLOCK", "wall")
DRIVERS = [d for d in env_list("BENCH_DRIVERS", ALL_DRIVERS) if d in ALL_DRIVERS]
BACKINGS = [b for b in env_list("BENCH_BACKINGS", ["disk", "nullb"]) if b in ("disk", "nullb")]
NULLB_IRQMODE = os.environ.get("BENCH_NULLB_IRQMODE", "0")
if NULLB_IRQMODE not in ("0", "1", "2"):
    sys.exit(f"BENCH_NULLB_IRQMODE must be 0, 1 or 2, not {NULLB_IRQMODE!r}")
# dontcache: buffered mode with rust_loop's cache_mode=dontcache (rust_loop only).
MODES = [m for m in env_list("BENCH_MODES", ["buffered", "dio", "dontcache"])
         if m in ("buffered", "dio", "dontcache")]
WL_NAMES = [w for w in env_list("BENCH_WORKLOADS", WORKLOADS) if w in WORKLOADS]

T0 = time.monotonic()


def log(msg):
    el = time.monotonic() - T0
    print(f"[{int(el // 60):2d}:{int(el % 60):02d}] {msg}", flush=True)


def sh(cmd, check=True, **kw):
    """Runs a command (list or shell string); returns CompletedProcess with text output."""
    r = subprocess.run(cmd, shell=isinstance(cmd, str), text=True, capture_output=True, **kw)
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(f"{cmd!r} failed ({r.returncode}): {' / '.join(msg[:3])}")
    return r


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def meminfo_kib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def drop_caches():
    os.sync()
    write("/proc/sys/vm/drop_caches", "3")


def drop_file_cache(path):
    """Writes back and evicts one file's page cache. Cheaper and more targeted than drop_caches,
    which would also evict fio's own libraries (re-read over 9p on each start under TCG)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


HZ = os.sysconf("SC_CLK_TCK")
FIO = ["fio"]

# --- backing files -----------------------------------------------------------------------------


def precondition(path):
    """Creates the backing file and writes it through once (O_DIRECT, 1 MiB sequential)."""
    t = time.monotonic()
    sh(FIO + ["--name=precondition", f"--filename={path}", f"--size={FILE_MB}M", "--rw=write",
        "--bs=1M", "--direct=1", "--ioengine=libaio", "--iodepth=8", "--end_fsync=1",
        "--output-format=terse"])
    os.sync()
    return time.monotonic() - t


def setup_backings():
    files = {}
    os.makedirs(WORK, exist_ok=True)
    if "disk" in BACKINGS:
        mnt = f"{WORK}/disk"
        os.makedirs(mnt, exist_ok=True)
        cands = [DISK] if DISK else ["/dev/vda", "/dev/sda"]
        for _ in range(300):  # the disk may still be probing
            disk = next((d for d in cands if os.path.exists(d)), None)
            if disk:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"no {' or '.join(cands)} (is the vm.sh --disk image attached?)")
        log(f"backing disk: mkfs.xfs {disk}, precondition a {FILE_MB} MiB file")
        sh(["mkfs.xfs", "-f", "-q", disk])
        sh(["mount", disk, mnt])
        secs = precondition(f"{mnt}/backing.img")
        log(f"backing disk: written through in {secs:.1f}s ({FILE_MB / secs:.0f} MiB/s)")
        files["disk"] = f"{mnt}/backing.img"
    if "nullb" in BACKINGS:
        mnt = f"{WORK}/nullb"
        os.makedirs(mnt, exist_ok=True)
        gb = (FILE_MB * 5 // 4 + 256 + 1023) // 1024
        log(f"backing nullb: null_blk memory_backed=1 gb={gb} bs=4096 irqmode={NULLB_IRQMODE}, "
            "mkfs.xfs, precondition")
        sh(["modprobe", "null_blk", "nr_devices=1", "queue_mode=2", "memory_backed=1", f"gb={gb}",
            "bs=4096", f"irqmode={NULLB_IRQMODE}"])
        for _ in range(50):
            if os.path.exists("/dev/nullb0"):
                break
            time.sleep(0.1)
        sh(["mkfs.xfs", "-f", "-q", "/dev/nullb0"])
        sh(["mount", "/dev/nullb0", mnt])
        secs = precondition(f"{mnt}/backing.img")
        log(f"backing nullb: written through in {secs:.1f}s ({FILE_MB / secs:.0f} MiB/s)")
        files["nullb"] = f"{mnt}/backing.img"
    return files


# --- drivers -----------------------------------------------------------------------------------


def unload_loop_drivers():
    sh("losetup -D", check=False)
    for m in ("rust_loop", "loop"):
        if os.path.isdir(f"/sys/module/{m}"):
            for _ in range(20):
                if sh(["rmmod", m], check=False).returncode == 0:
                    break
                time.sleep(0.3)
            if os.path.isdir(f"/sys/module/{m}"):
                raise RuntimeError(f"cannot unload {m}")


class Raw:
    """The backing file itself, opened by fio with O_DIRECT: the limit."""
    name = "raw"

    def load(self):
        pass

    def attach(self, file, mode):
        return file, {"dio": 1}

    def detach(self, dev):
        pass


class Loop:
    """loop.ko or rust_loop.ko through losetup --direct-io=on|off."""

    # The (ko, parameters) rust_loop was last loaded with: rust_loop_b may need another.
    loaded = None

    def __init__(self, name, queues=None, ko=KO, params_env="BENCH_RUST_LOOP_PARAMS"):
        self.name = name
        self.queues = queues
        self.module = (ko, shlex.split(ENV.get(params_env, ""))) if name == "rust_loop" else None

    def load(self):
        if os.path.isdir(f"/sys/module/{self.name}") and self.module == Loop.loaded:
            return
        unload_loop_drivers()
        Loop.loaded = None
        cmd = (["modprobe", "loop"] if self.name == "loop"
               else ["insmod", self.module[0]] + self.module[1])
        # The other driver's unload can still hold block major 7 or the misc minor for a moment
        # after rmmod returned (insmod: EBUSY): retry for a few seconds before giving up.
        for attempt in range(30):
            r = sh(cmd, check=False)
            if r.returncode == 0:
                break
            time.sleep(0.2)
        else:
            sh(cmd)
        if attempt:
            print(f"  note: {' '.join(cmd)} needed {attempt + 1} attempts", flush=True)
        Loop.loaded = self.module
        for _ in range(50):
            if os.path.exists("/dev/loop-control"):
                break
            time.sleep(0.1)

    def attach(self, file, mode):
        dio = "on" if mode == "dio" else "off"
        dev = sh(["losetup", "-f"]).stdout.strip()
        n = os.path.basename(dev)
        if self.name == "rust_loop":
            # Hardware queues and cache mode of the (unbound) device: per-device knobs, kept
            # from one binding to the next, so set every time. No count: the module's default,
            # one per online CPU up to 8 (nr_hw_queues=0).
            write(f"/sys/block/{n}/rust_loop/nr_hw_queues", str(self.queues or min(os.cpu_count() or 1, 8)))
            write(f"/sys/block/{n}/rust_loop/cache_mode",
                  "dontcache" if mode == "dontcache" else "normal")
        sh(["losetup", f"--direct-io={dio}", dev, file])
        if self.name == "rust_loop" and mode == "dontcache":
            got = read(f"/sys/block/{n}/rust_loop/cache_mode", "?")
            if got != "dontcache":
                sh(["losetup", "-d", dev], check=False)
                raise RuntimeError(f"cache_mode is {got} after binding (backing lacks FOP_DONTCACHE?)")
        info = {"dio": int(read(f"/sys/block/{n}/loop/dio", "-1")),
                "logical_block_size": int(read(f"/sys/block/{n}/queue/logical_block_size", "0")),
                "nr_hw_queues": len(os.listdir(f"/sys/block/{n}/mq"))}
        return dev, info

    def detach(self, dev):
        sh(["losetup", "-d", dev], check=False)
        for _ in range(50):
            if read(f"/sys/block/{os.path.basename(dev)}/loop/backing_file") is None:
                break
            time.sleep(0.1)


class Ublk:
    """The rublk ublk loop target (direct I/O by default; --buffered-io for buffered)."""
    name = "ublk"
    ID = 0

    def __init__(self):
        self.proc = None
        self.logf = None

    def load(self):
        sh(["modprobe", "ublk_drv"])

    def attach(self, file, mode):
        args = [RUBLK, "add", "loop", "-n", str(self.ID), "-f", file, "--foreground"] + UBLK_OPTS
        if mode == "buffered":
            args.append("--buffered-io")
        self.logf = open(f"{WORK}/rublk.log", "a")
        self.logf.write(f"$ {shlex.join(args)}\n")
        self.logf.flush()
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        dev = f"/dev/ublkb{self.ID}"
        for _ in range(300):
            if self.proc.poll() is not None:
                raise RuntimeError(f"rublk exited with {self.proc.returncode}: "
                                   f"{read(f'{WORK}/rublk.log', '')[-400:]}")
            if os.path.exists(dev) and int(read(f"/sys/block/ublkb{self.ID}/size", "0")) > 0:
                break
            time.sleep(0.1)
        else:
            self.detach(dev)
            raise RuntimeError("rublk: /dev/ublkb0 did not appear in 30s")
        info = {"dio": 0 if mode == "buffered" else 1,
                "logical_block_size": int(read(f"/sys/block/ublkb{self.ID}/queue/logical_block_size", "0"))}
        return dev, info

    def detach(self, dev):
        sh([RUBLK, "del", "-n", str(self.ID)], check=False)
        if self.proc:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.logf:
            self.logf.close()
            self.logf = None


# --- one cell ----------------------------------------------------------------------------------


# Hook run by fio around each job (exec_prerun / exec_postrun; with numjobs, once per clone):
# appends /proc/stat's "cpu" and "ctxt" values to SNAP/NAME.pre|post with shell built-ins only
# (an exec costs a lot under TCG), so the counters cover the job's I/O and not fio's start-up.
# After the last clone it writes the backing file back and evicts it from the page cache, outside
# the measurement, so that every cell starts with none of it cached.
HOOK = r"""#!/bin/sh
# hook.sh pre|post NAME BACKING_FILE NUMJOBS
snap() {
	while read -r k v; do
		case $k in
		cpu) c=$v ;;
		ctxt) echo "$c $v" >>"$SNAP/$1"; return ;;
		esac
	done </proc/stat
}
case $1 in
pre) snap "$2.pre" ;;
post)
	snap "$2.post"
	n=0
	while read -r l; do n=$((n + 1)); done <"$SNAP/$2.post"
	if [ "$n" -ge "$4" ]; then
		sync "$3"
		dd if="$3" iflag=nocache count=0 status=none
	fi
	;;
esac
"""


def fio_jobfile(dev, wls, backing_file, is_file):
    """One fio job file for a (driver, backing, mode) group: a stonewalled job per workload."""
    L = ["[global]", f"filename={dev}", "direct=1", "time_based", f"runtime={RUNTIME:g}",
         "group_reporting", "randrepeat=1", "norandommap"]
    for wl in wls:
        o = WORKLOADS[wl]
        numjobs = o.get("numjobs", 1)
        L += ["", f"[{wl}]", "stonewall"]
        L += [f"{k}={v}" for k, v in o.items() if k != "numjobs"]
        if numjobs > 1:
            region = FILE_MB // numjobs
            L += [f"numjobs={numjobs}", f"size={region}M", f"offset_increment={region}M"]
        elif is_file:
            L.append(f"size={FILE_MB}M")
        L.append(f"exec_prerun=/bin/sh {WORK}/hook.sh pre {wl} {backing_file} {numjobs}")
        L.append(f"exec_postrun=/bin/sh {WORK}/hook.sh post {wl} {backing_file} {numjobs}")
    return "\n".join(L) + "\n"


def snaps(path):
    """[(busy jiffies, total jiffies, ctxt)] from the hook's lines ("user nice system idle iowait
    irq softirq steal guest guest_nice ctxt")."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                v = [int(x) for x in line.split()]
                if len(v) >= 9:
                    total = sum(v[:8])
                    out.append((total - v[3] - v[4], total, v[-1]))
    except (OSError, ValueError):
        pass
    return out


def run_group(dev, wls, backing_file, is_file):
    """Runs the workloads back to back in one fio process (fio's start-up under TCG costs seconds;
    once per group instead of once per cell). Returns {workload: sample or Exception}."""
    snap = f"{WORK}/snap"
    shutil.rmtree(snap, ignore_errors=True)
    os.makedirs(snap)
    write(f"{WORK}/hook.sh", HOOK)
    write(f"{snap}/job.fio", fio_jobfile(dev, wls, backing_file, is_file))
    drop_file_cache(backing_file)
    w0 = time.monotonic()
    r = subprocess.run(FIO + ["--output-format=json", f"{snap}/job.fio"], text=True,
                       capture_output=True, cwd=snap, env={**ENV, "SNAP": snap})
    wall = time.monotonic() - w0
    out = r.stdout
    try:
        jobs = json.loads(out[out.index("{"):])["jobs"]
    except ValueError:
        err = RuntimeError(f"fio failed ({r.returncode}): {(r.stderr or out).strip()[-400:]}")
        return {wl: err for wl in wls}
    res = {}
    for wl, job in zip(wls, jobs):
        rd, wr = job["read"], job["write"]
        ios = rd["total_ios"] + wr["total_ios"]
        pre, post = snaps(f"{snap}/{wl}.pre"), snaps(f"{snap}/{wl}.post")
        if job.get("error"):
            res[wl] = RuntimeError(f"fio job error {job['error']}: {(r.stderr or '').strip()[-300:]}")
            continue
        if not ios or not pre or not post:
            res[wl] = RuntimeError(f"no I/O or no /proc/stat snapshots (fio rc {r.returncode}): "
                                   f"{(r.stderr or '').strip()[-300:]}")
            continue
        (b0, t0, c0), (b1, t1, c1) = pre[0], post[-1]
        res[wl] = {
            "iops": rd["iops"] + wr["iops"],
            "bw_mib_s": (rd["bw_bytes"] + wr["bw_bytes"]) / 2**20,
            "read_iops": rd["iops"], "write_iops": wr["iops"],
            "ios": ios,
            "lat_mean_us": statistics.fmean(
                [x["lat_ns"]["mean"] / 1000 for x in (rd, wr) if x["total_ios"]] or [0]),
            "clat_p99_us": max([x["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000
                                for x in (rd, wr) if x["total_ios"]] or [0]),
            "fio_usr_cpu_pct": job["usr_cpu"], "fio_sys_cpu_pct": job["sys_cpu"],
            "fio_ctx": job["ctx"],
            "stat_ctxt": c1 - c0,
            "stat_busy_jiffies": b1 - b0, "stat_total_jiffies": t1 - t0,
            "ctxt_per_io": (c1 - c0) / ios,
            "cpu_us_per_io": (b1 - b0) * 1e6 / HZ / ios,
            "window_s": (t1 - t0) / HZ / (os.cpu_count() or 1),
            "fio_group_wall_s": wall,
        }
    for wl in wls[len(jobs):]:
        res[wl] = RuntimeError(f"fio did not run it (rc {r.returncode}): {(r.stderr or '').strip()[-300:]}")
    return res


def pagecache_read(dev):
    """Cached growth of an O_DIRECT read of PAGECACHE_MB through dev, after dropping caches."""
    drop_caches()
    time.sleep(0.2)
    c0 = meminfo_kib("Cached")
    w0 = time.monotonic()
    sh(["dd", f"if={dev}", "of=/dev/null", "bs=1M", f"count={PAGECACHE_MB}", "iflag=direct",
        "status=none"])
    secs = time.monotonic() - w0
    c1 = meminfo_kib("Cached")
    return {"read_mib": PAGECACHE_MB, "cached_before_kib": c0, "cached_after_kib": c1,
            "growth_mib": (c1 - c0) / 1024, "secs": secs}


def pagecache_write(dev):
    """Cached growth of an O_DIRECT write of PAGECACHE_MB through dev (and an fsync), after
    dropping caches. Overwrites the start of the backing file with zeroes."""
    drop_caches()
    time.sleep(0.2)
    c0 = meminfo_kib("Cached")
    w0 = time.monotonic()
    sh(["dd", "if=/dev/zero", f"of={dev}", "bs=1M", f"count={PAGECACHE_MB}", "oflag=direct",
        "conv=fsync", "status=none"])
    secs = time.monotonic() - w0
    c1 = meminfo_kib("Cached")
    return {"write_mib": PAGECACHE_MB, "write_growth_mib": (c1 - c0) / 1024, "write_secs": secs}


# --- main --------------------------------------------------------------------------------------


def main():
    if os.geteuid() != 0:
        sys.exit("guest-bench.py must run as root (in the VM)")
    os.makedirs(OUT, exist_ok=True)
    result_path = os.path.join(OUT, "bench.json")
    notes = []
    drivers = {"raw": Raw(), "loop": Loop("loop"), "rust_loop": Loop("rust_loop"),
               "rust_loop_mq2": Loop("rust_loop", 2),
               "rust_loop_b": Loop("rust_loop", None, KO_B, "BENCH_B_PARAMS"), "ublk": Ublk()}
    active = list(DRIVERS)
    if "ublk" in active and not (RUBLK and os.access(RUBLK, os.X_OK)):
        notes.append(f"ublk cells skipped: rublk not available ({RUBLK_NOTE or 'BENCH_RUBLK unset'})")
        active.remove("ublk")
    if not os.path.exists(KO):
        for d in ("rust_loop", "rust_loop_mq2"):
            if d in active:
                notes.append(f"{d} cells skipped: rust_loop.ko not built")
                active.remove(d)
    if "rust_loop_b" in active and not os.path.exists(KO_B):
        notes.append(f"rust_loop_b cells skipped: {KO_B} does not exist")
        active.remove("rust_loop_b")
    for n in notes:
        log("NOTE: " + n)

    res = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "kernel": platform.release(),
            "kernel_version": read("/proc/version"),
            "cpus": os.cpu_count(),
            "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                               if l.startswith("model name")), "?"),
            "mem_total_kib": meminfo_kib("MemTotal"),
            "accel": ENV.get("BENCH_ACCEL", "TCG"),
            "clock": CLOCK,
            "fio": sh(["fio", "--version"]).stdout.strip(),
            "rublk": (sh([RUBLK, "--version"], check=False).stdout.strip()
                      if "ublk" in active else None),
            "ublk_opts": UBLK_OPTS,
            "git": ENV.get("BENCH_GIT", ""),
            "runtime_s": RUNTIME, "rounds": ROUNDS, "file_mib": FILE_MB,
            "pagecache_read_mib": PAGECACHE_MB,
            "b_ko": ENV.get("BENCH_B_KO") or None if "rust_loop_b" in active else None,
            "b_params": ENV.get("BENCH_B_PARAMS", "") if "rust_loop_b" in active else None,
            "drivers": active, "backings": BACKINGS, "modes": MODES, "workloads": WL_NAMES,
            "workload_fio": {w: WORKLOADS[w] for w in WL_NAMES},
            "hz": HZ,
        },
        "notes": notes,
        "samples": [],
        "pagecache": [],
        "errors": [],
    }

    def save():
        tmp = result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, result_path)

    save()
    files = setup_backings()
    res["meta"]["setup_s"] = round(time.monotonic() - T0, 1)

    def modes_of(d):
        if d in ("raw", "rust_loop_mq2"):
            return ["dio"]
        return MODES if d in ("rust_loop", "rust_loop_b") else [m for m in MODES if m != "dontcache"]

    def wls_of(d):
        return [w for w in WL_NAMES if w in MQ_WORKLOADS] if d == "rust_loop_mq2" else WL_NAMES

    per_round = sum(len(modes_of(d)) * len(wls_of(d)) for d in active) * len(files)
    total = per_round * ROUNDS
    done = 0
    bench_t0 = time.monotonic()
    log(f"{total} cells: {ROUNDS} rounds x {per_round} ({', '.join(active)}; "
        f"{', '.join(files)}; {', '.join(MODES)}; {len(WL_NAMES)} workloads), {RUNTIME:g}s each")

    def load(dname):
        """Loads a driver (swapping loop.ko and rust_loop.ko as needed); False on failure."""
        try:
            drivers[dname].load()
            return True
        except Exception as e:  # noqa: BLE001 - record and go on with the other drivers
            msg = f"{dname}: load failed: {e}"
            log("ERROR: " + msg)
            res["errors"].append(msg)
            return False

    # Drivers alternate within each (backing, mode) group, in an order rotated from group to
    # group and round to round, so that a slow drift of the machine (TCG, a shared host) spreads
    # over all of them instead of landing on whichever ran last.
    group = 0
    for rnd in range(ROUNDS):
        log(f"round {rnd + 1}/{ROUNDS}")
        for backing, file in files.items():
            for mode in MODES:
                ds = [d for d in active if mode in modes_of(d)]
                k = group % len(ds)
                group += 1
                order = ds[k:] + ds[:k]
                log(f"round {rnd + 1}: {backing} {mode}: {' -> '.join(order)}")
                for dname in order:
                    drv = drivers[dname]
                    wls = wls_of(dname)
                    if not load(dname):
                        done += len(wls)
                        continue
                    try:
                        dev, info = drv.attach(file, mode)
                    except Exception as e:  # noqa: BLE001
                        msg = f"round {rnd + 1} {dname} {backing} {mode}: attach failed: {e}"
                        log("ERROR: " + msg)
                        res["errors"].append(msg)
                        done += len(wls)
                        continue
                    if mode == "dio" and info.get("dio") == 0:
                        msg = f"{dname} {backing}: asked for direct I/O but the device reports dio=0"
                        if msg not in res["notes"]:
                            res["notes"].append(msg)
                            log("NOTE: " + msg)
                    log(f"  {dname}: {dev} (dio={info.get('dio')}): {len(wls)} workloads, "
                        f"{RUNTIME:g}s each")
                    t_s = round(time.monotonic() - bench_t0, 1)
                    results = run_group(dev, wls, file, dname == "raw")
                    for wl in wls:
                        done += 1
                        r = results[wl]
                        if isinstance(r, Exception):
                            msg = f"round {rnd + 1} {dname} {backing} {mode} {wl}: {r}"
                            log("ERROR: " + msg)
                            res["errors"].append(msg)
                            continue
                        cell = {"round": rnd + 1, "driver": dname, "backing": backing,
                                "mode": mode, "workload": wl, "t_s": t_s,
                                **{f"dev_{k}": v for k, v in info.items()}, **r}
                        res["samples"].append(cell)
                        el = time.monotonic() - bench_t0
                        eta = el / done * (total - done)
                        log(f"{done:3d}/{total} r{rnd + 1} {dname:9s} {backing:5s} {mode:8s} "
                            f"{wl:18s} {cell['iops']:9.0f} IOPS {cell['bw_mib_s']:7.1f} MiB/s "
                            f"{cell['ctxt_per_io']:6.2f} ctx/IO {cell['cpu_us_per_io']:8.1f} us CPU/IO"
                            f"  (ETA {int(eta // 60)}:{int(eta % 60):02d})")
                    drv.detach(dev)
                    save()

    # Page-cache growth of an O_DIRECT read through each driver in each mode, on the disk backing.
    if "disk" in files and PAGECACHE_MB > 0:
        log(f"page cache: O_DIRECT read of {PAGECACHE_MB} MiB through each driver, caches dropped first")
        for dname in active:
            if dname == "rust_loop_mq2" or not load(dname):
                continue
            drv = drivers[dname]
            for mode in modes_of(dname):
                try:
                    dev, info = drv.attach(files["disk"], mode)
                    try:
                        pc = pagecache_read(dev)
                        pc.update(pagecache_write(dev))
                    finally:
                        drv.detach(dev)
                except Exception as e:  # noqa: BLE001
                    msg = f"pagecache {dname} {mode}: {e}"
                    log("ERROR: " + msg)
                    res["errors"].append(msg)
                    continue
                pc.update({"driver": dname, "backing": "disk", "mode": mode,
                           "dev_dio": info.get("dio")})
                res["pagecache"].append(pc)
                save()
                log(f"page cache: {dname:9s} {mode:9s} read {pc['read_mib']} MiB O_DIRECT -> "
                    f"Cached +{pc['growth_mib']:.1f} MiB ({pc['secs']:.1f}s); write -> "
                    f"+{pc['write_growth_mib']:.1f} MiB ({pc['write_secs']:.1f}s)")
    try:
        unload_loop_drivers()
    except Exception as e:  # noqa: BLE001
        res["errors"].append(f"unload: {e}")

    res["meta"]["bench_s"] = round(time.monotonic() - bench_t0, 1)
    res["meta"]["total_s"] = round(time.monotonic() - T0, 1)
    save()
    for m in ("/tmp/bench/disk", "/tmp/bench/nullb"):
        sh(["umount", m], check=False)
    log(f"done: {len(res['samples'])} samples, {len(res['errors'])} errors -> {result_path}")


if __name__ == "__main__":
    main()
