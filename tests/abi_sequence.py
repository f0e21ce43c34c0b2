#!/usr/bin/env python3
"""A generated sequence of loop-driver calls, printed so that two drivers can be compared.

    abi_sequence.py --tmpfs DIR --disk DIR [--seeds 1,2,3] [--calls 3000] [--devs 0,1,2,3]

Runs, for each seed, a pseudo-random sequence of calls against whichever loop driver is loaded
(loop.ko or rust_loop) and prints one line per step: what was called and what it returned (the
errno name, or the values), then, indented, what changed in the devices' state as user space
sees it. Run against loop.c and against rust_loop in the same kernel, the outputs must be the
same line for line (tests/core-ioctl.t.sh: t_ioctl_sequence_as_loop_c); the first differing
line is where the drivers part. The sequence is a function of the seed and of what the calls
return, so that after a first difference the rest may differ too.

The calls, on the --devs devices (4), on other loop devices and on /dev/loop-control:
  - opens of /dev/loopN (or of a private node of block major 7, which creates a missing device
    through the driver's probe) with O_RDONLY or O_RDWR, with or without O_EXCL, several held
    per device across calls and closed in random order (autoclear and a deferred LOOP_CLR_FD
    fire at the last close); an ioctl is made through a held descriptor or through one opened
    for it and closed after it, as losetup does;
  - LOOP_SET_FD and LOOP_CONFIGURE (every field, good and bad: descriptors of regular files on
    tmpfs and on a real file system opened read-write, read-only or O_DIRECT, of other loop
    devices (chains), of the device itself and cycles, directories, pipes, /dev/null,
    /dev/loop-control, O_PATH and closed descriptors, descriptors above 32 bits; block sizes
    good and bad; flags settable, not settable and unknown; offsets and size limits up to and
    past LLONG_MAX; encryption types and key sizes; names of up to 64 bytes; the fields loop.c
    ignores filled with noise) so that each of loop.c's checks in loop_configure fails in turn;
    LOOP_CHANGE_FD (writable device, wrong size, chains, bad descriptors); LOOP_CLR_FD;
    LOOP_SET_STATUS64 and LOOP_SET_STATUS (from the current status or zero, with new offsets,
    size limits, flags, names, bad encryption fields, overflowing offsets, NULL);
    LOOP_GET_STATUS64 and LOOP_GET_STATUS (NULL, and EOVERFLOW of the old structure);
    LOOP_SET_CAPACITY after the backing file grew or shrank; LOOP_SET_DIRECT_IO;
    LOOP_SET_BLOCK_SIZE with good, bad and 64-bit sizes; unknown ioctl numbers; some of the
    block layer's ioctls that reach the driver's state (BLKROSET, BLKROGET, BLKFLSBUF,
    BLKRRPART, BLKGETSIZE64, BLKSSZGET, BLKPBSZGET, BLKDISCARD, BLKZEROOUT); every one of them
    sometimes without CAP_SYS_ADMIN (the EPERM checks of read-only openers);
  - LOOP_CTL_ADD, LOOP_CTL_REMOVE (present, bound, open, missing, negative and out-of-range
    numbers), LOOP_CTL_GET_FREE and an unknown command on /dev/loop-control;
  - reads and writes of the devices, buffered (through held descriptors, each write followed
    by fsync) and O_DIRECT, aligned and not, at the start, inside, at and past the end, with a
    CRC32 of what was read; the backing files grown, shrunk, written and replaced (unlinked and
    made again) behind the devices' backs.

After each step the state of the devices it touched is read back: size, ro, the diskseq (a
media change: "seq+"), the queue's block sizes, minimum I/O size, DMA alignment, rotational,
write cache and discard/write-zeroes limits, the loop/ sysfs files, the partitions; and of
every device the size, ro, diskseq and partitions. Nothing printed depends on the driver's
name, on inode numbers of fresh files (lo_inode, lo_device and lo_rdevice are printed as the
names of the files and file systems they belong to), on time, or on diskseq's global counter.

Normalised (README "Differences from loop.c" says why each is a deliberate difference):
  - direct I/O below the backing file's direct-I/O alignment: loop.c turns LO_FLAGS_DIRECT_IO
    off when the block size is below the backing file's alignment or the offset is not aligned
    to it (and LOOP_SET_DIRECT_IO 1 fails with EINVAL then), rust_loop keeps it on and sends
    only the misaligned requests buffered. The generator follows loop.c's rule with the values
    both drivers report (offset, block size, the alignment statx gives for the backing file);
    while it says the two may differ, the flag is printed as "dio?" in LO_FLAGS, loop/dio and
    queue/dma_alignment as "*", and the result of LOOP_SET_DIRECT_IO 1 as "ok|EINVAL". Its one
    consequence beyond these is the default block size that LOOP_SET_BLOCK_SIZE 0 picks (the
    alignment in direct-I/O mode): in that state the generator asks for 512 instead.
  - a backing loop device whose logical block size grew while the device above stays bound in
    direct-I/O mode: loop.c keeps the alignment of the binding's time and fails the requests
    below the new block size (EIO), rust_loop sends those buffered. No read, write or
    partition scan (BLKRRPART, LO_FLAGS_PARTSCAN newly set) is made on such a device.
  - reads past the end of the backing file (a file shrunk under its device, a backing device
    that shrank): loop.c fails the part of a read that the backing does not cover with EIO,
    rust_loop returns zeroes for it. A read that reaches that part of the device (for a
    buffered read, the pages and blocks it covers) prints "past-end" instead of its result;
    BLKRRPART is not issued on such a device, nor LO_FLAGS_PARTSCAN newly set (the scan reads
    the last sectors, and the partitions found would differ); a
    buffered write there is aligned to pages and blocks (one that is not would first read);
    and since rust_loop keeps the zeroes in the device's page cache where loop.c keeps
    nothing, the generator drops the device's page cache (BLKFLSBUF, not printed) before that
    part of the backing file can hold data again. Through a chain the same holds for the part
    of the lower device past its own backing file's end.
  - a write that a backing block device (a chain) takes only in part, because it reaches past
    that device's end: loop.c ends it with success (the rest is dropped), rust_loop with an
    error. On a device on another loop device, a write near the end of the data below (that
    device's end, or its own backing file's) is not made ("skipped"): it could straddle that
    end, its error would stay recorded for later fsyncs, and a read-modify-write of the lower
    device's block there would meet the read difference above. Writes wholly past the lower
    device's end are made (ENOSPC in both). Reads on such a device are rounded to whole blocks
    as buffered reads are, since the lower device's page cache reads whole blocks.

Not made, as it depends on neither driver's ABI: buffered I/O while the block device's page-cache
block size (BLKBSZGET, fixed at its first open) is below its logical block size (raised by
LOOP_SET_BLOCK_SIZE while it stayed open). The block layer then fails every page-cache bio that
is not a multiple of the logical block size, so whether a read works depends on where its
readahead window ends, i.e. on read_ahead_kb, which rust_loop's larger max_sectors makes larger
once the device was on a rotational disk (blk_apply_bdi_limits never lowers it).

Debugging: --stop-step N stops a seed after step N with its descriptors open and prints each
device's page-cache block size and cachestat(2); --cachestat prints the latter after every step
(for finding where the two drivers' page caches part); --profile times each kind of call.

udev must not run meanwhile (its opens change the openers' count, which decides LOOP_CLR_FD
and autoclear, and take exclusive claims): the caller stops it.
"""
import argparse
import ctypes
import errno
import fcntl
import mmap
import os
import random
import stat
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

LO_RO, LO_AUTOCLEAR, LO_PARTSCAN, LO_DIO = 1, 4, 8, 16
# Block layer ioctls (include/uapi/linux/fs.h).
BLKROSET, BLKROGET, BLKRRPART, BLKFLSBUF = 0x125D, 0x125E, 0x125F, 0x1261
BLKSSZGET, BLKPBSZGET, BLKGETSIZE64 = 0x1268, 0x127B, 0x80081272
BLKDISCARD, BLKZEROOUT, BLKBSZGET = 0x1277, 0x127F, 0x80081270
CAP_SYS_ADMIN = 21
STATX_DIOALIGN = 0x2000
AT_EMPTY_PATH = 0x1000
SECTOR = 512

libc = ctypes.CDLL(None, use_errno=True)


def ename(e):
    return errno.errorcode.get(e, str(e))


# ---- capabilities: calls made without CAP_SYS_ADMIN ---------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def set_admin(on):
    """Raises or drops CAP_SYS_ADMIN in the effective set (it stays permitted)."""
    hdr = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    if on:
        data[0].effective |= 1 << CAP_SYS_ADMIN
    else:
        data[0].effective &= ~(1 << CAP_SYS_ADMIN)
    if libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def statx_dioalign(fd):
    """(result has STATX_DIOALIGN, dio_mem_align, dio_offset_align) of fd."""
    buf = ctypes.create_string_buffer(256)
    if libc.statx(fd, b"", AT_EMPTY_PATH, STATX_DIOALIGN, buf) != 0:
        return (False, 0, 0)
    mask = struct.unpack_from("I", buf, 0)[0]
    mem, off = struct.unpack_from("II", buf, 152)
    return (bool(mask & STATX_DIOALIGN), mem, off)


# ---- sysfs, read through descriptors kept open (an open costs 10 reads under TCG) -----------
class Sysfs:
    def __init__(self):
        self.fds = {}

    def read(self, path):
        """The file's content, stripped, or None when it does not exist."""
        fd = self.fds.get(path)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0).decode().strip()
            except OSError:
                # Removed (ENODEV), maybe made again since: open it afresh.
                os.close(fd)
                del self.fds[path]
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            v = os.pread(fd, 4096, 0).decode().strip()
        except OSError:
            os.close(fd)
            return None
        self.fds[path] = fd
        return v

    def forget(self, prefix):
        for p in [p for p in self.fds if p.startswith(prefix)]:
            os.close(self.fds.pop(p))


SYS = Sysfs()
QUEUE_KEYS = ("logical_block_size", "physical_block_size", "minimum_io_size", "dma_alignment",
              "rotational", "write_cache", "discard_granularity", "discard_max_hw_bytes",
              "write_zeroes_max_bytes")
LOOP_KEYS = ("backing_file", "offset", "sizelimit", "autoclear", "partscan", "dio")
SHORT = {"logical_block_size": "lbs", "physical_block_size": "pbs", "minimum_io_size": "io_min",
         "dma_alignment": "dma", "rotational": "rot", "write_cache": "wc",
         "discard_granularity": "dgran", "discard_max_hw_bytes": "dmax",
         "write_zeroes_max_bytes": "wzmax"}


def partitions():
    """{disk name: [partition names]} from /proc/partitions (disks of zero size are absent)."""
    text = SYS.read("/proc/partitions") or ""
    parts = {}
    for line in text.splitlines()[2:]:
        f = line.split()
        if len(f) == 4 and f[3].startswith("loop"):
            name = f[3]
            base = "loop" + name[4:].split("p")[0]
            parts.setdefault(base, {})[name] = f[2]
    return parts


# ---- backing files ----------------------------------------------------------------------------
class FileVer:
    """One inode the generator made at a path (a replaced file keeps its old version alive
    while a device holds it)."""

    def __init__(self, path, label, fs):
        self.path, self.label, self.fs = path, label, fs
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        st = os.fstat(self.fd)
        self.key = (st.st_dev, st.st_ino)

    def size(self):
        return os.fstat(self.fd).st_size


class Fd:
    def __init__(self, fd, label, flags):
        self.fd, self.label, self.flags = fd, label, flags


class Dev:
    def __init__(self, n):
        self.n = n
        self.name = f"loop{n}"
        self.fds = []
        self.raw = {}        # the last snapshot, as read
        self.shown = {}      # the last snapshot, as printed (normalised)
        self.backing = None  # ("file", FileVer) or ("loop", number) while bound
        self.min_dio = SECTOR
        self.dio = "off"     # loop.c's and rust_loop's LO_FLAGS_DIRECT_IO: off, on, "div"
        self.zero_mark = None


def mode_label(flags):
    s = "rw" if flags & os.O_ACCMODE == os.O_RDWR else "ro"
    if flags & os.O_EXCL:
        s += "+excl"
    if flags & os.O_DIRECT:
        s += "+direct"
    return s


class Gen:
    def __init__(self, args, seed):
        self.args = args
        self.seed = seed
        self.rng = random.Random(seed)
        self.devs = {n: Dev(n) for n in args.devs}
        self.known = set(range(8)) | set(args.devs)  # loop numbers the watch covers
        self.calls = 0
        self.ioctls = 0
        self.step_no = 0
        self.fd_serial = 0
        self.touched = set()
        self.tdir = os.path.join(args.tmpfs, f"seq{seed}")
        self.ddir = os.path.join(args.disk, f"seq{seed}")
        self.files = {}      # label -> current FileVer
        self.versions = []   # every FileVer made
        self.buf = mmap.mmap(-1, 1 << 20)
        self.watch_shown = {}
        self.parts_shown = {}
        self.pending_dio = None
        self.watch_all = True
        self.limits_changed = True
        self.parts_check = True
        self.fs_labels = {}

    # ---- output ------------------------------------------------------------------------------
    def emit(self, text):
        print(f"s{self.seed} {self.step_no:04d} {text}")

    def note(self, text):
        print(f"s{self.seed} {self.step_no:04d}   {text}")

    # ---- set-up --------------------------------------------------------------------------------
    def setup(self):
        for d in (self.tdir, self.ddir):
            os.makedirs(d, exist_ok=True)
        self.fs_labels = {os.stat(self.tdir).st_dev: "tmpfs", os.stat(self.ddir).st_dev: "disk",
                          os.stat("/dev").st_dev: "devtmpfs"}
        rng = self.rng
        sizes = (64 << 10, 256 << 10, 1 << 20, 1 << 20, (1 << 20) + 512, (1 << 20) + 100,
                 2 << 20)
        for label, d in (("t0", self.tdir), ("t1", self.tdir), ("t2", self.tdir),
                         ("d0", self.ddir), ("d1", self.ddir)):
            self.new_file(label, d, rng.choice(sizes))
        # An image with an MBR of two partitions (for LO_FLAGS_PARTSCAN and BLKRRPART).
        self.new_file("mbr", self.tdir, 2 << 20, mbr=True)
        self.node_dir = os.path.join(self.tdir, "nodes")
        os.makedirs(self.node_dir, exist_ok=True)
        for n in sorted(self.devs):
            p = os.path.join(self.node_dir, f"loop{n}")
            if not os.path.exists(p):
                os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(7, n))
        self.emit("setup: files " + " ".join(
            f"{f.label}={f.fs}:{f.size()}" for f in self.files.values()))

    def new_file(self, label, d, size, mbr=False):
        old = self.files.get(label)
        if old is None:
            ver = 1
        else:
            ver = int(old.label.split(".v")[1]) + 1 if ".v" in old.label else 2
        path = os.path.join(d, label)
        if old is not None:
            os.unlink(path)
        f = FileVer(path, label if ver == 1 else f"{label}.v{ver}",
                    "tmpfs" if d == self.tdir else "disk")
        # Random 64 KiB repeated, each 512-byte sector stamped with the file and its number, so
        # that every sector differs (cheaper than random megabytes under TCG).
        chunk = self.rng.randbytes(65536)
        data = bytearray((chunk * (size // 65536 + 1))[:size])
        stamp = f"{label}.{len(self.versions)}:".encode()
        for off in range(0, size - 24, 512):
            data[off:off + 24] = (stamp + str(off).encode()).ljust(24, b".")
        # No accidental partition table signature outside the MBR image.
        data[510:512] = b"\0\0" if size >= 512 else data[510:512]
        if mbr:
            data[:512] = bytes(512)
            for i, (start, count) in enumerate(((64, 1024), (1088, 1024))):
                e = 446 + 16 * i
                data[e + 4] = 0x83
                struct.pack_into("<II", data, e + 8, start, count)
            data[510:512] = b"\x55\xaa"
        os.pwrite(f.fd, bytes(data), 0)
        self.files[label] = f
        self.versions.append(f)
        return f

    # ---- device state --------------------------------------------------------------------------
    def snapshot(self, n, full):
        """Device n's state. The queue limits are read when full, or after a media change
        (a binding, an unbinding, LOOP_CHANGE_FD: the diskseq moved); else they are the last
        ones read. The loop/ files likewise while the device is not bound."""
        base = f"/sys/block/loop{n}/"
        size = SYS.read(base + "size")
        if size is None:
            SYS.forget(base)
            return {"exists": "no"}
        prev = self.devs[n].raw
        s = {"size": size, "ro": SYS.read(base + "ro"), "diskseq": SYS.read(base + "diskseq")}
        full = full or s["diskseq"] != prev.get("diskseq") or "lbs" not in prev
        for k in QUEUE_KEYS:
            s[SHORT[k]] = SYS.read(base + "queue/" + k) if full else prev[SHORT[k]]
        if ((full or prev.get("loop/offset") is not None)
                and SYS.read(base + "loop/offset") is not None):
            for k in LOOP_KEYS:
                s["loop/" + k] = SYS.read(base + "loop/" + k)
        else:
            for k in LOOP_KEYS:
                s["loop/" + k] = None
        return s

    def shown_of(self, dev, raw):
        v = dict(raw)
        if dev is not None and dev.dio == "div":
            v["loop/dio"] = "*" if v.get("loop/dio") is not None else None
            v["dma"] = "*"
        return v

    def dev_bytes(self, dev):
        try:
            return int(dev.raw.get("size") or 0) * SECTOR
        except ValueError:
            return 0

    def dev_int(self, dev, key, default=0):
        v = dev.raw.get(key)
        try:
            return int(v)
        except (TypeError, ValueError):
            return default

    def show(self, n, dev):
        """Prints what changed in main device n's normalised state since it was last shown."""
        shown = self.shown_of(dev, dev.raw)
        changes = []
        for k, v in shown.items():
            old = dev.shown.get(k)
            if old == v:
                continue
            if k == "diskseq":
                changes.append("seq+" if old is not None and v is not None else
                               f"seq:{'new' if v else 'gone'}")
            else:
                changes.append(f"{k}={v}")
        for k in dev.shown:
            if k not in shown:
                changes.append(f"{k}=gone")
        if changes:
            self.note(f"loop{n}: " + " ".join(changes))
        dev.shown = shown

    def watch_values(self, n):
        base = f"/sys/block/loop{n}/"
        ro = SYS.read(base + "ro")
        if ro is None:
            SYS.forget(base)
            return ("absent",)
        return (SYS.read(base + "size"), ro, SYS.read(base + "diskseq"))

    def end_step(self):
        """Reads back the state: in full for the main devices the step touched (or whose size,
        ro or diskseq changed), those three for every other known device; prints what changed.
        """
        full = set()
        every = self.watch_all or self.step_no % 8 == 0
        if self.step_no % 8 == 0:
            self.touched.update(self.devs)
            self.limits_changed = True
            self.parts_check = True
        for n in sorted(self.known | set(self.devs)):
            if n in self.devs and n in self.touched:
                full.add(n)
                continue
            if not every:
                continue
            v = self.watch_values(n)
            old = self.watch_shown.get(n)
            if n in self.devs:
                if old is not None and old != v:
                    full.add(n)
                continue
            if old is not None and old != v:
                if v == ("absent",) or old == ("absent",):
                    ch = ["absent" if v == ("absent",) else "present"]
                else:
                    ch = [f"{k}={b}" for k, a, b in zip(("size", "ro"), old, v) if a != b]
                    if old[2] != v[2]:
                        ch.append("seq+")
                self.note(f"loop{n}: " + " ".join(ch))
            self.watch_shown[n] = v
        seq_before = {n: self.devs[n].raw.get("diskseq") for n in full}
        for n in sorted(full):
            dev = self.devs[n]
            dev.raw = self.snapshot(n, self.limits_changed)
            self.watch_shown[n] = ("absent",) if dev.raw.get("exists") == "no" else (
                dev.raw["size"], dev.raw["ro"], dev.raw["diskseq"])
            if dev.raw.get("loop/backing_file") is None:
                dev.backing = None
                dev.dio = "off"
                dev.zero_mark = None
        # LO_FLAGS_DIRECT_IO as loop.c would have it after the call (see dio_update).
        if self.pending_dio is not None:
            dev, requested = self.pending_dio
            self.dio_update(dev, requested)
        for n in sorted(full):
            self.show(n, self.devs[n])
        # Partitions change with a binding, an unbinding, LOOP_CHANGE_FD (media changes),
        # LO_FLAGS_PARTSCAN set by LOOP_SET_STATUS, BLKRRPART; and are checked every 8 steps.
        if not (self.limits_changed or self.parts_check or self.step_no % 8 == 0
                or any(self.devs[n].raw.get("diskseq") != seq_before.get(n) for n in full)):
            self.finish_step()
            return
        parts = partitions()
        for n in sorted(self.known | set(self.devs)):
            p = tuple(sorted(parts.get(f"loop{n}", {}).items()))
            old = self.parts_shown.get(n)
            if old is not None and old != p:
                self.note(f"loop{n}: parts=" + (",".join(f"{k}:{s}" for k, s in p) or "none"))
            self.parts_shown[n] = p
        self.finish_step()

    def debug_cachestat(self):
        """--cachestat: every main device's page-cache folios (cachestat(2): nr_cache,
        nr_dirty, nr_writeback), through a held descriptor."""
        for dev in self.devs.values():
            if not dev.fds:
                continue
            rng = struct.pack("QQ", 0, 0)
            cs = ctypes.create_string_buffer(40)
            r = libc.syscall(451, dev.fds[0].fd, rng, cs, 0)
            if r == 0:
                self.note(f"cachestat {dev.name}: {struct.unpack('5Q', cs.raw)[:3]}")

    def debug_dump(self):
        """--stop-step: what the page cache of each device looks like (through held
        descriptors: BLKBSZGET, the block size of the device's page cache, and cachestat)."""
        for dev in self.devs.values():
            for h in dev.fds:
                buf = bytearray(8)
                r, _ = self.ioctl(h.fd, BLKBSZGET, buf)
                self.emit(f"debug: {dev.name} {h.label} BLKBSZGET {r} "
                          f"{struct.unpack('Q', buf)[0]}")
        self.debug_cachestat()
        sys.stdout.flush()

    def finish_step(self):
        if self.args.cachestat:
            self.debug_cachestat()
        self.touched = set()
        self.pending_dio = None
        self.watch_all = False
        self.limits_changed = False
        self.parts_check = False
        self.flush_zero_marks()

    # ---- the deliberate differences ---------------------------------------------------------
    def data_end(self, dev, depth=0):
        """How far from its start the device has data: its backing file's end, or for a device
        on another loop device the part of that one that has data (a file shrunk under the
        lower device is past the end for the device above too), less the offset."""
        b = dev.backing
        if b is None or depth > len(self.devs):
            return 0
        if b[0] == "file":
            end = b[1].size()
        else:
            lower = self.devs.get(b[1])
            end = 0 if lower is None else min(self.dev_bytes(lower),
                                               self.data_end(lower, depth + 1))
        return max(end - self.dev_int(dev, "loop/offset"), 0)

    def lower_of(self, dev):
        b = dev.backing
        return self.devs.get(b[1]) if b is not None and b[0] == "loop" else None

    def past_end_from(self, dev):
        """The device offset from which the device lies past its data's end, or None."""
        if dev.backing is None:
            return None
        end = self.data_end(dev)
        return end if self.dev_bytes(dev) > end else None

    def touches_past_end(self, dev, pos, length, buffered):
        b = self.past_end_from(dev)
        if b is None:
            return False
        lbs = max(self.dev_int(dev, "lbs", SECTOR), SECTOR)
        if buffered:
            # Pages, large folios and readahead around the read: generously.
            g = max(lbs, 256 << 10)
            lo, hi = pos // g * g, -(-(pos + length) // g) * g
        else:
            lo, hi = pos, pos + length
        hi = min(hi, self.dev_bytes(dev))
        return hi > b and lo < self.dev_bytes(dev)

    def mark_zero_cache(self, dev):
        """A buffered read of dev fills its page cache, and those of the loop devices below it
        (read through theirs): each may keep rust_loop's zeroes."""
        for _ in range(len(self.devs)):
            b = self.past_end_from(dev)
            if b is not None:
                dev.zero_mark = b if dev.zero_mark is None else min(dev.zero_mark, b)
            dev = self.lower_of(dev)
            if dev is None:
                break

    def flush_zero_marks(self):
        """A device that may cache rust_loop's zeroes past its backing's end: drop its page
        cache (BLKFLSBUF, not printed) once that part can hold data again (or it moved)."""
        for dev in self.devs.values():
            if dev.zero_mark is None:
                continue
            b = self.past_end_from(dev)
            if b is not None and b <= dev.zero_mark:
                continue
            fd = dev.fds[0].fd if dev.fds else None
            tmp = None
            if fd is None:
                try:
                    tmp = os.open(f"/dev/{dev.name}", os.O_RDONLY)
                    fd = tmp
                except OSError:
                    fd = None
            if fd is not None:
                try:
                    fcntl.ioctl(fd, BLKFLSBUF, 0)
                except OSError:
                    pass
            if tmp is not None:
                os.close(tmp)
            dev.zero_mark = None

    def aligned_dio(self, dev):
        lbs = self.dev_int(dev, "lbs", SECTOR)
        off = self.dev_int(dev, "loop/offset")
        m = dev.min_dio
        return lbs >= m and (m == 0 or off % m == 0)

    def dio_update(self, dev, requested=None):
        """LO_FLAGS_DIRECT_IO after a call that ran loop_update_dio, from the values both
        drivers report: requested (a binding or LOOP_CHANGE_FD that asked for direct I/O) turns
        it on, "div" when loop.c turns it off again and rust_loop keeps it; otherwise a device
        "on" goes "div" when the offset or block size no longer meets the alignment."""
        if dev.raw.get("loop/backing_file") is None:
            return
        aligned = self.aligned_dio(dev)
        if requested:
            dev.dio = "on" if aligned else "div"
        elif dev.dio == "on" and not aligned:
            dev.dio = "div"

    # ---- descriptors ----------------------------------------------------------------------
    def dev_path(self, n, private=False):
        if private:
            p = os.path.join(self.node_dir, f"loop{n}")
            if not os.path.exists(p):
                os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(7, n))
            return p
        return f"/dev/loop{n}"

    def open_dev(self, n, flags, private=False):
        """Opens loop n; returns (fd, None) or (None, errno name). Counts as a call."""
        self.calls += 1
        self.touched.add(n)
        try:
            return os.open(self.dev_path(n, private), flags), None
        except OSError as e:
            return None, ename(e.errno)

    def close_fd(self, n, fd):
        self.calls += 1
        self.touched.add(n)
        os.close(fd)

    def pick_mode(self):
        r = self.rng.random()
        if r < 0.45:
            return os.O_RDWR
        if r < 0.8:
            return os.O_RDONLY
        if r < 0.9:
            return os.O_RDWR | os.O_EXCL
        return os.O_RDONLY | os.O_EXCL

    def pick_dev(self, bound=True):
        """A main device: mostly a bound one (bound=True) or an unbound one (False)."""
        rng = self.rng
        want = [d for n, d in sorted(self.devs.items())
                if (d.raw.get("loop/backing_file") is not None) == bound]
        if want and rng.random() < (0.8 if bound else 0.9):
            return rng.choice(want)
        return self.devs[rng.choice(sorted(self.devs))]

    def with_dev_fd(self, dev, fn, label):
        """Calls fn(fd, fdlabel) with a held descriptor of dev or one opened for the call."""
        rng = self.rng
        if dev.fds and rng.random() < 0.85:
            h = rng.choice(dev.fds)
            return fn(h.fd, h.label)
        flags = os.O_RDWR if rng.random() < 0.6 else os.O_RDONLY
        if rng.random() < 0.1:
            flags |= os.O_EXCL
        fd, err = self.open_dev(dev.n, flags)
        if fd is None:
            self.emit(f"{label} {dev.name} via new {mode_label(flags)}: open {err}")
            return None
        try:
            return fn(fd, "new " + mode_label(flags))
        finally:
            self.close_fd(dev.n, fd)

    def ioctl(self, fd, cmd, arg=0, admin=True):
        """An ioctl; returns ("ok", result) or (errno name, None)."""
        self.calls += 1
        self.ioctls += 1
        if not admin:
            set_admin(False)
        try:
            r = L.ioctl(fd, cmd, arg)
            return "ok", r
        except OSError as e:
            return ename(e.errno), None
        finally:
            if not admin:
                set_admin(True)

    def admin(self):
        return self.rng.random() >= 0.08

    # ---- backing descriptors ---------------------------------------------------------------
    def pick_backing(self, dev):
        """A descriptor to bind: (fd, label, closer, model info or None). Its open may fail:
        then fd is a number that is not open."""
        rng = self.rng
        r = rng.random()
        if r < 0.72:
            f = self.files[rng.choice(sorted(self.files))]
            m = rng.random()
            flags = (os.O_RDWR if m < 0.45 else os.O_RDONLY if m < 0.8 else
                     os.O_RDWR | os.O_DIRECT if m < 0.92 else os.O_RDONLY | os.O_DIRECT)
            fd = os.open(f.path, flags)
            return fd, f"{f.label}({mode_label(flags)})", True, ("file", f, flags)
        if r < 0.86:
            others = sorted(self.devs)
            m = rng.choice(others)
            held = self.devs[m].fds
            if held and rng.random() < 0.3:
                h = rng.choice(held)
                return h.fd, f"loop{m}:{h.label}", False, ("loop", m, h.flags)
            flags = os.O_RDWR if rng.random() < 0.6 else os.O_RDONLY
            fd, err = self.open_dev(m, flags)
            if fd is None:
                return 1 << 20, f"loop{m}({mode_label(flags)}):open {err}", False, None
            return fd, f"loop{m}({mode_label(flags)})", ("dev", m), ("loop", m, flags)
        kind = rng.choice(("dir", "pipe", "null", "badfd", "opath", "control", "closed"))
        if kind == "dir":
            return os.open(self.tdir, os.O_RDONLY | os.O_DIRECTORY), "dir", True, None
        if kind == "pipe":
            rfd, wfd = os.pipe()
            os.close(wfd)
            return rfd, "pipe", True, None
        if kind == "null":
            return os.open("/dev/null", os.O_RDWR), "/dev/null", True, None
        if kind == "badfd":
            return rng.choice((1 << 20, 4095)), "badfd", False, None
        if kind == "opath":
            f = self.files[rng.choice(sorted(self.files))]
            return os.open(f.path, os.O_PATH), f"{f.label}(O_PATH)", True, None
        if kind == "control":
            return os.open("/dev/loop-control", os.O_RDWR), "loop-control", True, None
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
        return fd, "closed", False, None

    def release_backing(self, fd, closer):
        if closer is True:
            os.close(fd)
        elif isinstance(closer, tuple):
            self.close_fd(closer[1], fd)

    def min_dio_of(self, fd, info):
        """lo_min_dio_size as loop_update_dio_alignment computes it for the file fd."""
        has, mem, off = statx_dioalign(fd)
        if has and mem:
            return off
        if info is not None and info[0] == "file" and info[1].fs == "disk":
            return int(SYS.read(f"/sys/block/{self.args.disk_dev}/queue/logical_block_size")
                       or SECTOR)
        return SECTOR

    # ---- status formatting -----------------------------------------------------------------
    def label_dev(self, v):
        if v == 0:
            return "0"
        mj, mn = (v >> 8) & 0xFFF, (v & 0xFF) | ((v >> 12) & 0xFFF00)
        for dv, lab in self.fs_labels.items():
            if os.major(dv) == mj and os.minor(dv) == mn:
                return lab
        if mj == 7:
            return f"loop{mn}"
        return f"{mj}:{mn}"

    def label_ino(self, dev_v, ino):
        mj, mn = (dev_v >> 8) & 0xFFF, (dev_v & 0xFF) | ((dev_v >> 12) & 0xFFF00)
        for f in self.versions:
            if f.key[1] == ino and os.major(f.key[0]) == mj and os.minor(f.key[0]) == mn:
                return f.label
        for n in sorted(self.known):
            for p in (f"/dev/loop{n}", os.path.join(self.node_dir, f"loop{n}")):
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if st.st_ino == ino and os.major(st.st_dev) == mj and os.minor(st.st_dev) == mn:
                    return p.replace(self.tdir, "T")
        return "?"

    def fmt_flags(self, dev, flags):
        if dev.dio == "div":
            return f"{flags & ~LO_DIO:#x}+dio?"
        return f"{flags:#x}"

    def fmt_status64(self, dev, v):
        s = (f"number={v['number']} offset={v['offset']} sizelimit={v['sizelimit']} "
             f"flags={self.fmt_flags(dev, v['flags'])} name={L.cstr(v['file_name'])!r} "
             f"device={self.label_dev(v['device'])} "
             f"inode={self.label_ino(v['device'], v['inode'])} "
             f"rdevice={self.label_dev(v['rdevice'])}")
        extra = [k for k in ("encrypt_type", "encrypt_key_size", "init0", "init1") if v[k]]
        extra += [k for k in ("crypt_name", "encrypt_key") if any(v[k])]
        if extra:
            s += " nonzero=" + ",".join(extra)
        return s

    def fmt_status_old(self, dev, v):
        s = (f"number={v['number']} offset={v['offset']} flags={self.fmt_flags(dev, v['flags'])} "
             f"name={L.cstr(v['file_name'])!r} device={self.label_dev(v['device'])} "
             f"inode={self.label_ino(v['device'], v['inode'])} "
             f"rdevice={self.label_dev(v['rdevice'])}")
        extra = [k for k in ("encrypt_type", "encrypt_key_size", "init0", "init1") if v[k]]
        extra += [k for k in ("encrypt_key", "reserved") if any(v[k])]
        if extra:
            s += " nonzero=" + ",".join(extra)
        return s

    # ---- random field values ---------------------------------------------------------------
    def rand_name(self):
        rng = self.rng
        n = rng.choice((0, 0, 5, 12, 63, 64))
        return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789-_./") for _ in range(n))

    def rand_offset(self):
        rng = self.rng
        if rng.random() < 0.55:
            return 0
        return rng.choice((512, 4096, 100, 1000, 65536, 1 << 20, 3 << 20, 8 << 20,
                           (1 << 63) - 1, 1 << 63, (1 << 64) - 1))

    def rand_sizelimit(self):
        rng = self.rng
        if rng.random() < 0.6:
            return 0
        return rng.choice((4096, 65536, 1000, 512 * 3, 1 << 20, 4 << 20, (1 << 63) - 1, 1 << 63))

    def rand_flags(self, settable_only=False):
        rng = self.rng
        f = 0
        for bit, p in ((LO_RO, 0.2), (LO_AUTOCLEAR, 0.2), (LO_PARTSCAN, 0.15), (LO_DIO, 0.2)):
            if rng.random() < p:
                f |= bit
        if not settable_only and rng.random() < 0.05:
            f |= rng.choice((2, 0x20, 0x100, 0x80000000))
        return f

    def rand_crypt(self):
        rng = self.rng
        et = 0 if rng.random() < 0.93 else rng.choice((1, 2, 18, 0xFFFFFFFF))
        ks = 0 if rng.random() < 0.93 else rng.choice((32, 33, 0xFFFFFFFF))
        return et, ks

    # ---- the operations ---------------------------------------------------------------------
    def op_open(self):
        rng = self.rng
        dev = self.pick_dev(bound=rng.random() < 0.6)
        if len(dev.fds) >= 4:
            return self.op_close(dev)
        flags = self.pick_mode()
        private = rng.random() < 0.08
        fd, err = self.open_dev(dev.n, flags, private)
        where = " (private node)" if private else ""
        if fd is None:
            self.emit(f"open {dev.name} {mode_label(flags)}{where}: {err}")
            return
        self.fd_serial += 1
        h = Fd(fd, f"{mode_label(flags)}#{self.fd_serial}", flags)
        dev.fds.append(h)
        self.emit(f"open {dev.name} {mode_label(flags)}{where}: ok {h.label}")

    def op_close(self, dev=None):
        rng = self.rng
        if dev is None:
            cands = [d for d in self.devs.values() if d.fds]
            if not cands:
                return self.op_open()
            dev = rng.choice(cands)
        h = dev.fds.pop(rng.randrange(len(dev.fds)))
        self.close_fd(dev.n, h.fd)
        # A last close may clear this device and, through its backing, a device below.
        self.touched.update(self.devs)
        self.emit(f"close {dev.name} {h.label}: ok")

    def op_bind(self, configure):
        rng = self.rng
        dev = self.pick_dev(bound=False)
        bfd, blabel, closer, info = self.pick_backing(dev)
        try:
            if configure:
                bs = rng.choice((0, 0, 0, 0, 512, 1024, 2048, 4096, 4096, 8192, 65536, 131072,
                                 256, 1234, 3072, 0xFFFFFFFF))
                flags = self.rand_flags()
                et, ks = self.rand_crypt()
                junk = rng.random() < 0.3
                info64 = dict(L.zero_info64(), offset=self.rand_offset(),
                              sizelimit=self.rand_sizelimit(), flags=flags, encrypt_type=et,
                              encrypt_key_size=ks, file_name=self.rand_name())
                if junk:
                    info64.update(device=rng.getrandbits(64), inode=rng.getrandbits(64),
                                  rdevice=rng.getrandbits(64), number=rng.getrandbits(32),
                                  crypt_name=rng.randbytes(64), encrypt_key=rng.randbytes(32),
                                  init0=rng.getrandbits(64), init1=rng.getrandbits(64))
                reserved = [rng.getrandbits(64) if junk else 0 for _ in range(8)]
                fdv = bfd
                desc = (f"configure {blabel} bs={bs} flags={flags:#x} off={info64['offset']} "
                        f"lim={info64['sizelimit']}"
                        + (f" crypt={et},{ks}" if et or ks else "")
                        + (f" name={L.cstr(info64['file_name'])!r}" if info64["file_name"] else "")
                        + (" junk" if junk else ""))
                data = L.CONFIG.pack(fdv & 0xFFFFFFFF, bs,
                                     *L.INFO64.unpack(L.pack_info64(info64)), *reserved)
                requested = bool(flags & LO_DIO)
                null = rng.random() < 0.02
                if null:
                    desc = "configure NULL"
            else:
                fdv = bfd if rng.random() < 0.95 else bfd | (1 << 32)
                desc = f"set-fd {blabel}" + (" (fd+2^32)" if fdv != bfd else "")
                requested = False
                null = False
            if info is not None:
                min_dio = self.min_dio_of(bfd, info)
                requested = requested or bool(info[2] & os.O_DIRECT)
            adm = self.admin()

            def call(fd, fdlabel):
                if configure:
                    arg = 0 if null else bytearray(data)
                    r, _ = self.ioctl(fd, L.LOOP_CONFIGURE, arg, adm)
                else:
                    r, _ = self.ioctl(fd, L.LOOP_SET_FD, fdv, adm)
                self.emit(f"{desc} on {dev.name} via {fdlabel}{'' if adm else ' noadmin'}: {r}")
                return r
            r = self.with_dev_fd(dev, call, desc.split()[0])
            self.touched.add(dev.n)
            if r == "ok":
                dev.backing = (info[0], info[1]) if info else ("unknown", None)
                dev.min_dio = min_dio if info else SECTOR
                self.pending_dio = (dev, requested)
        finally:
            self.release_backing(bfd, closer)

    def op_change_fd(self):
        rng = self.rng
        dev = self.pick_dev()
        bfd, blabel, closer, info = self.pick_backing(dev)
        try:
            min_dio = self.min_dio_of(bfd, info) if info else SECTOR
            adm = self.admin()

            def call(fd, fdlabel):
                r, _ = self.ioctl(fd, L.LOOP_CHANGE_FD, bfd, adm)
                self.emit(f"change-fd {blabel} on {dev.name} via {fdlabel}"
                          f"{'' if adm else ' noadmin'}: {r}")
                return r
            r = self.with_dev_fd(dev, call, "change-fd")
            self.touched.add(dev.n)
            if r == "ok":
                dev.backing = (info[0], info[1]) if info else ("unknown", None)
                dev.min_dio = min_dio
                # loop_assign_backing_file sets LO_FLAGS_DIRECT_IO for an O_DIRECT file.
                direct = bool(info and info[2] & os.O_DIRECT)
                self.pending_dio = (dev, True if direct else None)
        finally:
            self.release_backing(bfd, closer)

    def simple_ioctl(self, name, cmd, argf, after=None, dev=None):
        """An ioctl on a random main device (or dev) through a random descriptor."""
        if dev is None:
            dev = self.pick_dev()
        adm = self.admin()
        arg, desc = argf(dev)

        def call(fd, fdlabel):
            r, v = self.ioctl(fd, cmd, arg, adm)
            text = r
            if after is not None:
                text = after(dev, r, v, arg)
            self.emit(f"{name}{desc} on {dev.name} via {fdlabel}{'' if adm else ' noadmin'}: "
                      f"{text}")
            return r
        r = self.with_dev_fd(dev, call, name)
        self.touched.add(dev.n)
        return dev, r

    def op_clr_fd(self):
        self.simple_ioctl("clr-fd", L.LOOP_CLR_FD, lambda d: (0, ""))

    def op_get_status64(self):
        rng = self.rng
        null = rng.random() < 0.05

        def argf(dev):
            return (0 if null else bytearray(L.INFO64.size)), (" NULL" if null else "")

        def after(dev, r, v, arg):
            if r != "ok" or null:
                return r
            return "ok " + self.fmt_status64(dev, dict(zip(L.INFO64_FIELDS, L.INFO64.unpack(arg))))
        self.simple_ioctl("get-status64", L.LOOP_GET_STATUS64, argf, after)

    def op_get_status(self):
        rng = self.rng
        null = rng.random() < 0.05

        def argf(dev):
            return (0 if null else bytearray(L.INFO_OLD.size)), (" NULL" if null else "")

        def after(dev, r, v, arg):
            if r != "ok" or null:
                return r
            return "ok " + self.fmt_status_old(
                dev, dict(zip(L.INFO_OLD_FIELDS, L.INFO_OLD.unpack(arg))))
        self.simple_ioctl("get-status", L.LOOP_GET_STATUS, argf, after)

    def current_status64(self, fd):
        """LOOP_GET_STATUS64 (a call) as the base of a LOOP_SET_STATUS64, or zeros."""
        buf = bytearray(L.INFO64.size)
        r, _ = self.ioctl(fd, L.LOOP_GET_STATUS64, buf)
        if r != "ok":
            return L.zero_info64()
        return dict(zip(L.INFO64_FIELDS, L.INFO64.unpack(buf)))

    def mutate_status(self, dev, v, old=False):
        rng = self.rng
        desc = []
        if rng.random() < 0.1:
            v = dict(v, offset=0, sizelimit=0, flags=0, file_name=b"")
            desc.append("zeroed")
        if rng.random() < 0.35:
            if old:
                v["offset"] = rng.choice((0, 512, 4096, 100, 65536, 1 << 20, 0x7FFFFFFF, -1,
                                          -4096))
            else:
                v["offset"] = self.rand_offset()
            desc.append(f"off={v['offset']}")
        if not old and rng.random() < 0.3:
            v["sizelimit"] = self.rand_sizelimit()
            desc.append(f"lim={v['sizelimit']}")
        if rng.random() < 0.5:
            f = v["flags"]
            for bit, p in ((LO_AUTOCLEAR, 0.4), (LO_PARTSCAN, 0.25), (LO_RO, 0.15),
                           (LO_DIO, 0.15)):
                if rng.random() < p:
                    f ^= bit
            if rng.random() < 0.05:
                f |= rng.choice((0x20, 0x100))
            # A partition scan of a device that lies past its backing's end reads there (the
            # parsers read the last sectors): loop.c fails it, rust_loop reads zeroes, and the
            # partitions found differ; so LO_FLAGS_PARTSCAN is not newly set on such a device.
            # The same when I/O on it depends on the deliberate differences below it.
            if (f & LO_PARTSCAN and self.dev_int(dev, "loop/partscan", 0) == 0
                    and (self.past_end_from(dev) is not None or self.chain_unpredictable(dev))):
                f &= ~LO_PARTSCAN
            v["flags"] = f
            # (the base's LO_FLAGS_DIRECT_IO is loop.c's or rust_loop's; both ignore it here)
            desc.append(f"flags={self.fmt_flags(dev, f)}")
        if rng.random() < 0.07:
            et, ks = self.rand_crypt()
            v["encrypt_type"], v["encrypt_key_size"] = et, ks
            desc.append(f"crypt={et},{ks}")
        if rng.random() < 0.2:
            v["file_name"] = self.rand_name()
            desc.append(f"name={L.cstr(v['file_name'])!r}")
        return v, " ".join(desc)

    def op_set_status64(self):
        rng = self.rng
        dev = self.pick_dev()
        adm = self.admin()
        null = rng.random() < 0.03

        def call(fd, fdlabel):
            base = self.current_status64(fd) if rng.random() < 0.85 else L.zero_info64()
            v, desc = self.mutate_status(dev, base)
            arg = 0 if null else bytearray(L.pack_info64(v))
            r, _ = self.ioctl(fd, L.LOOP_SET_STATUS64, arg, adm)
            self.emit(f"set-status64 {'NULL' if null else desc or 'unchanged'} on {dev.name} "
                      f"via {fdlabel}{'' if adm else ' noadmin'}: {r}")
            return r
        r = self.with_dev_fd(dev, call, "set-status64")
        self.touched.add(dev.n)
        if r == "ok":
            self.pending_dio = (dev, None)

    def op_set_status(self):
        rng = self.rng
        dev = self.pick_dev()
        adm = self.admin()

        def call(fd, fdlabel):
            v = dict(zip(L.INFO_OLD_FIELDS, L.INFO_OLD.unpack(bytes(L.INFO_OLD.size))))
            if rng.random() < 0.85:
                buf = bytearray(L.INFO_OLD.size)
                r, _ = self.ioctl(fd, L.LOOP_GET_STATUS, buf)
                if r == "ok":
                    v = dict(zip(L.INFO_OLD_FIELDS, L.INFO_OLD.unpack(buf)))
            v, desc = self.mutate_status(dev, v, old=True)
            # The old structure's offset, flags and encryption fields are ints.
            for k in ("offset", "flags", "encrypt_type", "encrypt_key_size"):
                x = v[k] & 0xFFFFFFFF
                v[k] = x - (1 << 32) if x >= 1 << 31 else x
            data = L.INFO_OLD.pack(*(v[k] for k in L.INFO_OLD_FIELDS))
            r, _ = self.ioctl(fd, L.LOOP_SET_STATUS, bytearray(data), adm)
            self.emit(f"set-status {desc or 'unchanged'} on {dev.name} via {fdlabel}"
                      f"{'' if adm else ' noadmin'}: {r}")
            return r
        r = self.with_dev_fd(dev, call, "set-status")
        self.touched.add(dev.n)
        if r == "ok":
            self.pending_dio = (dev, None)

    def op_set_capacity(self):
        self.simple_ioctl("set-capacity", L.LOOP_SET_CAPACITY, lambda d: (0, ""))

    def op_set_dio(self):
        rng = self.rng
        arg = rng.choice((0, 1, 1, 2, 1 << 32))
        dev = self.pick_dev()
        adm = self.admin()
        state = dev.dio
        bound = dev.raw.get("loop/backing_file") is not None
        aligned = self.aligned_dio(dev)

        def call(fd, fdlabel):
            r, _ = self.ioctl(fd, L.LOOP_SET_DIRECT_IO, arg, adm)
            text = r
            if arg and bound and r in ("ok", "EINVAL") and not aligned and state != "on":
                # loop.c refuses direct I/O below the backing's alignment; rust_loop takes it.
                text = "ok|EINVAL"
            self.emit(f"set-direct-io {arg} on {dev.name} via {fdlabel}"
                      f"{'' if adm else ' noadmin'}: {text}")
            return r
        r = self.with_dev_fd(dev, call, "set-direct-io")
        self.touched.add(dev.n)
        if bound and r in ("ok", "EINVAL"):
            if arg == 0 and r == "ok":
                dev.dio = "off"
            elif arg:
                if state == "on":
                    pass
                elif aligned:
                    dev.dio = "on" if r == "ok" else dev.dio
                else:
                    dev.dio = "div"

    def op_set_block_size(self):
        rng = self.rng
        dev = self.pick_dev()
        bs = rng.choice((0, 512, 512, 1024, 2048, 4096, 4096, 8192, 16384, 65536, 131072, 1234,
                         3000, 256, (1 << 32) | 512, (1 << 32) | 4096))
        if bs == 0 and dev.dio == "div" and dev.min_dio != SECTOR:
            # The default block size follows LO_FLAGS_DIRECT_IO, which may differ here.
            bs = 512
        adm = self.admin()

        def call(fd, fdlabel):
            r, _ = self.ioctl(fd, L.LOOP_SET_BLOCK_SIZE, bs, adm)
            self.emit(f"set-block-size {bs} on {dev.name} via {fdlabel}"
                      f"{'' if adm else ' noadmin'}: {r}")
            return r
        r = self.with_dev_fd(dev, call, "set-block-size")
        self.touched.add(dev.n)
        self.pending_dio = (dev, None)

    def op_unknown(self):
        rng = self.rng
        cmd = rng.choice((0x4C0B, 0x4C0F, 0x4C80, 0x4C82, 0x4CFF, 0x12FF))
        self.simple_ioctl(f"ioctl {cmd:#x}", cmd, lambda d: (rng.getrandbits(16), ""))

    def op_null(self):
        rng = self.rng
        name, cmd = rng.choice((("set-status64", L.LOOP_SET_STATUS64),
                                ("set-status", L.LOOP_SET_STATUS),
                                ("get-status", L.LOOP_GET_STATUS)))
        self.simple_ioctl(f"{name} NULL", cmd, lambda d: (0, ""))

    def op_blk(self):
        rng = self.rng
        k = rng.choice(("roset", "roget", "flsbuf", "rrpart", "getsize64", "sszget", "pbszget",
                        "discard", "zeroout"))
        if k == "roset":
            val = rng.choice((0, 0, 1))
            self.simple_ioctl(f"BLKROSET {val}", BLKROSET,
                              lambda d: (bytearray(struct.pack("i", val)), ""))
        elif k in ("roget", "sszget", "pbszget"):
            cmd = {"roget": BLKROGET, "sszget": BLKSSZGET, "pbszget": BLKPBSZGET}[k]
            self.simple_ioctl(
                f"BLK{k.upper()}", cmd, lambda d: (bytearray(4), ""),
                lambda d, r, v, a: r if r != "ok" else f"ok {struct.unpack('i', a)[0]}")
        elif k == "getsize64":
            self.simple_ioctl(
                "BLKGETSIZE64", BLKGETSIZE64, lambda d: (bytearray(8), ""),
                lambda d, r, v, a: r if r != "ok" else f"ok {struct.unpack('Q', a)[0]}")
        elif k == "flsbuf":
            self.simple_ioctl("BLKFLSBUF", BLKFLSBUF, lambda d: (0, ""))
        elif k == "rrpart":
            dev = self.pick_dev()
            why = self.chain_unpredictable(dev)
            if self.past_end_from(dev) is not None:
                # (as LO_FLAGS_PARTSCAN above: the scan reads past the backing's end)
                self.emit(f"BLKRRPART on {dev.name}: skipped, the device lies past its "
                          f"backing's end")
            elif why:
                self.emit(f"BLKRRPART on {dev.name}: skipped, {why}")
            else:
                self.simple_ioctl("BLKRRPART", BLKRRPART, lambda d: (0, ""), dev=dev)
        else:
            cmd = BLKDISCARD if k == "discard" else BLKZEROOUT

            def argf(dev):
                lbs = max(self.dev_int(dev, "lbs", SECTOR), SECTOR)
                start = rng.choice((0, lbs, 8 * lbs, 65536, self.dev_bytes(dev) - lbs))
                start = max(start, 0) // lbs * lbs
                length = rng.choice((lbs, 4096, 65536, 3 * lbs))
                if rng.random() < 0.1:
                    start += 1
                return (bytearray(struct.pack("QQ", start, length)), f" {start}+{length}")
            dev, r = self.simple_ioctl(f"BLK{k.upper()}", cmd, argf)
            # Through a chain it reaches the loop devices below as fallocate of their backing,
            # whose refusal lowers their discard and write-zeroes limits: read those back too.
            lower = self.lower_of(dev)
            while lower is not None and lower.n not in self.touched:
                self.touched.add(lower.n)
                lower = self.lower_of(lower)

    def stale_blocksize(self, dev, fd):
        """The block device's page-cache block size (BLKBSZGET: fixed at its first open) when
        it is below the logical block size (raised by LOOP_SET_BLOCK_SIZE while the device
        stayed open), else None. Then the block layer fails every page-cache bio that is not
        a multiple of the logical block size, and whether a buffered read works depends on
        where its readahead window ends: on read_ahead_kb, which rust_loop's larger
        max_sectors makes larger (README "Differences from loop.c"). Not the loop ABI: the
        generator makes no buffered I/O then."""
        buf = bytearray(8)
        try:
            fcntl.ioctl(fd, BLKBSZGET, buf, True)
        except OSError:
            return None
        bsz = struct.unpack("Q", buf)[0]
        return bsz if bsz < self.dev_int(dev, "lbs", SECTOR) else None

    def chain_unpredictable(self, dev):
        """Through the loop devices below dev: one whose page-cache block size is below its
        logical block size (stale_blocksize: loop.c's buffered backing I/O goes through that
        page cache), or, for a device in direct-I/O mode in both drivers, one whose logical
        block size grew past the alignment recorded when the device above was bound (loop.c
        sends what is below the new size direct and fails it, rust_loop checks each request
        against the lower device's block size of the moment and sends it buffered: README
        "Differences from loop.c"). Either makes the result of I/O on dev depend on the
        deliberate differences; None when neither."""
        for _ in range(len(self.devs)):
            lower = self.lower_of(dev)
            if lower is None:
                return None
            if dev.dio == "on" and self.dev_int(lower, "lbs", SECTOR) > dev.min_dio:
                return (f"direct I/O with the alignment of the binding, which {lower.name}'s "
                        f"block size raised since")
            fd = lower.fds[0].fd if lower.fds else None
            tmp = None
            if fd is None:
                try:
                    tmp = fd = os.open(f"/dev/{lower.name}", os.O_RDONLY)
                except OSError:
                    return f"{lower.name} cannot be opened"
            try:
                if self.stale_blocksize(lower, fd):
                    return f"{lower.name}'s page-cache block size below its logical block size"
            finally:
                if tmp is not None:
                    os.close(tmp)
            dev = lower
        return None

    def pattern(self, n):
        rng = self.rng
        b = rng.getrandbits(8) | 1
        unit = bytes((b + i) & 0xFF for i in range(61))
        return (unit * (n // 61 + 1))[:n]

    def io_range(self, dev, direct):
        rng = self.rng
        lbs = max(self.dev_int(dev, "lbs", SECTOR), SECTOR)
        size = self.dev_bytes(dev)
        units = max(size // lbs, 1)
        where = rng.random()
        if where < 0.25:
            pos = 0
        elif where < 0.55:
            pos = rng.randrange(units) * lbs
        elif where < 0.8:
            pos = max(units - rng.choice((1, 2, 3)), 0) * lbs
        else:
            pos = size + rng.choice((0, lbs))
        length = rng.choice((lbs, lbs, 2 * lbs, 4096, 8192, 65536))
        if not direct and rng.random() < 0.15:
            pos += rng.choice((1, 100, 511))
            length = rng.choice((1, 100, 1000))
        elif direct and rng.random() < 0.05:
            pos += 512 if lbs > 512 else 1
        return pos, length

    def op_read(self):
        rng = self.rng
        dev = self.pick_dev()
        direct = rng.random() < 0.35
        pos, length = self.io_range(dev, direct)
        length = min(length, len(self.buf))
        # On a loop device the request reaches the lower one's page cache (unless in direct-I/O
        # mode), which reads whole blocks: rounded as for a buffered read.
        past = self.touches_past_end(dev, pos, length,
                                     not direct or self.lower_of(dev) is not None)
        why = self.chain_unpredictable(dev)
        if why:
            self.emit(f"read {'direct' if direct else 'buffered'} {pos}+{length} {dev.name}: "
                      f"skipped, {why}")
            return
        if not direct:
            self.mark_zero_cache(dev)

        def do(fd, fdlabel):
            stale = None if direct else self.stale_blocksize(dev, fd)
            if stale:
                self.emit(f"read buffered {pos}+{length} {dev.name} via {fdlabel}: skipped, "
                          f"page-cache block size {stale} below the logical block size")
                return
            self.calls += 1
            try:
                if direct:
                    n = os.preadv(fd, [memoryview(self.buf)[:length]], pos)
                    data = self.buf[:n]
                else:
                    data = os.pread(fd, length, pos)
                    n = len(data)
                res = f"ok {n} crc={zlib.crc32(data):08x}"
            except OSError as e:
                res = ename(e.errno)
            if past:
                res = "past-end"
            self.emit(f"read {'direct' if direct else 'buffered'} {pos}+{length} {dev.name} "
                      f"via {fdlabel}: {res}")

        if direct:
            fd, err = self.open_dev(dev.n, os.O_RDONLY | os.O_DIRECT)
            if fd is None:
                self.emit(f"read direct {pos}+{length} {dev.name}: open {err}")
                return
            try:
                do(fd, "new ro+direct")
            finally:
                self.close_fd(dev.n, fd)
        else:
            self.with_dev_fd(dev, lambda fd, lab: do(fd, lab), "read")
        self.touched.add(dev.n)

    def op_write(self):
        rng = self.rng
        dev = self.pick_dev()
        direct = rng.random() < 0.35
        pos, length = self.io_range(dev, direct)
        length = min(length, len(self.buf))
        why = self.chain_unpredictable(dev)
        if why:
            self.emit(f"write {'direct' if direct else 'buffered'} {pos}+{length} {dev.name}: "
                      f"skipped, {why}")
            return
        lower = self.lower_of(dev)
        if lower is not None and self.touches_past_end(dev, pos, length, True) and (
                pos < self.dev_bytes(lower) - self.dev_int(dev, "loop/offset")):
            # On a loop device, near the end of its data: the write may reach past the lower
            # device's end (loop.c: success for the part it took, rust_loop: an error, which
            # would also stay recorded for later fsyncs of the device), or read-modify-write a
            # block of the lower device past its backing file's end (loop.c: an error, rust_loop:
            # zeroes). Writes wholly past the lower device's end (ENOSPC in both) are made.
            self.emit(f"write {'direct' if direct else 'buffered'} {pos}+{length} {dev.name}: "
                      f"skipped, near the end of the backing device's data")
            return
        if not direct and self.touches_past_end(dev, pos, length, True):
            # A buffered write that covers part of a block reads it first: past the end of the
            # backing, loop.c fails that read. Whole blocks, then (of the page cache's block
            # size, at most a page or the logical block size), none cut short by the device's
            # end.
            g = max(self.dev_int(dev, "lbs", SECTOR), 4096)
            pos = pos // g * g
            length = max(-(-length // g) * g, g)
            end = self.dev_bytes(dev) // g * g
            if pos + length > end:
                length = end - pos
            if length <= 0:
                self.emit(f"write buffered {pos} {dev.name}: skipped, in the device's last "
                          f"partial block, past the end of the backing file")
                return
        data = self.pattern(length)

        def do(fd, fdlabel):
            stale = None if direct else self.stale_blocksize(dev, fd)
            if stale:
                self.emit(f"write buffered {pos}+{length} {dev.name} via {fdlabel}: skipped, "
                          f"page-cache block size {stale} below the logical block size")
                return
            self.calls += 1
            try:
                if direct:
                    self.buf[:length] = data
                    n = os.pwritev(fd, [memoryview(self.buf)[:length]], pos)
                else:
                    n = os.pwrite(fd, data, pos)
                res = f"ok {n}"
            except OSError as e:
                res = ename(e.errno)
            if not direct:
                self.calls += 1
                try:
                    os.fsync(fd)
                    res += ", fsync ok"
                except OSError as e:
                    res += f", fsync {ename(e.errno)}"
            self.emit(f"write {'direct' if direct else 'buffered'} {pos}+{length} {dev.name} "
                      f"via {fdlabel}: {res}")

        if direct:
            fd, err = self.open_dev(dev.n, os.O_RDWR | os.O_DIRECT)
            if fd is None:
                self.emit(f"write direct {pos}+{length} {dev.name}: open {err}")
                return
            try:
                do(fd, "new rw+direct")
            finally:
                self.close_fd(dev.n, fd)
        else:
            def held_or_new(fd, lab):
                do(fd, lab)
            self.with_dev_fd(dev, held_or_new, "write")
        self.touched.add(dev.n)

    def op_file(self):
        rng = self.rng
        label = rng.choice(sorted(self.files))
        f = self.files[label]
        k = rng.random()
        size = f.size()
        if k < 0.3:
            new = size + rng.choice((512, 4096, 65536, 100, 1 << 20))
            os.ftruncate(f.fd, new)
            self.emit(f"file {f.label} grow {size}->{new}")
        elif k < 0.55:
            new = max(size - rng.choice((512, 4096, 65536, 100, 1 << 20)), 0)
            os.ftruncate(f.fd, new)
            self.emit(f"file {f.label} shrink {size}->{new}")
        elif k < 0.85:
            pos = rng.randrange(0, max(size, 1) + 4096) // 512 * 512
            n = rng.choice((512, 4096, 65536))
            os.pwrite(f.fd, self.pattern(n), pos)
            self.emit(f"file {f.label} write {pos}+{n}: size {f.size()}")
        else:
            d = os.path.dirname(f.path)
            size = 2 << 20 if label == "mbr" else rng.choice((64 << 10, 256 << 10, 1 << 20))
            nf = self.new_file(label, d, size, mbr=label == "mbr")
            self.emit(f"file {f.label} replaced by {nf.label} size {nf.size()}")
        # The watch shows what the devices make of it.
        self.touched.update(n for n, d in self.devs.items() if d.backing)

    def op_ctl(self):
        rng = self.rng
        self.watch_all = True
        ctl = os.open("/dev/loop-control", os.O_RDWR)
        try:
            k = rng.random()
            nums = sorted(self.devs) + [4, 5, 6, 7, 9, 12]
            if k < 0.35:
                n = rng.choice(nums + [-1, -1, 1 << 20, 0x7FFFFFFF])
                r, v = self.ioctl(ctl, L.LOOP_CTL_ADD, n & 0xFFFFFFFFFFFFFFFF)
                self.emit(f"ctl-add {n}: {r}{'' if v is None else ' ' + str(v)}")
                if r == "ok":
                    self.known.add(v)
            elif k < 0.75:
                n = rng.choice(nums + [-1, 1 << 20, 100])
                r, v = self.ioctl(ctl, L.LOOP_CTL_REMOVE, n & 0xFFFFFFFFFFFFFFFF)
                self.emit(f"ctl-remove {n}: {r}")
                if n in self.devs:
                    self.touched.add(n)
            elif k < 0.95:
                r, v = self.ioctl(ctl, L.LOOP_CTL_GET_FREE, 0)
                self.emit(f"ctl-get-free: {r}{'' if v is None else ' ' + str(v)}")
                if r == "ok":
                    self.known.add(v)
            else:
                cmd = rng.choice((0x4C83, 0x4C00, 0x4C05))
                r, v = self.ioctl(ctl, cmd, 0)
                self.emit(f"ctl ioctl {cmd:#x}: {r}")
        finally:
            os.close(ctl)

    OPS = (("open", 10), ("close", 7), ("set_fd", 5), ("configure", 9), ("change_fd", 3),
           ("clr_fd", 7), ("set_status64", 6), ("set_status", 2), ("get_status64", 3),
           ("get_status", 2), ("set_capacity", 2), ("set_dio", 3), ("set_block_size", 4),
           ("unknown", 1), ("null", 1), ("blk", 4), ("read", 9), ("write", 6), ("file", 4),
           ("ctl", 4))

    def run_op(self, name):
        self.pending_dio = None
        # Calls that may change queue limits without a media change.
        self.limits_changed = name in ("set_block_size", "set_dio", "blk", "configure",
                                       "set_fd", "change_fd")
        self.parts_check = name in ("set_status64", "set_status", "blk", "ctl")
        {"open": self.op_open, "close": self.op_close,
         "set_fd": lambda: self.op_bind(False), "configure": lambda: self.op_bind(True),
         "change_fd": self.op_change_fd, "clr_fd": self.op_clr_fd,
         "set_status64": self.op_set_status64, "set_status": self.op_set_status,
         "get_status64": self.op_get_status64, "get_status": self.op_get_status,
         "set_capacity": self.op_set_capacity, "set_dio": self.op_set_dio,
         "set_block_size": self.op_set_block_size, "unknown": self.op_unknown,
         "null": self.op_null, "blk": self.op_blk, "read": self.op_read,
         "write": self.op_write, "file": self.op_file, "ctl": self.op_ctl}[name]()

    # ---- the sequence ---------------------------------------------------------------------
    def start(self):
        """A defined start: devices 0-7 present, no other; every main device unbound."""
        ctl = os.open("/dev/loop-control", os.O_RDWR)
        try:
            present = sorted(int(x[4:]) for x in os.listdir("/sys/block")
                             if x.startswith("loop") and x[4:].isdigit())
            for n in present:
                if n > 7 and n not in self.devs:
                    r, _ = self.ioctl(ctl, L.LOOP_CTL_REMOVE, n)
                    self.emit(f"start: ctl-remove {n}: {r}")
            for n in sorted(set(range(8)) | set(self.devs)):
                if not os.path.exists(f"/sys/block/loop{n}"):
                    r, v = self.ioctl(ctl, L.LOOP_CTL_ADD, n)
                    self.emit(f"start: ctl-add {n}: {r}")
        finally:
            os.close(ctl)
        for n in sorted(self.known):
            fd = os.open(f"/dev/loop{n}", os.O_RDONLY)
            try:
                fcntl.ioctl(fd, BLKROSET, struct.pack("i", 0))
            finally:
                os.close(fd)
        for n in sorted(self.devs):
            self.touched.add(n)
        self.end_step()

    def finish(self):
        """Every descriptor closed, every main device cleared."""
        self.step_no += 1
        for dev in self.devs.values():
            while dev.fds:
                h = dev.fds.pop(0)
                self.close_fd(dev.n, h.fd)
                self.emit(f"finish: close {dev.name} {h.label}")
        self.touched.update(self.devs)
        self.end_step()
        for _ in range(len(self.devs) + 1):
            bound = [d for d in self.devs.values() if d.raw.get("loop/backing_file") is not None]
            if not bound:
                break
            for dev in bound:
                self.step_no += 1
                fd, err = self.open_dev(dev.n, os.O_RDONLY)
                if fd is None:
                    self.emit(f"finish: open {dev.name}: {err}")
                    continue
                r, _ = self.ioctl(fd, L.LOOP_CLR_FD)
                self.close_fd(dev.n, fd)
                self.emit(f"finish: clr-fd {dev.name}: {r}")
                self.touched.update(self.devs)
                self.end_step()

    def run(self):
        t_setup = time.monotonic()
        self.setup()
        t_start = time.monotonic()
        self.start()
        t_run = time.monotonic()
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        prof = {}
        while self.calls < self.args.calls:
            if self.args.stop_step and self.step_no >= self.args.stop_step:
                self.debug_dump()
                return
            self.step_no += 1
            name = self.rng.choices(names, weights)[0]
            t0 = time.monotonic()
            self.run_op(name)
            t1 = time.monotonic()
            self.end_step()
            t2 = time.monotonic()
            a = prof.setdefault(name, [0, 0.0, 0.0])
            a[0] += 1
            a[1] += t1 - t0
            a[2] += t2 - t1
        if self.args.profile:
            for k, (c, x, y) in sorted(prof.items(), key=lambda kv: -kv[1][1] - kv[1][2]):
                sys.stderr.write(f"  {k:15s} {c:5d} op {x * 1000 / c:7.2f} ms  "
                                 f"state {y * 1000 / c:7.2f} ms\n")
        self.emit(f"sequence done: {self.step_no} steps")
        t_finish = time.monotonic()
        self.finish()
        # The count of calls the test checks (identical for both drivers, like every line).
        self.emit(f"finished: {self.calls} calls, {self.ioctls} ioctls")
        t_end = time.monotonic()
        if self.args.profile:
            sys.stderr.write(f"  setup {t_start - t_setup:.1f}s start {t_run - t_start:.1f}s "
                             f"steps {t_finish - t_run:.1f}s finish {t_end - t_finish:.1f}s\n")
        sys.stderr.write(f"seed {self.seed}: {self.step_no} steps, {self.calls} calls "
                         f"({self.ioctls} ioctls)\n")
        for f in self.versions:
            os.close(f.fd)
        for d in (self.tdir, self.ddir):
            for root, dirs, files in os.walk(d, topdown=False):
                for x in files:
                    os.unlink(os.path.join(root, x))
                for x in dirs:
                    os.rmdir(os.path.join(root, x))
            os.rmdir(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tmpfs", required=True, help="a directory on tmpfs")
    ap.add_argument("--disk", required=True, help="a directory on a disk file system")
    ap.add_argument("--disk-dev", default="vda", help="the disk's block device (sysfs name)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--calls", type=int, default=3000, help="calls per seed (at least)")
    ap.add_argument("--devs", default="0,1,2,3")
    ap.add_argument("--profile", action="store_true", help="time per kind of call (stderr)")
    ap.add_argument("--cachestat", action="store_true",
                    help="debugging: print the devices' page-cache folio counts after each step")
    ap.add_argument("--stop-step", type=int, default=0,
                    help="stop after this step of the (first) seed, leaving the state as it is")
    args = ap.parse_args()
    args.devs = [int(x) for x in args.devs.split(",")]
    sys.stdout.reconfigure(line_buffering=False)
    for s in args.seeds.split(","):
        Gen(args, int(s)).run()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
