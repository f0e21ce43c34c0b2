"""System calls the crash tests make many times a second, without a process each (under TCG an
exec of dmsetup, losetup or mount costs 0.2-0.7 s, of fio 1-3 s): device-mapper ioctls, loop
ioctls, mount(2), umount2(2), BLKDISCARD/BLKZEROOUT, Linux native AIO, and the rust_loop
counters. Stdlib only."""
import ctypes
import errno
import fcntl
import os
import platform
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import loopioctl  # noqa: E402  (tests/loopioctl.py: the loop ABI's layouts)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long


def _oserror(what):
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def mount(dev, target, fstype, opts=""):
    """mount(2): `dev` on `target` as `fstype` with the data options `opts`."""
    if _libc.mount(dev.encode(), target.encode(), fstype.encode(), 0, opts.encode()) != 0:
        raise _oserror(f"mount {dev} on {target} ({fstype}, {opts or 'defaults'})")


_libc.syncfs.argtypes = [ctypes.c_int]


def syncfs(path):
    """syncfs(2) of the file system holding `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            raise _oserror(f"syncfs {path}")
    finally:
        os.close(fd)


def umount(target, tries=50):
    """umount2(2), retried while EBUSY (a udev probe holding a file open) for up to 5 s."""
    for i in range(tries):
        if _libc.umount2(target.encode(), 0) == 0:
            return
        e = ctypes.get_errno()
        if e != errno.EBUSY or i == tries - 1:
            raise OSError(e, f"umount {target}: {os.strerror(e)}")
        time.sleep(0.1)


# ---- device-mapper (include/uapi/linux/dm-ioctl.h) ----
# struct dm_ioctl: version[3], data_size, data_start, target_count, open_count, flags, event_nr,
# padding, dev, name[128], uuid[129], data[7]: 312 bytes.
_DM = struct.Struct("=3IIIIiIIIQ128s129s7s")
# struct dm_target_spec: sector_start, length, status, next, target_type[16]: 40 bytes.
_SPEC = struct.Struct("=QQiI16s")
_DM_CREATE, _DM_REMOVE, _DM_SUSPEND, _DM_STATUS, _DM_LOAD, _DM_TABLE_STATUS, _DM_MSG = \
    3, 4, 6, 7, 9, 12, 14
_DM_SUSPEND_FLAG = 1 << 1
_DM_SKIP_LOCKFS_FLAG = 1 << 10
# udev: the rules skip their own work (blkid probes, symlinks) for our devices, as dmsetup's
# --noudevrules would; the kernel only passes this cookie on in the uevent.
_DM_UDEV_COOKIE = (0x1 | 0x2 | 0x4 | 0x8) << 16


def _dm_req(cmd):
    return (3 << 30) | (_DM.size << 16) | (0xFD << 8) | cmd


def _dm_ioctl(cmd, name, flags=0, payload=b"", target_count=0, event_nr=0, out=4096):
    size = max(_DM.size + len(payload), _DM.size + out)
    buf = bytearray(size)
    _DM.pack_into(buf, 0, 4, 0, 0, size, _DM.size, target_count, 0, flags, event_nr, 0, 0,
                  name.encode(), b"", b"")
    buf[_DM.size:_DM.size + len(payload)] = payload
    with open("/dev/mapper/control", "rb", buffering=0) as ctl:
        fcntl.ioctl(ctl, _dm_req(cmd), buf, True)
    return buf


def _dm_dev(buf):
    dev = _DM.unpack_from(buf, 0)[10]
    return os.major(dev), (dev & 0xFF) | ((dev >> 12) & 0xFFF00)


def _table(lines):
    """Packs table lines "START LEN TYPE PARAMS" as dm_target_specs."""
    out = bytearray()
    for line in lines:
        start, length, ttype, params = line.split(None, 3)
        p = params.encode() + b"\0"
        p += b"\0" * (-(_SPEC.size + len(p)) % 8)
        out += _SPEC.pack(int(start), int(length), 0, _SPEC.size + len(p), ttype.encode()) + p
    return bytes(out)


def dm_create(name, table):
    """Creates and activates device-mapper device `name` with `table` (a line or lines); returns
    its node, /dev/dm-N (devtmpfs makes it; no udev needed)."""
    lines = [table] if isinstance(table, str) else table
    _dm_ioctl(_DM_CREATE, name, event_nr=_DM_UDEV_COOKIE)
    try:
        _dm_ioctl(_DM_LOAD, name, payload=_table(lines), target_count=len(lines))
        buf = _dm_ioctl(_DM_SUSPEND, name, event_nr=_DM_UDEV_COOKIE)
    except OSError:
        dm_remove(name)
        raise
    _, minor = _dm_dev(buf)
    node = f"/dev/dm-{minor}"
    for _ in range(100):
        if os.path.exists(node):
            return node
        time.sleep(0.02)
    raise RuntimeError(f"{node} (device-mapper {name}) did not appear")


def dm_reload(name, table, lockfs=False):
    """Loads `table` into `name` and swaps it in: suspend (without freezing the file system on
    it unless `lockfs`: as fstests' _load_flakey_table) waits for the I/O in flight, resume."""
    lines = [table] if isinstance(table, str) else table
    _dm_ioctl(_DM_LOAD, name, payload=_table(lines), target_count=len(lines))
    _dm_ioctl(_DM_SUSPEND, name, flags=_DM_SUSPEND_FLAG | (0 if lockfs else _DM_SKIP_LOCKFS_FLAG))
    _dm_ioctl(_DM_SUSPEND, name, event_nr=_DM_UDEV_COOKIE)


def dm_message(name, msg):
    """`dmsetup message NAME 0 MSG`."""
    _dm_ioctl(_DM_MSG, name, payload=struct.pack("=Q", 0) + msg.encode() + b"\0", out=0)


def dm_status(name):
    """`dmsetup status NAME`: the first target's status string."""
    buf = _dm_ioctl(_DM_TABLE_STATUS, name)
    start = _DM.unpack_from(buf, 0)[4]
    spec = buf[start:start + _SPEC.size]
    s = bytes(buf[start + _SPEC.size:]).split(b"\0", 1)[0].decode()
    return f"{_SPEC.unpack(spec)[4].rstrip(bytes(1)).decode()} {s}"


def dm_exists(name):
    try:
        _dm_ioctl(_DM_STATUS, name)
        return True
    except OSError as e:
        if e.errno == errno.ENXIO:
            return False
        raise


def dm_remove(name, tries=100):
    """Removes `name`, retried while EBUSY (a udev probe holding it open) for up to 10 s."""
    for i in range(tries):
        try:
            _dm_ioctl(_DM_REMOVE, name, event_nr=_DM_UDEV_COOKIE)
            return
        except OSError as e:
            if e.errno == errno.ENXIO:
                return
            if e.errno != errno.EBUSY or i == tries - 1:
                raise OSError(e.errno, f"removing device-mapper {name}: {e.strerror}") from e
            time.sleep(0.1)


def sectors(dev):
    """Size of block device `dev` in 512-byte sectors."""
    fd = os.open(dev, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END) // 512
    finally:
        os.close(fd)


# ---- null_blk (configfs) ----
NULLB = "/sys/kernel/config/nullb"


def _nullb_set(d, attr, value):
    with open(os.path.join(d, attr), "w") as f:
        f.write(str(value))


def nullb_create(name, size_mib):
    """A memory-backed null_blk device /dev/<name> (null_blk names a device made through
    configfs after its directory) of `size_mib` MiB with one hardware queue, completing in the
    submitter's context (null_blk must be loaded with nr_devices=0, configfs mounted); returns
    its node."""
    d = os.path.join(NULLB, name)
    os.mkdir(d)
    node = f"/dev/{name}"
    try:
        for attr, value in (("size", size_mib), ("memory_backed", 1),
                            ("blocksize", 512), ("submit_queues", 1), ("queue_mode", 2),
                            ("irqmode", 0), ("discard", 1), ("power", 1)):
            _nullb_set(d, attr, value)
    except OSError:
        nullb_remove(name)
        raise
    for _ in range(100):
        if os.path.exists(node):
            return node
        time.sleep(0.02)
    raise RuntimeError(f"{node} (null_blk {name}) did not appear")


def nullb_remove(name):
    d = os.path.join(NULLB, name)
    if not os.path.isdir(d):
        return
    _nullb_set(d, "power", 0)
    os.rmdir(d)


# ---- Linux native AIO (include/uapi/linux/aio_abi.h) ----
# io_setup, io_destroy, io_getevents, io_submit.
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
IOCB_CMD_PWRITE = 1


class _Iocb(ctypes.Structure):
    # Little-endian layout: aio_key before aio_rw_flags.
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32),
                ("aio_rw_flags", ctypes.c_int32), ("aio_lio_opcode", ctypes.c_uint16),
                ("aio_reqprio", ctypes.c_int16), ("aio_fildes", ctypes.c_uint32),
                ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64),
                ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


assert ctypes.sizeof(_Iocb) == 64 and ctypes.sizeof(_IoEvent) == 32


class Aio:
    """An AIO context of `depth` requests: writes submitted one by one (io_submit), completions
    reaped (io_getevents). The GIL is released in each system call (ctypes)."""

    def __init__(self, depth):
        nrs = _AIO_SYSCALLS.get(platform.machine())
        if nrs is None:
            raise OSError(errno.ENOSYS, f"native AIO: no system call numbers for {platform.machine()}")
        self._setup, self._destroy, self._getevents, self._submit = nrs
        self.depth = depth
        self.ctx = ctypes.c_ulong(0)
        self._iocbs = (_Iocb * depth)()
        self._events = (_IoEvent * depth)()
        if _libc.syscall(ctypes.c_long(self._setup), ctypes.c_long(depth),
                         ctypes.byref(self.ctx)) != 0:
            raise _oserror("io_setup")

    def pwrite(self, slot, fd, addr, nbytes, offset):
        """Submits a write of `nbytes` at `addr` to `fd` at `offset`, as request `slot` (0 to
        depth - 1, not in flight); its completion is reaped with the slot as its tag."""
        cb = self._iocbs[slot]
        ctypes.memset(ctypes.byref(cb), 0, ctypes.sizeof(cb))
        cb.aio_data, cb.aio_lio_opcode, cb.aio_fildes = slot, IOCB_CMD_PWRITE, fd
        cb.aio_buf, cb.aio_nbytes, cb.aio_offset = addr, nbytes, offset
        ptr = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(cb))
        if _libc.syscall(ctypes.c_long(self._submit), self.ctx, ctypes.c_long(1), ptr) != 1:
            raise _oserror("io_submit")

    def reap(self, min_nr, timeout):
        """[(slot, result)] of at least `min_nr` completions (fewer after `timeout` s)."""
        ts = _Timespec(int(timeout), int((timeout % 1) * 1e9))
        n = _libc.syscall(ctypes.c_long(self._getevents), self.ctx, ctypes.c_long(min_nr),
                          ctypes.c_long(self.depth), self._events, ctypes.byref(ts))
        if n < 0:
            if ctypes.get_errno() == errno.EINTR:
                return []
            raise _oserror("io_getevents")
        return [(self._events[i].data, self._events[i].res) for i in range(n)]

    def destroy(self):
        """io_destroy: waits for the requests in flight."""
        if self.ctx.value:
            _libc.syscall(ctypes.c_long(self._destroy), self.ctx)
            self.ctx = ctypes.c_ulong(0)


# ---- block device ioctls ----
BLKDISCARD = 0x1277
BLKZEROOUT = 0x127F
BLKFLSBUF = 0x1261


def blk_range_ioctl(fd, req, offset, length):
    fcntl.ioctl(fd, req, struct.pack("=QQ", offset, length))


# ---- loop devices ----
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4
LO_FLAGS_DIRECT_IO = 16


def loop_attach(path, dio, read_only=False):
    """Binds `path` to a free loop device (LOOP_CTL_GET_FREE, LOOP_CONFIGURE; direct I/O when
    `dio`) and returns /dev/loopN."""
    for _ in range(20):
        ctl = os.open("/dev/loop-control", os.O_RDWR)
        try:
            n = fcntl.ioctl(ctl, loopioctl.LOOP_CTL_GET_FREE)
        finally:
            os.close(ctl)
        dev = f"/dev/loop{n}"
        for _ in range(100):
            if os.path.exists(dev):
                break
            time.sleep(0.02)
        ffd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR)
        dfd = os.open(dev, os.O_RDWR)
        try:
            flags = (LO_FLAGS_DIRECT_IO if dio else 0) | (LO_FLAGS_READ_ONLY if read_only else 0)
            cfg = bytearray(loopioctl.CONFIG.size)
            loopioctl.CONFIG.pack_into(cfg, 0, ffd, 0, *([0] * 8), flags, b"", b"", b"", 0, 0,
                                       *([0] * 8))
            fcntl.ioctl(dfd, loopioctl.LOOP_CONFIGURE, bytes(cfg))
        except OSError as e:
            if e.errno == errno.EBUSY:  # taken meanwhile by another binder: the next one
                continue
            raise
        finally:
            os.close(dfd)
            os.close(ffd)
        if dio and loop_dio(dev) != 1:
            loop_detach(dev, path)
            raise RuntimeError(f"{dev}: direct I/O did not take on {path}")
        return dev
    raise RuntimeError(f"no free loop device for {path}")


def loop_bound(dev):
    return os.path.isdir(f"/sys/block/{os.path.basename(dev)}/loop")


def loop_dio(dev):
    with open(f"/sys/block/{os.path.basename(dev)}/loop/dio") as f:
        return int(f.read())


def backing_file(dev):
    """The path /sys/block/loopN/loop/backing_file gives, or None when `dev` is unbound. (Not
    LOOP_GET_STATUS64: it stats the file, which fails on a file system shut down.)"""
    try:
        with open(f"/sys/block/{os.path.basename(dev)}/loop/backing_file") as f:
            return f.read().rstrip("\n")
    except (FileNotFoundError, ProcessLookupError, OSError):
        return None


def loop_owned(dev, path):
    """Whether `dev` is (still) bound to the file `path`, or to one of a list of files: after it
    unbinds, another binder (a run beside this one) may take the same device."""
    return backing_file(dev) in (path if isinstance(path, list) else [path])


def loop_detach(dev, path, timeout=30.0):
    """LOOP_CLR_FD if `dev` is bound to the file `path` (loop_owned), then waits until it is
    not (the last opener gone: a udev probe may hold it for a moment)."""
    if not loop_owned(dev, path):
        return
    try:
        fd = os.open(dev, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.ioctl(fd, loopioctl.LOOP_CLR_FD)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
    finally:
        os.close(fd)
    end = time.monotonic() + timeout
    while loop_owned(dev, path):
        if time.monotonic() > end:
            raise RuntimeError(f"{dev} still bound {timeout:.0f} s after LOOP_CLR_FD")
        time.sleep(0.02)


def loop_status64(fd):
    buf = bytearray(loopioctl.INFO64.size)
    fcntl.ioctl(fd, loopioctl.LOOP_GET_STATUS64, buf, True)
    return buf


def counters(dev, names):
    """rust_loop's counters `names` of `dev` (/sys/kernel/debug/rust_loop/loopN/NAME), {} on
    loop.c. Only the counters asked for, one open and one read each: every system call of a
    workload thread waits for the GIL again behind the other threads, and reading all of a
    device's files (40) took about a second under TCG, as long as a stretch of the run, so
    rust_loop's runs bound and changed devices a fifth as often as loop.c's."""
    d = f"/sys/kernel/debug/rust_loop/{os.path.basename(dev)}"
    out = {}
    for name in names:
        try:
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
        except FileNotFoundError:
            if not out and not os.path.isdir(d):
                return out
            raise
        try:
            out[name] = int(os.read(fd, 64))
        finally:
            os.close(fd)
    return out


class DevCounters:
    """rust_loop's counters `names` (and the block layer's flush and discard counts) summed
    over the loop devices a run binds: each device's change from just after the run bound it to
    just before it lets it go. Loop devices are shared with the runs beside this one, so a
    device counts only while it is bound to this run's file. Thread-safe."""

    def __init__(self, names):
        self.names = list(names)
        self.lock = threading.Lock()
        self.sums = {}
        self.disk = {"flushes": 0, "discards": 0}

    def begin(self, dev):
        """A snapshot of `dev`'s counters, for `end`."""
        return counters(dev, self.names), diskstat(dev)

    def end(self, dev, base):
        """Adds `dev`'s counts since `base` (begin's snapshot)."""
        now, st = counters(dev, self.names), diskstat(dev)
        with self.lock:
            for k, v in now.items():
                self.sums[k] = self.sums.get(k, 0) + v - base[0].get(k, 0)
            for k in self.disk:
                self.disk[k] += st[k] - base[1][k]


def diskstat(dev):
    """/sys/block/<dev>/stat as a dict of the fields the tests use."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    v += [0] * (17 - len(v))
    return {"writes": v[4], "discards": v[11], "flushes": v[15]}
