#!/usr/bin/env python3
"""ioctl fuzzer for the loop driver (stdlib only; runs as root in the test VM).

    fuzz_ioctl.py --dir DIR [--seed N] [--iters N] [--time SECS] [--procs N] [--threads N]
                  [--devs 0,1,2,3,4,5] [--avoid 7] [--ctl-range 16-23]

--procs processes (each with its own GIL, so that both vCPUs work) of --threads threads each
(threads share a descriptor table, and some of their descriptors are closed and reopened under
the others' feet) issue random ioctls on /dev/loopN (the --devs devices and devices they create
through /dev/loop-control) and on /dev/loop-control: random numbers, loop numbers with random
arguments, and well-formed LOOP_SET_FD / LOOP_CONFIGURE / LOOP_CHANGE_FD / LOOP_CLR_FD /
LOOP_SET_STATUS(64) / LOOP_SET_CAPACITY / LOOP_SET_BLOCK_SIZE / LOOP_SET_DIRECT_IO /
LOOP_CTL_ADD / LOOP_CTL_REMOVE / LOOP_CTL_GET_FREE with hostile arguments: NULL, unmapped,
read-only and PROT_NONE pages, structures straddling an unmapped page, kernel and non-canonical
addresses, huge and negative integers, unaligned block sizes, offsets beyond the file, and every
kind of descriptor (regular files opened read-write, read-only, O_DIRECT, O_APPEND, O_PATH, a
memfd, a directory, a pipe, a socket, /dev/null, a procfs file, the loop device itself, another
loop device, a closed descriptor, out-of-range numbers). Reads and writes on the devices and
re-opens in other modes are mixed in. Devices in --avoid are never touched (the test runs fio
--verify on one of them meanwhile).

Thread t of process p draws from random.Random(seed * 1000 + p * 100 + t), so a seed replays
each thread's sequence of operations (not their interleaving). Stops after --iters ioctls in all or --time seconds;
fewer than --min-iters (default --iters) ioctls by then is a failure.

Checks: every LOOP_GET_STATUS(64) that succeeds returns a sane structure (lo_number of the
device, only known lo_flags bits, NUL-terminated names, zero encryption fields); each
well-formed loop ioctl fails only with an errno loop.c can return for it (ALLOWED below). Prints
the seed, the counts and a histogram of results; exits 1 when a check failed or the time ran
out before --min-iters ioctls, 3 when a thread got stuck in the kernel.
"""
import argparse
import collections
import ctypes
import errno
import json
import mmap
import os
import random
import select
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

PAGE = 4096
libc = ctypes.CDLL(None, use_errno=True)
libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
libc.ioctl.restype = ctypes.c_int
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long)
libc.mmap.restype = ctypes.c_void_p
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20

LOOP_NRS = [L.LOOP_SET_FD, L.LOOP_CLR_FD, L.LOOP_SET_STATUS, L.LOOP_GET_STATUS,
            L.LOOP_SET_STATUS64, L.LOOP_GET_STATUS64, L.LOOP_CHANGE_FD, L.LOOP_SET_CAPACITY,
            L.LOOP_SET_DIRECT_IO, L.LOOP_SET_BLOCK_SIZE, L.LOOP_CONFIGURE]
CTL_NRS = [L.LOOP_CTL_ADD, L.LOOP_CTL_REMOVE, L.LOOP_CTL_GET_FREE]
NAMES = {v: k for k, v in L.CMD_NUMBERS.items()}

# Errors loop.c (drivers/block/loop.c, 7.3) can return for each well-formed operation, whatever
# the interleaving; EINTR/EAGAIN/ENOMEM are always tolerated. The fuzzer fails on anything else.
_ANY = {errno.EINTR, errno.EAGAIN, errno.ENOMEM}
ALLOWED = {
    # loop_configure: fget, loop_check_backing_file, bd_prepare_to_claim, lo_state,
    # loop_validate_file, flags, block size, encryption fields and offsets
    # (loop_set_status_from_info), the configuration copy.
    "set-fd": {errno.EBADF, errno.EINVAL, errno.EBUSY},
    "configure": {errno.EBADF, errno.EINVAL, errno.EBUSY, errno.EOVERFLOW, errno.EFAULT},
    "change-fd": {errno.EBADF, errno.EINVAL, errno.ENXIO},
    "clr-fd": {errno.ENXIO},
    "set-status": {errno.ENXIO, errno.EINVAL, errno.EFAULT, errno.EOVERFLOW, errno.EPERM},
    "set-status64": {errno.ENXIO, errno.EINVAL, errno.EFAULT, errno.EOVERFLOW, errno.EPERM},
    "get-status": {errno.ENXIO, errno.EINVAL, errno.EFAULT, errno.EOVERFLOW},
    "get-status64": {errno.ENXIO, errno.EINVAL, errno.EFAULT},
    "set-capacity": {errno.ENXIO, errno.EPERM},
    # bd_prepare_to_claim without O_EXCL: EBUSY while another thread holds it exclusively.
    "set-block-size": {errno.ENXIO, errno.EINVAL, errno.EPERM, errno.EBUSY},
    "set-direct-io": {errno.ENXIO, errno.EINVAL, errno.EPERM},
    # loop_add: idr_alloc (EEXIST), add_disk (EINVAL for a minor beyond MINORMASK).
    "ctl-add": {errno.EEXIST, errno.EINVAL},
    "ctl-remove": {errno.ENODEV, errno.EBUSY, errno.EINVAL},
    "ctl-get-free": set(),
}


def errname(e):
    return errno.errorcode.get(e, str(e))


class Area:
    """Per-thread memory: a read-write page, a read-only page, a PROT_NONE page, and the address
    of an unmapped page."""

    def __init__(self, rng):
        base = libc.mmap(None, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        self.rw = base
        self.ro = base + PAGE
        self.none = base + 2 * PAGE
        self.unmapped = base + 3 * PAGE
        ctypes.memmove(self.ro, rng.randbytes(PAGE), PAGE)
        libc.mprotect(self.ro, PAGE, PROT_READ)
        libc.mprotect(self.none, PAGE, PROT_NONE)
        libc.munmap(self.unmapped, PAGE)

    def put(self, data, at=0):
        ctypes.memmove(self.rw + at, data, len(data))
        return self.rw + at

    def get(self, n, at=0):
        return ctypes.string_at(self.rw + at, n)


class Shared:
    """What the threads of one process share."""

    def __init__(self, args, proc, progress):
        self.args = args
        self.proc = proc
        self.progress_map = progress
        self.volatile = []  # descriptors any thread may close and reopen
        self.vlock = threading.Lock()
        self.lock = threading.Lock()
        self.ioctls = 0
        self.other_ops = 0
        self.hist = collections.Counter()
        self.secs = collections.Counter()
        self.failures = []
        self.stop = False
        self.deadline = args.start + args.time

    def account(self, key, n=1):
        with self.lock:
            self.hist[key] += n

    def report_progress(self, thread, done):
        slot = self.proc * self.args.threads + thread
        struct.pack_into("Q", self.progress_map, 8 * slot, done)

    def account_time(self, key, secs):
        with self.lock:
            self.secs[key] += secs

    def failure(self, msg):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(msg)


def raw_ioctl(fd, nr, arg):
    """Returns 0 (or the result) on success, -errno on failure."""
    r = libc.ioctl(fd, nr & 0xFFFFFFFF, ctypes.c_void_p(arg & 0xFFFFFFFFFFFFFFFF))
    if r < 0:
        return -ctypes.get_errno()
    return r


class Fuzzer(threading.Thread):
    def __init__(self, idx, shared, budget):
        super().__init__(name="fuzz%d.%d" % (shared.proc, idx), daemon=True)
        self.idx = idx
        self.sh = shared
        self.a = shared.args
        self.budget = budget
        self.rng = random.Random(self.a.seed * 1000 + shared.proc * 100 + idx)
        self.area = Area(self.rng)
        self.done = 0
        self.devfds = {}      # loop number -> (fd, mode string)
        self.pool = []        # (kind, fd or number)
        self.keep = []        # objects that keep descriptors open
        self.ctl = os.open("/dev/loop-control", os.O_RDWR)
        self.current = "start"

    # ---- descriptors ------------------------------------------------------------------------
    def build_pool(self):
        d = self.a.dir
        rng = self.rng
        files = sorted(f for f in os.listdir(d) if f.startswith("f"))
        for f in files:
            p = os.path.join(d, f)
            for kind, flags in (("rw", os.O_RDWR), ("ro", os.O_RDONLY),
                                ("direct", os.O_RDWR | os.O_DIRECT),
                                ("append", os.O_RDWR | os.O_APPEND),
                                ("path", os.O_PATH)):
                try:
                    self.pool.append(("%s:%s" % (kind, f), os.open(p, flags)))
                except OSError as e:
                    # O_DIRECT on tmpfs before 6.6 etc.
                    self.sh.account("pool-open/%s/%s" % (kind, errname(e.errno)))
        self.pool.append(("dir", os.open(d, os.O_RDONLY | os.O_DIRECTORY)))
        r, w = os.pipe()
        self.pool += [("pipe-r", r), ("pipe-w", w)]
        s1, s2 = socket.socketpair()
        self.keep += [s1, s2]
        self.pool.append(("socket", s1.fileno()))
        self.pool.append(("devnull", os.open("/dev/null", os.O_RDWR)))
        self.pool.append(("proc", os.open("/proc/version", os.O_RDONLY)))
        try:
            mfd = os.memfd_create("fuzz%d" % self.idx)
            os.ftruncate(mfd, 1 << 20)
            self.pool.append(("memfd", mfd))
        except (AttributeError, OSError):
            pass
        c = os.open("/dev/null", os.O_RDONLY)
        os.close(c)
        self.closed_fd = c
        rng.shuffle(self.pool)
        self.files = [os.path.join(d, f) for f in files]
        with self.sh.vlock:
            for _ in range(2):
                self.sh.volatile.append(os.open(rng.choice(self.files), os.O_RDWR))

    def open_dev(self, n, mode=None):
        rng = self.rng
        if mode is None:
            mode = rng.choice(["rw", "rw", "ro", "ro", "rw-excl", "ro-nonblock"])
        flags = {"rw": os.O_RDWR, "ro": os.O_RDONLY, "rw-excl": os.O_RDWR | os.O_EXCL,
                 "ro-nonblock": os.O_RDONLY | os.O_NONBLOCK}[mode]
        try:
            fd = os.open("/dev/loop%d" % n, flags)
        except OSError as e:
            self.sh.account("open/%s" % errname(e.errno))
            return None
        old = self.devfds.pop(n, None)
        if old:
            os.close(old[0])
        while len(self.devfds) >= 2:
            m = rng.choice(sorted(self.devfds))
            os.close(self.devfds.pop(m)[0])
        self.devfds[n] = (fd, mode)
        return fd

    def dev(self):
        """A (number, fd) of a device this thread has open."""
        rng = self.rng
        if not self.devfds or rng.random() < 0.02:
            n = rng.choice(self.a.devs)
            if self.open_dev(n) is None and not self.devfds:
                return None, None
        n = rng.choice(sorted(self.devfds))
        return n, self.devfds[n][0]

    def backing_fd(self):
        """(kind, fd number) of a backing descriptor candidate of any kind."""
        rng = self.rng
        x = rng.random()
        if x < 0.60:
            return self.pool[rng.randrange(len(self.pool))]
        if x < 0.75 and self.devfds:
            n = rng.choice(sorted(self.devfds))
            return "loop%d" % n, self.devfds[n][0]
        if x < 0.80:
            return "closed", self.closed_fd
        if x < 0.88:
            # A descriptor another thread may be closing or reopening right now.
            return "volatile", rng.choice(self.sh.volatile)
        return "num", rng.choice([-1, 0, 1, 2, 1000, 65535, 1 << 20, 0x7FFFFFFF, 0xFFFFFFFF,
                                  (1 << 32) + self.pool[0][1], -2 ** 63])

    # ---- arguments --------------------------------------------------------------------------
    def bad_pointer(self, size):
        rng = self.rng
        ar = self.area
        return rng.choice([
            0, 1, 8, PAGE - 1, ar.unmapped, ar.none, ar.ro,
            ar.none - rng.randrange(1, max(2, size)),  # straddles into PROT_NONE
            ar.unmapped - rng.randrange(1, max(2, size)) + PAGE,  # ends in the unmapped page
            0xFFFF888000000000, 0xFFFFFFFF81000000, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF,
            0x00007FFFFFFFF000,
        ])

    def int_arg(self):
        rng = self.rng
        return rng.choice([0, 1, 2, 511, 512, 513, 1000, 1024, 2048, 4095, 4096, 4097, 8192,
                           65536, 1 << 20, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 63) - 1,
                           1 << 63, (1 << 64) - 1, -1, -512, -4096,
                           rng.getrandbits(64), rng.getrandbits(16)])

    def offset(self):
        rng = self.rng
        return rng.choice([0, 0, 0, 512, 1000, 4096, 65536, 1 << 20, 3 << 20, 5 << 20,
                           64 << 20, 1 << 40, (1 << 63) - 4096, 1 << 63, (1 << 64) - 512,
                           rng.randrange(0, 8 << 20), rng.getrandbits(64)]) & ((1 << 64) - 1)

    def block_size(self):
        rng = self.rng
        return rng.choice([0, 0, 512, 1024, 2048, 4096, 4096, 1, 100, 513, 1000, 3000, 4095,
                           4097, 8192, 65536, 1 << 20, 1 << 31, 0xFFFFFFFF])

    def flags(self, settable):
        rng = self.rng
        x = rng.random()
        if x < 0.5:
            f = 0
            for bit in settable:
                if rng.random() < 0.3:
                    f |= bit
            return f
        if x < 0.8:
            return rng.choice([0, 1, 2, 4, 8, 16, 32, 64, 0x80000000, 0xFFFFFFFF])
        return rng.getrandbits(32)

    def name(self):
        rng = self.rng
        n = rng.choice([0, 5, 63, 64])
        return rng.randbytes(n).replace(b"\0", b"x").ljust(64, b"\0")

    def info64(self):
        rng = self.rng
        v = L.zero_info64()
        v["offset"] = self.offset()
        v["sizelimit"] = self.offset() if rng.random() < 0.5 else 0
        v["flags"] = self.flags([1, 4, 8, 16])
        if rng.random() < 0.1:
            v["encrypt_type"] = rng.choice([1, 18, 0xFFFFFFFF])
        if rng.random() < 0.1:
            v["encrypt_key_size"] = rng.choice([1, 32, 33, 0xFFFFFFFF])
        v["file_name"] = self.name()
        v["crypt_name"] = self.name() if rng.random() < 0.1 else b""
        if rng.random() < 0.1:
            v["encrypt_key"] = rng.randbytes(32)
        for k in ("device", "inode", "rdevice", "number", "init0", "init1"):
            if rng.random() < 0.2:
                v[k] = rng.getrandbits(32 if k == "number" else 64)
        return L.pack_info64(v)

    def info_old(self):
        rng = self.rng
        vals = [rng.getrandbits(31) if rng.random() < 0.2 else 0,  # number
                rng.getrandbits(64) if rng.random() < 0.2 else 0,  # device
                rng.getrandbits(64) if rng.random() < 0.2 else 0,  # inode
                rng.getrandbits(64) if rng.random() < 0.2 else 0,  # rdevice
                rng.choice([0, 512, 4096, 1 << 20, -512, -1, 0x7FFFFFFF, -0x80000000]),
                rng.choice([0, 0, 0, 1, 18]), rng.choice([0, 0, 32, 33, -1]),
                self.flags([1, 4, 8, 16]) & 0x7FFFFFFF,
                self.name(), bytes(32), 0, 0, bytes(4)]
        return L.INFO_OLD.pack(*vals)

    def struct_arg(self, data):
        """A pointer to DATA in the read-write page, or (10%) a bad pointer."""
        rng = self.rng
        if rng.random() < 0.1:
            return self.bad_pointer(len(data))
        at = rng.choice([0, 0, 8, PAGE - len(data)])
        return self.area.put(data, at)

    # ---- operations -------------------------------------------------------------------------
    def call(self, key, fd, nr, arg, check=None):
        self.current = key
        t0 = time.monotonic()
        r = raw_ioctl(fd, nr, arg)
        self.sh.account_time(key, time.monotonic() - t0)
        self.done += 1
        res = "ok" if r >= 0 else errname(-r)
        self.sh.account("%s/%s" % (key, res))
        allowed = ALLOWED.get(key)
        if r < 0 and allowed is not None and -r not in allowed and -r not in _ANY:
            self.sh.failure("%s: unexpected %s (thread %d, op %d)" % (key, res, self.idx,
                                                                        self.done))
        if r >= 0 and check:
            check()
        return r

    def check_status64(self, n, at):
        raw = self.area.get(L.INFO64.size, at)
        v = dict(zip(L.INFO64_FIELDS, L.INFO64.unpack(raw)))
        bad = []
        if v["number"] != n:
            bad.append("lo_number %d" % v["number"])
        if v["flags"] & ~(1 | 4 | 8 | 16):
            bad.append("lo_flags %#x" % v["flags"])
        if raw[56 + 63] != 0 or raw[120 + 63] != 0:
            bad.append("name not NUL-terminated")
        if v["encrypt_type"] or v["encrypt_key_size"] or any(v["encrypt_key"]) or \
                any(v["crypt_name"]) or v["init0"] or v["init1"]:
            bad.append("encryption fields set")
        if v["offset"] >= 1 << 63 or v["sizelimit"] >= 1 << 63:
            bad.append("offset/sizelimit beyond LLONG_MAX")
        if bad:
            self.sh.failure("GET_STATUS64 of loop%d: %s" % (n, ", ".join(bad)))

    def check_status_old(self, n, at):
        v = dict(zip(L.INFO_OLD_FIELDS, L.INFO_OLD.unpack(self.area.get(L.INFO_OLD.size, at))))
        if v["number"] != n or v["flags"] & ~(1 | 4 | 8 | 16) or v["file_name"][63] != 0 or \
                v["encrypt_type"] or v["encrypt_key_size"] or any(v["encrypt_key"]):
            self.sh.failure("GET_STATUS of loop%d: %r" % (n, v))

    def op_structured(self):
        rng = self.rng
        n, fd = self.dev()
        if fd is None:
            return
        op = rng.choices(
            ["set-fd", "configure", "change-fd", "clr-fd", "set-status64", "set-status",
             "get-status64", "get-status", "set-capacity", "set-block-size", "set-direct-io"],
            [10, 12, 6, 10, 10, 4, 10, 4, 5, 8, 6])[0]
        nr = L.CMD_NUMBERS[op]
        if op in ("set-fd", "change-fd"):
            kind, bfd = self.backing_fd()
            self.call(op, fd, nr, bfd)
        elif op == "configure":
            kind, bfd = self.backing_fd()
            cfg = L.CONFIG.pack(bfd & 0xFFFFFFFF, self.block_size(),
                                *L.INFO64.unpack(self.info64()),
                                *[rng.getrandbits(64) if rng.random() < 0.05 else 0
                                  for _ in range(8)])
            self.call(op, fd, nr, self.struct_arg(cfg))
        elif op == "clr-fd":
            self.call(op, fd, nr, self.int_arg())
        elif op == "set-status64":
            self.call(op, fd, nr, self.struct_arg(self.info64()))
        elif op == "set-status":
            self.call(op, fd, nr, self.struct_arg(self.info_old()))
        elif op in ("get-status64", "get-status"):
            size = L.INFO64.size if op == "get-status64" else L.INFO_OLD.size
            if rng.random() < 0.15:
                self.call(op, fd, nr, self.bad_pointer(size))
            else:
                at = rng.choice([0, 16, PAGE - size])
                chk = (self.check_status64 if op == "get-status64" else self.check_status_old)
                self.call(op, fd, nr, self.area.rw + at, lambda: chk(n, at))
        elif op == "set-capacity":
            self.call(op, fd, nr, self.int_arg())
        elif op == "set-block-size":
            self.call(op, fd, nr, self.block_size() if rng.random() < 0.8 else self.int_arg())
        elif op == "set-direct-io":
            self.call(op, fd, nr, rng.choice([0, 1, 1, 0, 2, -1, 1 << 32]))

    def op_loop_random_arg(self):
        """A loop ioctl number (or a neighbour) with an argument of any kind."""
        rng = self.rng
        n, fd = self.dev()
        if fd is None:
            return
        nr = rng.choice(LOOP_NRS + [0x4C0B, 0x4C0C, 0x4C7F, 0x4C80, 0x4C81, 0x4C82, 0x4CFF])
        x = rng.random()
        if x < 0.4:
            arg = self.bad_pointer(304)
        elif x < 0.7:
            arg = self.int_arg()
        else:
            data = rng.randbytes(304)
            arg = self.area.put(data, 0)
        self.call("loop-any", fd, nr, arg)

    def op_random_number(self):
        """Any ioctl number: random, or _IOC-encoded with the loop/block/fs types."""
        rng = self.rng
        target = rng.random()
        if target < 0.8:
            n, fd = self.dev()
            key = "rand-dev"
        else:
            fd, key = self.ctl, "rand-ctl"
        if fd is None:
            return
        x = rng.random()
        if x < 0.4:
            nr = rng.getrandbits(32)
        else:
            # _IOC(dir, type, nr, size)
            d = rng.choice([0, 1, 2, 3])
            t = rng.choice([0x4C, 0x12, 0x12, ord("f"), ord("X"), 0x54, rng.getrandbits(8)])
            nr = (d << 30) | (rng.getrandbits(14) << 16 if rng.random() < 0.5 else
                              rng.choice([0, 4, 8, 16, 232, 304]) << 16) | (t << 8) | \
                rng.getrandbits(8)
        # Generic block and file ioctls (BLKPG, BLKRRPART, BLKROSET, BLKDISCARD, FIONBIO...)
        # act on this fuzz device or this descriptor only, so any number is fair game.
        arg = self.bad_pointer(64) if rng.random() < 0.6 else self.area.put(
            rng.randbytes(64), 0)
        self.call(key, fd, nr, arg)

    def op_control(self):
        rng = self.rng
        lo, hi = self.a.ctl_range
        op = rng.choices(["ctl-add", "ctl-remove", "ctl-get-free"], [10, 10, 2])[0]
        if op == "ctl-add":
            idx = rng.choice([rng.randint(lo, hi)] * 6 +
                             [-1, 1 << 20, (1 << 20) - 1, 0x7FFFFFFF, 1 << 31, 1 << 32,
                              rng.choice(self.a.devs)])
        elif op == "ctl-remove":
            existing = [int(x[4:]) for x in os.listdir("/sys/block")
                        if x.startswith("loop") and x[4:].isdigit()]
            extra = [x for x in existing if x not in self.a.devs and x not in self.a.avoid]
            idx = rng.choice([rng.randint(lo, hi)] * 4 + extra * 2 +
                             [-1, -2 ** 31, 1 << 20, 0x7FFFFFFF, 1 << 32 | lo])
            if (idx & 0xFFFFFFFF) in self.a.avoid:
                return
        else:
            idx = rng.choice([0, -1, 12345])
        self.call(op, self.ctl, L.CMD_NUMBERS[op], idx)

    def op_ctl_device(self):
        """Open a device in the control range, configure or clear it, close it."""
        rng = self.rng
        lo, hi = self.a.ctl_range
        n = rng.randint(lo, hi)
        try:
            fd = os.open("/dev/loop%d" % n, rng.choice([os.O_RDWR, os.O_RDONLY]))
        except OSError as e:
            self.sh.account("open-ctl/%s" % errname(e.errno))
            return
        try:
            if rng.random() < 0.5:
                kind, bfd = self.backing_fd()
                self.call("set-fd", fd, L.LOOP_SET_FD, bfd)
            else:
                self.call("clr-fd", fd, L.LOOP_CLR_FD, 0)
        finally:
            os.close(fd)

    def op_io(self):
        rng = self.rng
        n, fd = self.dev()
        if fd is None:
            return
        off = rng.choice([0, 512, 4096, 1 << 20, rng.randrange(0, 8 << 20) & ~511])
        try:
            if rng.random() < 0.5 or self.devfds[n][1].startswith("ro"):
                os.pread(fd, rng.choice([512, 4096, 65536]), off)
                self.sh.account("io/read-ok")
            else:
                os.pwrite(fd, bytes([self.idx]) * rng.choice([512, 4096]), off)
                self.sh.account("io/write-ok")
        except OSError as e:
            self.sh.account("io/%s" % errname(e.errno))
        with self.sh.lock:
            self.sh.other_ops += 1

    def op_reopen(self):
        """Close a device descriptor (so devices lose their openers and autoclear unbinds
        them), open one, or close and reopen a descriptor other threads use as a backing file."""
        rng = self.rng
        x = rng.random()
        if x < 0.4 and self.devfds:
            os.close(self.devfds.pop(rng.choice(sorted(self.devfds)))[0])
        elif x < 0.7:
            self.open_dev(rng.choice(self.a.devs))
        else:
            with self.sh.vlock:
                i = rng.randrange(len(self.sh.volatile))
                os.close(self.sh.volatile[i])
                self.sh.volatile[i] = os.open(rng.choice(self.files), os.O_RDWR)
        with self.sh.lock:
            self.sh.other_ops += 1

    def op_bind_cycle(self):
        """Bind a device to a regular file with plausible settings, reconfigure it a little,
        clear it and close it: the successful paths, under the other threads' fire."""
        rng = self.rng
        n = rng.choice(self.a.devs)
        try:
            fd = os.open("/dev/loop%d" % n, rng.choice([os.O_RDWR, os.O_RDWR, os.O_RDONLY]))
        except OSError as e:
            self.sh.account("open-bind/%s" % errname(e.errno))
            return
        try:
            kind, bfd = rng.choice([p for p in self.pool if p[0].split(":")[0] in
                                    ("rw", "ro", "direct", "append")] or self.pool)
            v = L.zero_info64()
            v["offset"] = rng.choice([0, 0, 512, 4096, 65536])
            v["sizelimit"] = rng.choice([0, 0, 1 << 20, 12345 * 512])
            v["flags"] = rng.choice([0, 0, 4, 8, 16, 1, 1 | 16])
            cfg = L.CONFIG.pack(bfd, rng.choice([0, 512, 1024, 4096]),
                                *L.INFO64.unpack(L.pack_info64(v)), *([0] * 8))
            if self.call("configure", fd, L.LOOP_CONFIGURE, self.area.put(cfg)) < 0:
                return
            for _ in range(rng.randrange(1, 4)):
                op = rng.choice(["set-block-size", "set-direct-io", "set-capacity",
                                 "get-status64"])
                if op == "set-block-size":
                    self.call(op, fd, L.LOOP_SET_BLOCK_SIZE, rng.choice([512, 1024, 4096]))
                elif op == "set-direct-io":
                    self.call(op, fd, L.LOOP_SET_DIRECT_IO, rng.choice([0, 1]))
                elif op == "set-capacity":
                    self.call(op, fd, L.LOOP_SET_CAPACITY, 0)
                else:
                    self.call(op, fd, L.LOOP_GET_STATUS64, self.area.rw + 1024,
                              lambda: self.check_status64(n, 1024))
            try:
                os.pread(fd, 4096, 0)
            except OSError:
                pass
            self.call("clr-fd", fd, L.LOOP_CLR_FD, 0)
        finally:
            os.close(fd)

    def run(self):
        try:
            self.build_pool()
            for n in self.a.devs:
                if self.rng.random() < 0.7:
                    self.open_dev(n)
            ops = [self.op_structured, self.op_loop_random_arg, self.op_random_number,
                   self.op_control, self.op_ctl_device, self.op_bind_cycle, self.op_io,
                   self.op_reopen]
            weights = [34, 20, 20, 5, 2, 4, 8, 7]
            k = 0
            while self.done < self.budget and not self.sh.stop:
                if time.monotonic() > self.sh.deadline:
                    break
                self.rng.choices(ops, weights)[0]()
                k += 1
                if k % 50 == 0:
                    self.sh.report_progress(self.idx, self.done)
        except Exception as e:  # a bug in the fuzzer itself
            import traceback
            self.sh.failure("thread %d crashed: %s\n%s" % (self.idx, e, traceback.format_exc()))
        finally:
            with self.sh.lock:
                self.sh.ioctls += self.done
            self.sh.report_progress(self.idx, self.done)
            for fd, _ in self.devfds.values():
                os.close(fd)
            self.devfds.clear()


def make_files(d, rng):
    """Backing files of several sizes; two of 1 MiB so LOOP_CHANGE_FD can succeed; one with an
    MBR partition table so that partition scanning finds partitions."""
    os.makedirs(d, exist_ok=True)
    sizes = {"f0-1m": 1 << 20, "f1-1m": 1 << 20, "f2-4m-mbr": 4 << 20, "f3-1000b": 1000,
             "f4-empty": 0, "f5-3m": 3 << 20}
    for name, size in sizes.items():
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(rng.randbytes(min(size, 8192)))
            f.truncate(size)
    # MBR: partition 1 at sector 2048, 4096 sectors, type 0x83; partition 2 after it.
    with open(os.path.join(d, "f2-4m-mbr"), "r+b") as f:
        f.seek(446)
        f.write(struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 2048, 4096))
        f.write(struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 6144, 1024))
        f.seek(510)
        f.write(b"\x55\xaa")


def run_process(a, proc, progress, wfd):
    """One fuzzing process: its threads, then its results as JSON on wfd."""
    sh = Shared(a, proc, progress)
    per = [a.per_thread[proc * a.threads + t] for t in range(a.threads)]
    threads = [Fuzzer(t, sh, per[t]) for t in range(a.threads)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(1)
        if time.monotonic() > sh.deadline + 60:
            sh.stop = True
            for t in threads:
                if t.is_alive():
                    sh.failure("thread %s stuck in %s" % (t.name, t.current))
            break
    stuck = any(t.is_alive() for t in threads)
    out = json.dumps({"ioctls": sh.ioctls, "other": sh.other_ops, "hist": sh.hist,
                      "secs": sh.secs, "failures": sh.failures, "stuck": stuck})
    os.write(wfd, out.encode())
    os.close(wfd)
    os._exit(0)


def task_stacks(pid):
    out = []
    for tid in sorted(os.listdir("/proc/%d/task" % pid)):
        try:
            st = open("/proc/%d/task/%s/stack" % (pid, tid)).read()
        except OSError:
            st = "?"
        out.append("task %s:\n%s" % (tid, st))
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--min-iters", type=int, default=None)
    p.add_argument("--time", type=float, default=400)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--devs", default="0,1,2,3,4,5")
    p.add_argument("--avoid", default="7")
    p.add_argument("--ctl-range", default="16-23")
    a = p.parse_args()
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    a.devs = [int(x) for x in a.devs.split(",")]
    a.avoid = {int(x) for x in a.avoid.split(",") if x}
    lo, hi = a.ctl_range.split("-")
    a.ctl_range = (int(lo), int(hi))
    n = a.procs * a.threads
    a.per_thread = [a.iters // n + (1 if i < a.iters % n else 0) for i in range(n)]
    print("fuzz: seed=%d iters=%d procs=%d threads=%d time=%ds devs=%s avoid=%s ctl-range=%d-%d"
          % (a.seed, a.iters, a.procs, a.threads, a.time, a.devs, sorted(a.avoid),
             *a.ctl_range), flush=True)
    make_files(a.dir, random.Random(a.seed))
    progress = mmap.mmap(-1, 8 * n)  # shared with the children: ioctls done per thread
    a.start = time.monotonic()
    children = {}
    for proc in range(a.procs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                run_process(a, proc, progress, w)
            finally:
                os._exit(1)
        os.close(w)
        children[pid] = r

    def done():
        return sum(struct.unpack_from("%dQ" % n, progress))

    results, bufs, last = [], {pid: b"" for pid in children}, a.start
    open_fds = dict(children)
    stuck_exit = False
    while open_fds:
        rl, _, _ = select.select(list(open_fds.values()), [], [], 1.0)
        for pid, fd in list(open_fds.items()):
            if fd in rl:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    bufs[pid] += chunk
                else:
                    os.close(fd)
                    del open_fds[pid]
                    os.waitpid(pid, 0)
        now = time.monotonic()
        if now - last >= 30:
            last = now
            print("fuzz: %.0fs: %d ioctls" % (now - a.start, done()), flush=True)
        if now > a.start + a.time + 120 and open_fds:
            # A process that has not even reported: its threads are stuck in the kernel.
            for pid in open_fds:
                print("fuzz: process %d stuck:\n%s" % (pid, task_stacks(pid)), flush=True)
            stuck_exit = True
            break
    for pid, b in bufs.items():
        if b:
            results.append(json.loads(b))
    secs = time.monotonic() - a.start
    total = sum(r["ioctls"] for r in results)
    other = sum(r["other"] for r in results)
    hist, tsecs, failures = collections.Counter(), collections.Counter(), []
    for r in results:
        hist.update(r["hist"])
        tsecs.update(r["secs"])
        failures += r["failures"]
        if r["stuck"]:
            stuck_exit = True
    print("fuzz: %d ioctls (+%d reads/writes/re-opens) in %.1fs (%.0f/s), seed=%d"
          % (total, other, secs, total / secs if secs else 0, a.seed))
    for k, v in sorted(hist.items()):
        print("  %-34s %8d" % (k, v))
    print("fuzz: time in the kernel by ioctl (all threads):")
    for k, v in sorted(tsecs.items(), key=lambda x: -x[1]):
        print("  %-34s %8.1fs" % (k, v))
    rc = 0
    if failures:
        print("fuzz: %d check failures:" % len(failures))
        for f in failures:
            print("  " + f)
        rc = 1
    min_iters = a.iters if a.min_iters is None else a.min_iters
    if total < a.iters:
        print("fuzz: time limit (%ds) reached after %d of %d ioctls (at least %d needed)"
              % (a.time, total, a.iters, min_iters))
        if total < min_iters:
            rc = 1
    if stuck_exit:
        print("fuzz: stuck in the kernel")
        rc = 3
    print("fuzz: %s" % ("PASS" if rc == 0 else "FAIL"), flush=True)
    os._exit(rc)


if __name__ == "__main__":
    main()
