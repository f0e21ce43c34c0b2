#!/usr/bin/env python3
"""Crash consistency below the loop device: one run of one driver (docs/testing.md "Crash
consistency").

    crash.py --driver rust_loop|loop --mode dio|buffered --backing xfs|ext4 --upper ext4|xfs
             --disk DEV --offset BYTES --slot K --cuts N --points N --out FILE [--seed N]

The stack, bottom up, on a region of DEV (dm-linear):

    data region -> dm-log-writes (log region) -> dm-flakey -> BACKING file system
        -> upper.img  -> loop device (MODE) -> UPPER file system (mounted -o discard)
        -> raw.img    -> loop device (MODE), no file system
        -> det.img    -> loop device (MODE) bound, written, flushed and cleared in rounds
        -> fa, fb     -> a read-only loop device switched between them by LOOP_CHANGE_FD

The workload (workload.py; fsstress beside it) records in the model (model.py) every
acknowledgement of durability and places a dm-log-writes mark after each. Then:

1. N cuts: at a random moment dm-flakey starts dropping every write (fstests'
   _flakey_drop_and_remount); everything is torn down, the table restored, the backing file
   system and the upper one mounted again (their logs replayed: the time to recover), every
   object acknowledged durable before the cut checked, the upper file system unmounted and
   checked (e2fsck -fn, xfs_repair -n), mounted again, and the workload goes on.
2. After the run, the log is replayed (fstests' replay-log) onto a replay region up to the last
   flush or FUA entry before each of N marks spread over the run (the disk that lost its
   volatile cache then), and each is checked the same way, on a snapshot (dm-snapshot) of the
   replayed region.

Writes one JSON object (the figures) to --out; exits 1 if anything acknowledged was lost, a
check failed or the workload failed.
"""
import argparse
import fcntl
import json
import mmap
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sysio  # noqa: E402
from model import Blocks, Files, Model, ZERO4K  # noqa: E402
import report  # noqa: E402
import workload  # noqa: E402

MIB = 1 << 20
DATA_SIZE = 224 * MIB      # the backing file system (and the replay region)
UPPER_SIZE = 96 * MIB      # upper.img
RAW_SIZE = 4 * MIB         # raw.img
DET_SIZE = 1 * MIB         # det.img
CFD_SIZE = 64 << 10        # fa, fb
DEEP_SIZE = 2 * MIB        # deep, on the upper file system
FILE_WRITERS = 2           # directories w0, w1 on the upper file system


def region_mib(stack, log_mib):
    """The MiB of disk a run takes: the log and replay regions (shutdown: none; the data region
    is in memory, see Run.regions)."""
    return 0 if stack == "shutdown" else DATA_SIZE // MIB + log_mib


# mkfs.xfs refuses file systems under 300 MB unless run by fstests (these variables).
FSTESTS_ENV = {"TEST_DIR": "/tmp", "TEST_DEV": "/dev/null", "QA_CHECK_FS": "1"}
LOG_MAGIC = 0x6A736677736872
FS_IOC_SHUTDOWN = 0x8004587D       # _IOR('X', 125, __u32): xfs, ext4
FS_SHUTDOWN_NOLOGFLUSH = 2
LOG_FLUSH, LOG_FUA, LOG_DISCARD, LOG_MARK = 1, 2, 4, 8


def sh(*cmd, check=True, env=None, timeout=600):
    """Runs a command, returns (status, output)."""
    e = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                       timeout=timeout, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stdout.strip()[-800:]}")
    return p.returncode, p.stdout


def mkfs(fs, dev, nodiscard=False, small=False):
    if fs == "xfs":
        # Two allocation groups on the small upper file system: xfs_repair's time grows with
        # them.
        sh("mkfs.xfs", "-q", "-f", *(["-K"] if nodiscard else []),
           *(["-d", "agcount=2"] if small else []), dev, env=FSTESTS_ENV)
    else:
        sh("mkfs.ext4", "-q", "-F", *(["-E", "nodiscard"] if nodiscard else []), dev)


def fsck(fs, image):
    """e2fsck -fn / xfs_repair -n of the unmounted file system in the image file `image`:
    (clean, output). The image, not the loop device over it: the same bytes (the loop device
    maps the whole file; unmounting wrote everything back through it), read through the
    backing file system's page cache, two to three times faster under TCG."""
    if fs == "xfs":
        rc, out = sh("xfs_repair", "-n", "-f", image, check=False)
    else:
        rc, out = sh("e2fsck", "-fn", image, check=False)
    return rc == 0, out


class Figures:
    """What a run reports."""

    def __init__(self, kind):
        self.kind = kind
        self.points = 0          # points checked
        self.objects = 0         # objects checked (sum over points)
        self.lost = 0            # acknowledged objects missing or wrong
        self.fscks = 0           # e2fsck/xfs_repair runs
        self.fsck_failed = 0
        self.mount_failed = 0
        self.details = []        # the first losses and failures
        # Seconds to recover: from the cut's table restored (a replayed point's snapshot made)
        # to the upper file system mounted, both logs replayed.
        self.recover = []
        self.check_secs = 0.0

    def note(self, text):
        if len(self.details) < 20:
            self.details.append(text)

    def as_dict(self):
        rec = sorted(self.recover)
        return {
            "points": self.points, "objects": self.objects, "lost": self.lost,
            "fscks": self.fscks, "fsck_failed": self.fsck_failed, "mount_failed": self.mount_failed,
            "recover_mean": round(sum(rec) / len(rec), 2) if rec else None,
            "recover_max": round(rec[-1], 2) if rec else None,
            "check_secs": round(self.check_secs, 1), "details": self.details,
        }


class Run:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.p = f"crash{a.slot}-"
        self.dio = a.mode == "dio"
        self.mnt = f"/tmp/rust-loop-crash/{a.slot}"
        self.bmnt = f"{self.mnt}/backing"
        self.umnt = f"{self.mnt}/upper"
        self.cmnt = f"{self.mnt}/check-backing"
        self.cumnt = f"{self.mnt}/check-upper"
        for d in (self.bmnt, self.umnt, self.cmnt, self.cumnt):
            os.makedirs(d, exist_ok=True)
        self.shutdown = a.stack == "shutdown"
        self.log_size = a.log_mb * MIB
        self.model = Model(mark=None if self.shutdown else self.mark)
        self.files = Files(self.model)
        self.raw = Blocks(self.model, "raw")
        self.det = Blocks(self.model, "det")
        self.cfd = {"fa": Blocks(self.model, "fa"), "fb": Blocks(self.model, "fb")}
        self.deep = Blocks(self.model, "deep")
        self.content = [{} for _ in range(FILE_WRITERS)]
        self.counter = [0]
        self.cuts = Figures("cuts")
        self.replays = Figures("replay")
        self.errors = []
        # The counters of the ways a write ends that the report requires.
        self.counters = sysio.DevCounters(c for _, c, _ in report.PATHS)
        self.work = {}
        self.extra_devs = []
        self.procs = []
        self.threads = []
        self.upper_dev = self.raw_dev = None
        self.marks_failed = 0
        self.log_status = ""
        self.phases = {}
        self.segment_no = 0

    def phase(self, name, t0):
        """Adds the seconds since `t0` to phase `name`; returns now."""
        now = time.monotonic()
        self.phases[name] = self.phases.get(name, 0.0) + now - t0
        return now

    # ---- devices ----
    def mark(self, name):
        try:
            sysio.dm_message(f"{self.p}lw", f"mark {name}")
        except OSError:
            self.marks_failed += 1

    def regions(self):
        """The data region: a null_blk device in memory with one hardware queue. Below
        dm-log-writes, flushes must complete in the order they were issued: its log puts the
        writes a flush covers before that flush's entry when the flush completes, so a later
        flush completing first (virtio-blk has a queue per CPU, each sequencing only its own
        flushes) would list writes it made durable after it, and a replay to it would miss them.
        On the disk: the log and the replay region (zeroed, as the data region starts)."""
        a, dev = self.a, self.a.disk
        base = a.offset // 512
        ds, ls = DATA_SIZE // 512, self.log_size // 512
        self.data = sysio.nullb_create(f"{self.p}data", DATA_SIZE // MIB)
        if not self.shutdown:
            self.log = sysio.dm_create(f"{self.p}log", f"0 {ls} linear {dev} {base}")
            self.replay = sysio.dm_create(f"{self.p}replay", f"0 {ds} linear {dev} {base + ls}")
            fd = os.open(self.replay, os.O_WRONLY)
            try:
                sysio.blk_range_ioctl(fd, sysio.BLKZEROOUT, 0, DATA_SIZE)
            finally:
                os.close(fd)
        self.ds = ds

    def flakey_table(self, drop):
        if drop:
            return f"0 {self.ds} flakey {self.lw} 0 0 180 1 drop_writes"
        return f"0 {self.ds} flakey {self.lw} 0 180 0"

    def build(self):
        if self.shutdown:
            # null_blk takes NOWAIT bios: rust_loop's NOWAIT path serves here.
            self.fk = self.data
        else:
            self.lw = sysio.dm_create(f"{self.p}lw",
                                      f"0 {self.ds} log-writes {self.data} {self.log}")
            self.fk = sysio.dm_create(f"{self.p}fk", self.flakey_table(False))
        mkfs(self.a.backing, self.fk)
        self.mount_backing(self.fk, self.bmnt)
        b = self.bmnt
        fd = os.open(f"{b}/upper.img", os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, UPPER_SIZE)
        os.close(fd)
        for name, size in (("raw.img", RAW_SIZE), ("det.img", DET_SIZE)):
            with open(f"{b}/{name}", "wb") as f:
                f.truncate(size)
        for name in ("fa", "fb"):
            with open(f"{b}/{name}", "wb") as f:
                f.write(bytes(CFD_SIZE))
        self.attach()
        mkfs(self.a.upper, self.upper_dev, nodiscard=True, small=True)
        self.mount_upper(self.upper_dev, self.umnt)
        # The deep writer's file, zeroes (written extents: its O_DIRECT writes need no
        # allocation), and the file writers' directories: durable from the start (the model
        # knows nothing of them; a cut before a directory's creation was made durable would
        # lose it).
        with open(f"{self.umnt}/deep", "wb") as f:
            f.write(bytes(DEEP_SIZE))
        for i in range(FILE_WRITERS):
            os.makedirs(f"{self.umnt}/w{i}", exist_ok=True)
        # The start is durable: the upper file system, then the backing one with the images.
        sysio.syncfs(self.umnt)
        sysio.syncfs(self.bmnt)

    def mount_backing(self, dev, where):
        # lazytime on the shutdown stack: timestamp updates do not send writes to the worker
        # (README), so the NOWAIT path serves most of them.
        opts = (["nouuid"] if self.a.backing == "xfs" else []) + \
            (["lazytime"] if self.shutdown else [])
        sysio.mount(dev, where, self.a.backing, ",".join(opts))

    def mount_upper(self, dev, where):
        opts = ["discard"] + (["nouuid"] if self.a.upper == "xfs" else [])
        sysio.mount(dev, where, self.a.upper, ",".join(opts))

    def attach(self):
        self.upper_dev = sysio.loop_attach(f"{self.bmnt}/upper.img", self.dio)
        self.upper_id = f"{self.bmnt}/upper.img"
        self.raw_dev = sysio.loop_attach(f"{self.bmnt}/raw.img", self.dio)
        self.raw_id = f"{self.bmnt}/raw.img"
        self.base_counters = {d: self.counters.begin(d) for d in (self.upper_dev, self.raw_dev)}

    def detach_all(self):
        for d in (self.upper_dev, self.raw_dev):
            self.counters.end(d, self.base_counters[d])
        for d in list(self.extra_devs):
            sysio.loop_detach(*d)
            self.extra_devs.remove(d)
        sysio.loop_detach(self.raw_dev, self.raw_id)
        sysio.loop_detach(self.upper_dev, self.upper_id)

    # ---- workload ----
    def start(self):
        """Starts the workload threads and fsstress."""
        self.stop = threading.Event()
        seed = self.rng.getrandbits(32)
        ncpu = os.cpu_count() or 1
        raw_blocks = RAW_SIZE // 4096
        half = raw_blocks // 2
        inflight = [0]
        t = [workload.FileWriter(self.files, self.umnt, i, self.stop, seed + i, self.content[i],
                                 self.counter) for i in range(FILE_WRITERS)]
        t += [workload.RawWriter(self.raw, self.raw_dev, i * half, half, i, i % ncpu, self.stop,
                                 seed + 10 + i, inflight) for i in range(2)]
        t.append(workload.Knobs([self.upper_dev, self.raw_dev], self.raw_dev, self.dio, self.stop,
                                seed + 20, inflight))
        t.append(workload.Detacher(self.det, f"{self.bmnt}/det.img", DET_SIZE // 4096, self.dio,
                                   self.stop, seed + 30, self.extra_devs, self.counters))
        t.append(workload.ChangeFd({f"{self.bmnt}/{k}": v for k, v in self.cfd.items()},
                                   [f"{self.bmnt}/fa", f"{self.bmnt}/fb"], CFD_SIZE // 4096,
                                   self.stop, seed + 40, self.extra_devs, self.counters))
        t.append(workload.DeepWriter(self.deep, f"{self.umnt}/deep", DEEP_SIZE // 4096,
                                     self.stop, seed + 50))
        # Every other stretch the workload itself runs in the child cgroup: its requests go to
        # a per-cgroup worker then (fsstress's always do).
        self.segment_no += 1
        cg = self.a.cgroup if self.segment_no % 2 else os.path.dirname(self.a.cgroup)
        t0 = time.monotonic()
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        t0 = self.phase("start.cgroup", t0)
        self.procs = []
        if self.a.fsstress:
            # In a child cgroup: its requests go to a per-cgroup worker. Started before the
            # threads, which would hold the GIL that Popen's Python code needs.
            self.procs.append(("fsstress", subprocess.Popen(
                ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.a.cgroup,
                 self.a.fsstress, "-d", f"{self.umnt}/fss", "-p", "1", "-n", "1000000",
                 "-s", str(seed & 0xFFFF)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)))
        t0 = self.phase("start.fsstress", t0)
        with self.model.lock:
            self.model.stopped = False
        go = threading.Event()
        for th in t:
            th.go = go
            th.start()
        go.set()
        self.threads = t
        self.phase("start.threads", t0)

    def check_workload(self):
        for th in self.threads:
            if th.error:
                raise RuntimeError(th.error)
        for name, p in self.procs:
            if p.poll() is not None and p.returncode != 0:
                err = p.stderr.read().decode(errors="replace")[-500:]
                raise RuntimeError(f"{name} failed (status {p.returncode}): {err}")

    def halt(self):
        """Stops the workload: threads joined, fsstress killed."""
        self.stop.set()
        for name, p in self.procs:
            # fsstress forks its workers: the whole process group goes.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            end = time.monotonic() + 30
            while True:
                try:
                    os.killpg(p.pid, 0)
                except ProcessLookupError:
                    break
                if time.monotonic() > end:
                    raise RuntimeError(f"{name}'s processes did not end after SIGKILL")
                time.sleep(0.05)
        for th in self.threads:
            th.join(timeout=120)
            if th.is_alive():
                raise RuntimeError(f"workload thread {th.name} did not stop")
            st = getattr(th, "stats", None)
            if st:
                for k, v in st.items():
                    self.work[f"{th.name.rstrip('0123456789')}.{k}"] = \
                        self.work.get(f"{th.name.rstrip('0123456789')}.{k}", 0) + v
            self.work["ops"] = self.work.get("ops", 0) + th.ops
        self.threads = []

    # ---- checks ----
    def verify(self, s, backing, upper, fig, where):
        """Checks every object known at point `s`: files under `upper`, blocks of the images
        under `backing`. Returns the number lost."""
        lost = 0
        exp, _ = self.files.expected(s)
        for name, state in exp.items():
            path = f"{upper}/{name}"
            try:
                with open(path, "rb") as f:
                    data = f.read()
                found = (len(data), zlib.crc32(data))
            except FileNotFoundError:
                found = None
            if found != state:
                lost += 1
                fig.note(f"{where}: file {name}: expected {state}, found {found}; "
                         f"{self.explain_file(name, s, found)}")
        n = len(exp)
        for blocks, path in ((self.raw, f"{backing}/raw.img"), (self.det, f"{backing}/det.img"),
                             (self.cfd["fa"], f"{backing}/fa"), (self.cfd["fb"], f"{backing}/fb"),
                             (self.deep, f"{upper}/deep")):
            bexp, _ = blocks.expected(s)
            if not bexp:
                continue
            with open(path, "rb") as f:
                data = f.read()
            mv = memoryview(data)
            for b, allowed in bexp.items():
                blk = mv[b * 4096:(b + 1) * 4096]
                crc = zlib.crc32(blk) if len(blk) == 4096 else None
                if crc not in allowed:
                    lost += 1
                    fig.note(f"{where}: {blocks.name} block {b}: {self.explain(blocks, b, s, crc)}")
            n += len(bexp)
        fig.objects += n
        fig.lost += lost
        return lost

    def explain_file(self, name, s, found):
        """A wrong file's operations (op, started, acknowledged, meant to leave) and which of
        them left what was found."""
        ops = self.files.hist.get(name, [])
        which = "none of its states"
        for i, (start, ack, st, op, intended) in enumerate(ops):
            if found in (st, intended):
                which = f"operation {i} ({op})"
        hist = "; ".join(f"{i}: {op} {start}-{ack} -> {intended}"
                         for i, (start, ack, st, op, intended) in enumerate(ops[-6:], max(0, len(ops) - 6)))
        return f"found is what {which} left; operations: {hist}"

    @staticmethod
    def explain(blocks, b, s, crc):
        """What a wrong block holds: which of its writes (by sequence numbers), against the
        one expected at `s`."""
        h = blocks.hist.get(b, [])
        cov = blocks.covered_upto(s)
        found = "zeroes" if crc == ZERO4K else "unknown data"
        for i, (issue, complete, alw) in enumerate(h):
            if crc in alw and crc != ZERO4K:
                found = f"write {i} (issued {issue}, completed {complete})"
        writes = "; ".join(f"{i}: {issue}-{complete}" + (" zero" if alw == {ZERO4K} else "")
                           for i, (issue, complete, alw) in enumerate(h[-6:], max(0, len(h) - 6)))
        return f"holds {found}; point {s}, flushes cover writes completed before {cov}; " \
               f"writes (issued-completed): {writes}"

    def diagnose(self, dev):
        """Evidence for a file system that does not mount: the kernel log's end and the
        device's first sectors."""
        _, log = sh("dmesg", check=False)
        _, dump = sh("od", "-A", "d", "-t", "x1", "-N", "2048", dev, check=False)
        return "kernel log: " + " | ".join(log.strip().splitlines()[-12:]) + \
            " || first sectors: " + " | ".join(dump.strip().splitlines()[:12])

    def check_upper_fsck(self, image, fig, where):
        ok, out = fsck(self.a.upper, image)
        fig.fscks += 1
        if not ok:
            fig.fsck_failed += 1
            fig.note(f"{where}: {self.a.upper} check failed: {out.strip()[-600:]}")
        return ok

    # ---- cuts ----
    def cut(self):
        """A power cut at this moment: returns the point (sequence number) it happened at.
        dm-flakey drops every write from now on; on the shutdown stack the backing file system
        is shut down without writing its log (FS_IOC_SHUTDOWN, NOLOGFLUSH: what it had not
        written is lost, and no later I/O reaches the device)."""
        with self.model.lock:
            s = self.model.next()
            self.model.stopped = True
            if self.shutdown:
                self.stop.set()
                fd = os.open(self.bmnt, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("=I", FS_SHUTDOWN_NOLOGFLUSH))
                finally:
                    os.close(fd)
            else:
                sysio.dm_reload(f"{self.p}fk", self.flakey_table(True))
        return s

    def teardown_live(self):
        t = time.monotonic()
        self.halt()
        t = self.phase("cut.halt", t)
        sysio.umount(self.umnt)
        t = self.phase("cut.umount-upper", t)
        self.detach_all()
        t = self.phase("cut.detach", t)
        sysio.umount(self.bmnt)
        self.phase("cut.umount-backing", t)

    def recover_and_check(self, s, n):
        """After a cut at point `s`: restore, mount, check everything known at `s`, fsck, go
        on."""
        fig = self.cuts
        t0 = time.monotonic()
        if not self.shutdown:
            sysio.dm_reload(f"{self.p}fk", self.flakey_table(False))
        try:
            self.mount_backing(self.fk, self.bmnt)
        except OSError as e:
            fig.mount_failed += 1
            raise RuntimeError(f"cut {n}: the backing {self.a.backing} does not mount: {e}") from e
        self.attach()
        try:
            self.mount_upper(self.upper_dev, self.umnt)
        except OSError as e:
            fig.mount_failed += 1
            raise RuntimeError(f"cut {n}: the upper {self.a.upper} does not mount: {e}; "
                               f"{self.diagnose(self.upper_dev)}") from e
        fig.recover.append(time.monotonic() - t0)
        t1 = t = time.monotonic()
        self.verify(s, self.bmnt, self.umnt, fig, f"cut {n}")
        t = self.phase("cut.verify", t)
        sysio.umount(self.umnt)
        self.check_upper_fsck(f"{self.bmnt}/upper.img", fig, f"cut {n}")
        t = self.phase("cut.fsck", t)
        self.mount_upper(self.upper_dev, self.umnt)
        fig.points += 1
        fig.check_secs += time.monotonic() - t1
        self.resync()
        self.phase("cut.remount+resync", t)

    def resync(self):
        """Objects in flux at a cut are made known again: files unlinked, raw blocks zeroed and
        flushed (their content after the cut is not a promise)."""
        with self.model.lock:
            self.model.stopped = False
        for name in self.files.in_flux():
            tid, fname = name.split("/", 1)
            rec = self.files.start(name, "unlink (resync)", None)
            for suffix in ("", ".tmp"):
                try:
                    os.unlink(f"{self.umnt}/{name}{suffix}")
                except FileNotFoundError:
                    pass
            dfd = os.open(f"{self.umnt}/{tid}", os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)
            os.close(dfd)
            self.files.ack(rec, None)
            self.content[int(tid[1:])].pop(fname, None)
        for blocks, path, dev in ((self.raw, None, self.raw_dev),
                                  (self.det, f"{self.bmnt}/det.img", None),
                                  (self.cfd["fa"], f"{self.bmnt}/fa", None),
                                  (self.cfd["fb"], f"{self.bmnt}/fb", None),
                                  (self.deep, f"{self.umnt}/deep", None)):
            flux = blocks.in_flux()
            if not flux:
                continue
            recs = blocks.start(flux, lambda b, prev: [ZERO4K])
            fd = os.open(dev or path, os.O_WRONLY)
            try:
                for b in flux:
                    os.pwrite(fd, bytes(4096), b * 4096)
                blocks.done(recs)
                rec = blocks.flush_start()
                os.fsync(fd)
                blocks.flush_done(rec)
            finally:
                os.close(fd)
        # fsstress's tree is not checked: it only has to stay within the file system.
        st = os.statvfs(self.umnt)
        if st.f_bavail < st.f_blocks * 0.5:
            sh("rm", "-rf", f"{self.umnt}/fss")

    # ---- the run ----
    def run(self):
        a = self.a
        t = time.monotonic()
        self.regions()
        t = self.phase("regions", t)
        self.build()
        t = self.phase("build", t)
        n = 0
        seg_max = a.segment
        t_start = time.monotonic()
        while True:
            self.start()
            t = self.phase("start", t)
            dur = self.rng.uniform(0.2, seg_max)
            end = time.monotonic() + dur
            while time.monotonic() < end:
                time.sleep(0.05)
                self.check_workload()
            t = self.phase("segments", t)
            if n >= a.cuts:
                break
            n += 1
            s = self.cut()
            self.teardown_live()
            t = self.phase("teardown", t)
            self.recover_and_check(s, n)
            t = self.phase("recover+check", t)
        # The end of the run: the workload stops, everything is unmounted, the log closed.
        self.halt()
        sysio.umount(self.umnt)
        self.detach_all()
        sysio.umount(self.bmnt)
        self.run_secs = time.monotonic() - t_start
        if self.shutdown:
            sysio.nullb_remove(f"{self.p}data")
            return
        self.log_status = sysio.dm_status(f"{self.p}lw")
        sysio.dm_remove(f"{self.p}fk")
        sysio.dm_remove(f"{self.p}lw")
        sysio.nullb_remove(f"{self.p}data")
        t = self.phase("end", t)
        self.replay_checks()
        sysio.dm_remove(f"{self.p}replay")
        sysio.dm_remove(f"{self.p}log")
        self.phase("replay", t)

    # ---- replay ----
    def parse_log(self):
        """The log's entries: (index, byte offset, flags, mark name or None)."""
        fd = os.open(self.log, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, self.log_size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        magic, version, nr, ss = struct.unpack_from("<QQQI", mm, 0)
        if magic != LOG_MAGIC:
            raise RuntimeError(f"no dm-log-writes log on {self.log} (magic {magic:#x})")
        entries = []
        pos = ss
        for i in range(nr):
            sector, nsec, flags, dlen = struct.unpack_from("<QQQQ", mm, pos)
            name = None
            if flags & LOG_MARK:
                name = bytes(mm[pos + 32:pos + 32 + dlen]).decode(errors="replace")
            entries.append((i, pos, flags, name))
            pos += ss * (1 + (0 if flags & LOG_DISCARD else nsec))
        self.log_end = pos
        return mm, ss, entries

    def replay_checks(self):
        fig = self.replays
        mm, ss, entries = self.parse_log()
        # dm-log-writes closes the log with this mark; without it the log overflowed (or
        # logging stopped on an error) and is not the whole run.
        if not entries or entries[-1][3] != "dm-log-writes-end":
            raise RuntimeError(f"the log does not end with dm-log-writes' end mark ({len(entries)} "
                               f"entries, status '{self.log_status}'): it overflowed or stopped")
        self.log_entries = len(entries)
        self.log_bytes = self.log_end
        # The marks placed after acknowledgements, by sequence number.
        marks = [(e, int(e[3][1:])) for e in entries if e[3] and e[3].startswith("s")]
        if not marks:
            raise RuntimeError("the log holds no mark")
        want = min(self.a.points, len(marks))
        pick = sorted({round(i * (len(marks) - 1) / max(1, want - 1)) for i in range(want)})
        last_sync = -1  # the last flush or FUA entry seen
        syncs = []
        for i, _, flags, _ in entries:
            if flags & (LOG_FLUSH | LOG_FUA):
                last_sync = i
            syncs.append(last_sync)
        done = -1  # entries replayed so far: 0..done
        slice_path = f"{self.mnt}/slice.log"
        for k in pick:
            (mi, _, _, name), seq = marks[k]
            end = syncs[mi]
            # Between that entry and the mark, only marks: what is durable at the mark.
            for j in range(end + 1, mi):
                if not entries[j][2] & LOG_MARK:
                    raise RuntimeError(f"log entry {j} (flags {entries[j][2]:#x}) between the "
                                       f"last flush {end} and mark {name}")
            if end > done:
                start_pos = entries[done + 1][1]
                end_pos = entries[end + 1][1] if end + 1 < len(entries) else self.log_end
                with open(slice_path, "wb") as f:
                    sup = struct.pack("<QQQI", LOG_MAGIC, 1, end - done, ss)
                    f.write(sup + bytes(ss - len(sup)))
                    f.write(mm[start_pos:end_pos])
                t = time.monotonic()
                sh(self.a.replay_log, "--log", slice_path, "--replay", self.replay)
                os.unlink(slice_path)
                self.phase("replay-log", t)
                done = end
            self.check_replayed(seq, f"mark {name} (entry {mi}, replayed to {end})")
        mm.close()

    def check_replayed(self, s, where):
        fig = self.replays
        t0 = time.monotonic()
        snap = sysio.dm_create(f"{self.p}snap",
                               f"0 {self.ds} snapshot {self.replay} /dev/ram{self.a.slot} N 8")
        try:
            try:
                self.mount_backing(snap, self.cmnt)
            except OSError as e:
                fig.mount_failed += 1
                fig.note(f"{where}: the backing {self.a.backing} does not mount: {e}")
                return
            try:
                dev = sysio.loop_attach(f"{self.cmnt}/upper.img", False)
                ident = f"{self.cmnt}/upper.img"
                try:
                    try:
                        self.mount_upper(dev, self.cumnt)
                    except OSError as e:
                        fig.mount_failed += 1
                        fig.note(f"{where}: the upper {self.a.upper} does not mount: {e}; "
                                 f"{self.diagnose(dev)}")
                        return
                    fig.recover.append(time.monotonic() - t0)
                    t = self.phase("rp.mount", t0)
                    try:
                        self.verify(s, self.cmnt, self.cumnt, fig, where)
                    finally:
                        sysio.umount(self.cumnt)
                    t = self.phase("rp.verify", t)
                    self.check_upper_fsck(f"{self.cmnt}/upper.img", fig, where)
                    self.phase("rp.fsck", t)
                finally:
                    sysio.loop_detach(dev, ident)
            finally:
                sysio.umount(self.cmnt)
        finally:
            sysio.dm_remove(f"{self.p}snap")
            fig.points += 1
            fig.check_secs += time.monotonic() - t0

    def cleanup(self):
        """Best effort, after a failure: nothing of the run left mounted or bound."""
        try:
            if getattr(self, "stop", None):
                self.stop.set()
            for _, p in self.procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        except Exception:  # noqa: BLE001
            pass
        for m in (self.cumnt, self.cmnt, self.umnt, self.bmnt):
            subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL, check=False)
        for d in list(self.extra_devs) + [[self.raw_dev, getattr(self, "raw_id", None)],
                                          [self.upper_dev, getattr(self, "upper_id", None)]]:
            if d[0] and d[1]:
                try:
                    sysio.loop_detach(d[0], d[1], timeout=5)
                except Exception:  # noqa: BLE001
                    pass
        for n in ("snap", "fk", "lw", "log", "replay"):
            try:
                sysio.dm_remove(f"{self.p}{n}", tries=20)
            except Exception:  # noqa: BLE001
                pass
        try:
            sysio.nullb_remove(f"{self.p}data")
        except Exception:  # noqa: BLE001
            pass

    def report(self, error=None):
        a = self.a
        return {
            "driver": a.driver, "mode": a.mode, "backing": a.backing, "upper": a.upper,
            "stack": a.stack, "cpus": os.cpu_count(),
            "seed": a.seed, "cuts": self.cuts.as_dict(), "replay": self.replays.as_dict(),
            "acks": self.model.acks, "marks": len(self.model.marks),
            "marks_failed": self.marks_failed,
            "log_entries": getattr(self, "log_entries", None),
            "log_mib": round(getattr(self, "log_bytes", 0) / MIB, 1),
            "log_status": self.log_status,
            "run_secs": round(getattr(self, "run_secs", 0), 1),
            "counters": self.counters.sums, "diskstats": self.counters.disk, "work": self.work,
            "phases": {k: round(v, 1) for k, v in self.phases.items()},
            "cpu": dict(zip(("user", "sys", "children_user", "children_sys"),
                            (round(x, 1) for x in os.times()[:4]))),
            "error": error,
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", required=True, choices=("rust_loop", "loop"))
    ap.add_argument("--mode", required=True, choices=("dio", "buffered"))
    ap.add_argument("--backing", required=True, choices=("xfs", "ext4"))
    ap.add_argument("--upper", required=True, choices=("xfs", "ext4"))
    ap.add_argument("--stack", default="flakey", choices=("flakey", "shutdown"),
                    help="flakey: dm-flakey over dm-log-writes (cuts and replays); shutdown: "
                         "dm-linear (NOWAIT), cuts by FS_IOC_SHUTDOWN")
    ap.add_argument("--disk", required=True)
    ap.add_argument("--offset", type=int, required=True, help="bytes into --disk")
    ap.add_argument("--log-mb", type=int, default=1024, help="the log region (MiB)")
    ap.add_argument("--slot", type=int, default=0)
    ap.add_argument("--cuts", type=int, default=3)
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--segment", type=float, default=2.5, help="longest stretch between cuts (s)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--replay-log", required=True)
    ap.add_argument("--fsstress", default="")
    ap.add_argument("--cgroup", default="/sys/fs/cgroup/rust-loop-crash")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    if not os.path.isdir(f"/sys/module/{a.driver}"):
        sys.exit(f"crash.py: driver {a.driver} is not loaded")
    run = Run(a)
    error = None
    try:
        run.run()
    except Exception as e:  # noqa: BLE001 (reported in the figures)
        import traceback
        error = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        run.cleanup()
    rep = run.report(error)
    with open(a.out, "w") as f:
        json.dump(rep, f)
    bad = error or rep["cuts"]["lost"] or rep["replay"]["lost"] or rep["cuts"]["fsck_failed"] \
        or rep["replay"]["fsck_failed"] or rep["cuts"]["mount_failed"] or rep["replay"]["mount_failed"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
