"""The workload of a run: threads that write and record in the model what they were told is
durable, and the ways a write can end in the driver that each exercises.

- FileWriter: files on the file system on the loop device, each operation (create, overwrite,
  append, O_DIRECT overwrite, truncate, replace by rename, unlink) ended by fsync/fdatasync of
  the file and its directory: small synchronous writes (the NOWAIT path in direct-I/O mode) and
  a flush each.
- RawWriter: O_DIRECT writes, discards (BLKDISCARD), write-zeroes (BLKZEROOUT) and flushes
  (fsync) on a loop device without a file system, two threads pinned to different CPUs (so to
  different hardware queues): flushes racing writes of other queues.
- Knobs: LOOP_SET_STATUS64 (unchanged status: the queue is frozen and thawed) on the devices and
  LOOP_SET_DIRECT_IO toggles on the raw device, while flushes are in flight.
- Detacher: a device written and flushed while LOOP_CLR_FD is issued again and again (the flush
  in flight; the device unbinds at the last close), then bound again.
- ChangeFd: a read-only device switched between two files by LOOP_CHANGE_FD, each file written
  through the backing file system first (LOOP_CHANGE_FD writes the new file back, as loop.c
  does), while another thread reads the device. (A read-only device advertises no write cache,
  as loop.c's: the block layer sends it no flush.)
- DeepWriter: a deep queue of O_DIRECT writes (native AIO, 32 in flight) from one thread to a
  file of the file system on the loop device, an fdatasync every 64: the worker, a deep queue's
  second worker, completion batches.
Metadata churn and a per-cgroup worker come from fsstress in a child cgroup (crash.py starts
it).
"""
import ctypes
import errno
import fcntl
import mmap
import os
import random
import threading
import time
import zlib

import sysio
from model import ZERO4K, crc_blocks

BS = 4096


class Stop(Exception):
    """The run stopped (a cut): the thread ends quietly."""


class Worker(threading.Thread):
    """A workload thread: runs `step` until `stop` is set; an error while the run goes on is
    kept in `error` (and ends the thread). With `go` set to an event, it waits for that first:
    the threads of a stretch then start without each new one taking the GIL from the thread
    that starts the next (under TCG that took seconds a stretch)."""

    def __init__(self, name, stop, seed):
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.rng = random.Random(seed)
        self.error = None
        self.ops = 0
        self.go = None

    def run(self):
        if self.go is not None:
            self.go.wait()
        try:
            self.setup()
            while not self.stop.is_set():
                self.step()
                self.ops += 1
        except Stop:
            pass
        except Exception as e:  # noqa: BLE001 (reported by the run)
            if not self.stop.is_set():
                self.error = f"{self.name}: {type(e).__name__}: {e}"
        finally:
            self.teardown()

    def setup(self):
        pass

    def teardown(self):
        pass


class FileWriter(Worker):
    """Files in `root`/w<tid>, each operation ended by fsync of the file and its directory."""

    MAX_FILES = 24
    MAX_BYTES = 3 << 19

    def __init__(self, files, root, tid, stop, seed, content, counter):
        super().__init__(f"files{tid}", stop, seed)
        self.files = files
        self.dir = os.path.join(root, f"w{tid}")
        self.tid = tid
        self.content = content  # name -> bytearray: the acknowledged content (kept across cuts)
        self.counter = counter  # [next file number]: names are never reused
        self.dfd = None
        self.buf = mmap.mmap(-1, 256 << 10)

    def setup(self):
        # The directory was made durable before the run (crash.py: Run.build).
        self.dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)

    def teardown(self):
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None

    @staticmethod
    def synced(path, flags, op, sync=os.fsync, mode=0o644):
        """Opens path, runs op(fd), then sync(fd) (durable when it returns), and closes it."""
        fd = os.open(path, flags, mode)
        try:
            op(fd)
            sync(fd)
        finally:
            os.close(fd)

    def path(self, name):
        return os.path.join(self.dir, name)

    def key(self, name):
        return f"w{self.tid}/{name}"

    def begin(self, name, op, data):
        rec = self.files.start(self.key(name), op,
                               None if data is None else (len(data), zlib.crc32(data)))
        if rec is None:
            raise Stop
        return rec

    def finish(self, rec, name, data):
        state = None if data is None else (len(data), zlib.crc32(data))
        if not self.files.ack(rec, state):
            raise Stop
        if data is None:
            self.content.pop(name, None)
        else:
            self.content[name] = data

    def step(self):
        r = self.rng
        names = list(self.content)
        total = sum(len(v) for v in self.content.values())
        if not names or (len(names) < self.MAX_FILES and total < self.MAX_BYTES and r.random() < 0.3):
            return self.create()
        if len(names) >= self.MAX_FILES or total >= self.MAX_BYTES or r.random() < 0.05:
            return self.unlink(r.choice(names))
        name = r.choice(names)
        op = r.random()
        if op < 0.35:
            self.overwrite(name)
        elif op < 0.55:
            self.dio_overwrite(name)
        elif op < 0.7:
            self.append(name)
        elif op < 0.8:
            self.truncate(name)
        else:
            self.replace(name)

    def size(self):
        r = self.rng.random()
        if r < 0.5:
            return self.rng.randint(1, 16 << 10)
        if r < 0.9:
            return self.rng.randint(16 << 10, 96 << 10)
        return self.rng.randint(96 << 10, 200 << 10)

    def write_all(self, fd, data, off=None):
        mv = memoryview(data)
        while mv:
            n = os.write(fd, mv) if off is None else os.pwrite(fd, mv, off)
            mv = mv[n:]
            if off is not None:
                off += n

    def create(self):
        name = f"f{self.counter[0]}"
        self.counter[0] += 1
        data = bytearray(self.rng.randbytes(self.size()))
        rec = self.begin(name, "create", data)
        self.synced(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                    lambda fd: self.write_all(fd, data))
        os.fsync(self.dfd)
        self.finish(rec, name, data)

    def overwrite(self, name):
        old = self.content[name]
        off = self.rng.randint(0, len(old))
        new = self.rng.randbytes(self.rng.randint(1, 64 << 10))
        data = bytearray(old)
        data[off:off + len(new)] = new
        rec = self.begin(name, f"overwrite {off}+{len(new)}", data)
        self.synced(self.path(name), os.O_WRONLY, lambda fd: self.write_all(fd, new, off),
                    os.fdatasync)
        self.finish(rec, name, data)

    def dio_overwrite(self, name):
        """O_DIRECT writes of whole 4 KiB blocks (the file system's direct I/O on the loop
        device), extending the file to a block boundary at most."""
        old = self.content[name]
        blocks = (len(old) + BS - 1) // BS
        first = self.rng.randint(0, blocks)
        n = self.rng.randint(1, 16)
        self.buf.seek(0)
        new = self.rng.randbytes(n * BS)
        self.buf.write(new)
        data = bytearray(old)
        if len(data) < first * BS:
            data.extend(bytes(first * BS - len(data)))
        data[first * BS:first * BS + n * BS] = new
        rec = self.begin(name, f"dio {first * BS}+{n * BS}", data)
        fd = os.open(self.path(name), os.O_WRONLY | os.O_DIRECT)
        try:
            done = os.pwrite(fd, memoryview(self.buf)[:n * BS], first * BS)
            if done != n * BS:
                raise OSError(errno.EIO, f"short O_DIRECT write ({done} of {n * BS})")
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self.finish(rec, name, data)

    def append(self, name):
        new = self.rng.randbytes(self.size() // 2 + 1)
        data = self.content[name] + new
        rec = self.begin(name, f"append {len(new)}", data)
        self.synced(self.path(name), os.O_WRONLY | os.O_APPEND, lambda fd: self.write_all(fd, new))
        self.finish(rec, name, data)

    def truncate(self, name):
        old = self.content[name]
        n = self.rng.randint(0, len(old) + (8 << 10))
        data = bytearray(old[:n]) + bytes(max(0, n - len(old)))
        rec = self.begin(name, f"truncate {n}", data)
        self.synced(self.path(name), os.O_WRONLY, lambda fd: os.ftruncate(fd, n))
        self.finish(rec, name, data)

    def replace(self, name):
        """A new version written to a temporary file, fsync'd, renamed over the old one, the
        directory fsync'd."""
        data = bytearray(self.rng.randbytes(self.size()))
        tmp = self.path(name + ".tmp")
        rec = self.begin(name, "replace", data)
        self.synced(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, lambda fd: self.write_all(fd, data))
        os.rename(tmp, self.path(name))
        os.fsync(self.dfd)
        self.finish(rec, name, data)

    def unlink(self, name):
        rec = self.begin(name, "unlink", None)
        os.unlink(self.path(name))
        os.fsync(self.dfd)
        self.finish(rec, name, None)


class RawWriter(Worker):
    """O_DIRECT writes, discards, write-zeroes and flushes on blocks [first, first + count) of a
    raw loop device, pinned to `cpu`."""

    def __init__(self, blocks, dev, first, count, tid, cpu, stop, seed, inflight):
        super().__init__(f"raw{tid}", stop, seed)
        self.blocks = blocks
        self.dev = dev
        self.first = first
        self.count = count
        self.cpu = cpu
        self.fd = None
        self.buf = mmap.mmap(-1, 64 << 10)
        self.inflight = inflight  # [flushes in flight on the device] (Knobs counts races)
        self.stats = {"writes": 0, "discards": 0, "zeroouts": 0, "flushes": 0}

    def setup(self):
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})
        self.fd = os.open(self.dev, os.O_RDWR | os.O_DIRECT)

    def teardown(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def step(self):
        r = self.rng.random()
        n = self.rng.randint(1, 16)
        b = self.first + self.rng.randrange(self.count - n + 1)
        if r < 0.70:
            self.write(b, n)
            if self.rng.random() < 0.25:
                self.flush()
        elif r < 0.78:
            self.discard(b, n)
            self.flush()
        elif r < 0.86:
            self.zeroout(b, n)
            self.flush()
        else:
            self.flush()

    def write(self, b, n):
        data = self.rng.randbytes(n * BS)
        self.buf.seek(0)
        self.buf.write(data)
        crcs = crc_blocks(data)
        recs = self.blocks.start(range(b, b + n), lambda blk, prev: [crcs[blk - b]])
        if recs is None:
            raise Stop
        done = os.pwrite(self.fd, memoryview(self.buf)[:n * BS], b * BS)
        if done != n * BS:
            raise OSError(errno.EIO, f"short write ({done} of {n * BS})")
        self.blocks.done(recs)
        self.stats["writes"] += 1

    def discard(self, b, n):
        recs = self.blocks.start(range(b, b + n), lambda blk, prev: prev | {ZERO4K})
        if recs is None:
            raise Stop
        sysio.blk_range_ioctl(self.fd, sysio.BLKDISCARD, b * BS, n * BS)
        self.blocks.done(recs)
        self.stats["discards"] += 1

    def zeroout(self, b, n):
        recs = self.blocks.start(range(b, b + n), lambda blk, prev: [ZERO4K])
        if recs is None:
            raise Stop
        sysio.blk_range_ioctl(self.fd, sysio.BLKZEROOUT, b * BS, n * BS)
        self.blocks.done(recs)
        self.stats["zeroouts"] += 1

    def flush(self):
        rec = self.blocks.flush_start()
        if rec is None:
            raise Stop
        self.inflight[0] += 1
        try:
            os.fsync(self.fd)
        finally:
            self.inflight[0] -= 1
        if not self.blocks.flush_done(rec):
            raise Stop
        self.stats["flushes"] += 1


class DeepWriter(Worker):
    """O_DIRECT 4 KiB writes to blocks of the file `path`, DEPTH in flight from this one thread
    (native AIO: no two to the same block at once), an fdatasync after every FSYNC_EVERY
    completions: durable, as on a device with a volatile cache, are the writes completed
    before the fdatasync was issued, once it returns (model.Blocks)."""

    DEPTH = 32
    FSYNC_EVERY = 64

    def __init__(self, blocks, path, nblocks, stop, seed):
        super().__init__("deep", stop, seed)
        self.blocks = blocks
        self.path = path
        self.nblocks = nblocks
        self.fd = None
        self.aio = None
        self.buf = mmap.mmap(-1, self.DEPTH * BS)
        # The buffers' addresses; c_char.from_buffer keeps the mapping exported, so it stays.
        self.addrs = [ctypes.addressof(ctypes.c_char.from_buffer(self.buf, i * BS))
                      for i in range(self.DEPTH)]
        self.inflight = {}  # slot -> (block, model records)
        self.completed = 0
        self.stats = {"writes": 0, "fdatasyncs": 0}

    def setup(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_DIRECT)
        self.aio = sysio.Aio(self.DEPTH)

    def teardown(self):
        if self.aio is not None:
            self.aio.destroy()  # waits for the writes in flight
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def step(self):
        busy = {b for b, _ in self.inflight.values()}
        for slot in range(self.DEPTH):
            if slot in self.inflight:
                continue
            b = self.rng.randrange(self.nblocks)
            while b in busy:
                b = self.rng.randrange(self.nblocks)
            data = self.rng.randbytes(BS)
            self.buf[slot * BS:(slot + 1) * BS] = data
            crc = zlib.crc32(data)
            recs = self.blocks.start([b], lambda blk, prev: [crc])
            if recs is None:
                raise Stop
            self.aio.pwrite(slot, self.fd, self.addrs[slot], BS, b * BS)
            self.inflight[slot] = (b, recs)
            busy.add(b)
        for slot, res in self.aio.reap(1, 1.0):
            b, recs = self.inflight.pop(slot)
            if res != BS:
                raise OSError(-res if res < 0 else errno.EIO,
                              f"AIO write of block {b}: {res}")
            self.blocks.done(recs)
            self.completed += 1
            self.stats["writes"] += 1
            if self.completed % self.FSYNC_EVERY == 0:
                rec = self.blocks.flush_start()
                if rec is None:
                    raise Stop
                os.fdatasync(self.fd)
                if not self.blocks.flush_done(rec):
                    raise Stop
                self.stats["fdatasyncs"] += 1


class Knobs(Worker):
    """LOOP_SET_STATUS64 with the status unchanged on `devs` (each freezes the queue), and
    LOOP_SET_DIRECT_IO to the other mode and back on `toggle_dev`, every few tens of
    milliseconds; counts those issued while a flush was in flight on the raw device."""

    def __init__(self, devs, toggle_dev, dio, stop, seed, inflight):
        super().__init__("knobs", stop, seed)
        self.devs = devs
        self.toggle_dev = toggle_dev
        self.dio = dio
        self.inflight = inflight
        self.stats = {"set_status": 0, "set_direct_io": 0, "racing_flush": 0}

    def step(self):
        time.sleep(self.rng.uniform(0.02, 0.12))
        dev = self.rng.choice(self.devs)
        fd = os.open(dev, os.O_RDONLY)
        try:
            racing = self.inflight[0] > 0
            if dev == self.toggle_dev and self.rng.random() < 0.3:
                fcntl.ioctl(fd, sysio.loopioctl.LOOP_SET_DIRECT_IO, 0 if self.dio else 1)
                time.sleep(self.rng.uniform(0.02, 0.2))
                racing = racing or self.inflight[0] > 0
                fcntl.ioctl(fd, sysio.loopioctl.LOOP_SET_DIRECT_IO, 1 if self.dio else 0)
                self.stats["set_direct_io"] += 2
            else:
                fcntl.ioctl(fd, sysio.loopioctl.LOOP_SET_STATUS64, bytes(sysio.loop_status64(fd)))
                self.stats["set_status"] += 1
            self.stats["racing_flush"] += int(racing)
        finally:
            os.close(fd)


class Detacher(Worker):
    """A loop device over `path` (mode `dio`): blocks written through it, then a flush (fsync)
    while another thread issues LOOP_CLR_FD; the device unbinds when the last descriptor
    closes, and is bound again for the next round."""

    def __init__(self, blocks, path, nblocks, dio, stop, seed, devices, counters):
        super().__init__("detach", stop, seed)
        self.counters = counters  # sysio.DevCounters of the run
        self.blocks = blocks
        self.path = path
        self.nblocks = nblocks
        self.dio = dio
        self.devices = devices  # [current device] (for the counters and the teardown)
        self.buf = mmap.mmap(-1, 64 << 10)
        self.stats = {"rounds": 0, "clr_during_flush": 0}

    def step(self):
        dev = sysio.loop_attach(self.path, self.dio)
        ident = self.path
        entry = [dev, ident]
        self.devices.append(entry)
        base = self.counters.begin(dev)
        fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
        try:
            for _ in range(self.rng.randint(1, 6)):
                n = self.rng.randint(1, 16)
                b = self.rng.randrange(self.nblocks - n + 1)
                data = self.rng.randbytes(n * BS)
                self.buf.seek(0)
                self.buf.write(data)
                crcs = crc_blocks(data)
                recs = self.blocks.start(range(b, b + n), lambda blk, prev: [crcs[blk - b]])
                if recs is None:
                    raise Stop
                if os.pwrite(fd, memoryview(self.buf)[:n * BS], b * BS) != n * BS:
                    raise OSError(errno.EIO, "short write")
                self.blocks.done(recs)
            rec = self.blocks.flush_start()
            if rec is None:
                raise Stop
            flushed = threading.Event()
            clr = threading.Thread(target=self.clear, args=(dev, flushed), daemon=True)
            clr.start()
            try:
                os.fsync(fd)
            finally:
                flushed.set()
                clr.join()
            if not self.blocks.flush_done(rec):
                raise Stop
            self.stats["rounds"] += 1
        finally:
            # Still bound (held open): unbound by the close, after which the device may be
            # another run's.
            self.counters.end(dev, base)
            os.close(fd)
        time.sleep(self.rng.uniform(0.05, 0.3))
        # LOOP_CLR_FD set autoclear (we held it open): the close above unbinds it.
        end = time.monotonic() + 30
        while sysio.loop_owned(dev, ident):
            if time.monotonic() > end:
                raise RuntimeError(f"{dev} still bound 30 s after LOOP_CLR_FD and the last close")
            time.sleep(0.02)
        self.devices.remove(entry)

    def clear(self, dev, flushed):
        """LOOP_CLR_FD until the flush has returned (at least once): the device stays bound
        while the flushing thread holds it open, so each only sets autoclear again."""
        fd = os.open(dev, os.O_RDONLY)
        try:
            time.sleep(self.rng.uniform(0, 0.005))
            while True:
                fcntl.ioctl(fd, sysio.loopioctl.LOOP_CLR_FD)
                self.stats["clr_during_flush"] += int(not flushed.is_set())
                if flushed.wait(0.001):
                    break
        finally:
            os.close(fd)


class ChangeFd(Worker):
    """A read-only loop device over one of two files of the backing file system; each round
    writes new content into the other file (buffered, not synced) and switches the device to
    it with LOOP_CHANGE_FD, which writes it back (loop.c: vfs_fsync of the new file) before it
    returns: the new content is durable then. Another thread reads the device all along (a
    read-only device gets no flush), each block one of the contents either file has had."""

    def __init__(self, blocks_of, paths, nblocks, stop, seed, devices, counters):
        super().__init__("changefd", stop, seed)
        self.counters = counters  # sysio.DevCounters of the run
        self.base = None
        self.blocks_of = blocks_of  # path -> Blocks
        self.paths = paths
        self.nblocks = nblocks
        self.devices = devices
        self.dev = None
        self.cur = 0
        self.stats = {"changes": 0, "reads": 0}
        self.reader = None

    def setup(self):
        self.dev = sysio.loop_attach(self.paths[0], False, read_only=True)
        # [device, the files it may be bound to].
        self.devices.append([self.dev, list(self.paths)])
        self.base = self.counters.begin(self.dev)
        self.reader = threading.Thread(target=self.read_loop, daemon=True)
        self.reader.start()

    def read_loop(self):
        """O_DIRECT reads of random blocks of the device: each must hold zeroes or a content
        written to that block of either file (the device reads whichever is bound)."""
        buf = mmap.mmap(-1, BS)
        rng = random.Random(self.rng.getrandbits(32))
        fd = os.open(self.dev, os.O_RDONLY | os.O_DIRECT)
        try:
            while not self.stop.is_set():
                b = rng.randrange(self.nblocks)
                if os.preadv(fd, [buf], b * BS) != BS:
                    raise OSError(errno.EIO, f"short read of block {b}")
                crc = zlib.crc32(buf)
                if not any(crc in blocks.ever(b) for blocks in self.blocks_of.values()):
                    raise RuntimeError(f"{self.dev} block {b}: content neither file ever had")
                self.stats["reads"] += 1
                time.sleep(0.003)
        except Exception as e:  # noqa: BLE001 (reported by the run, as a Worker's)
            if not self.stop.is_set() and self.error is None:
                self.error = f"changefd reader: {type(e).__name__}: {e}"
        finally:
            os.close(fd)

    def teardown(self):
        if self.reader is not None:
            self.reader.join()
        if self.base is not None:
            # Before the run unbinds it (Run.detach_all).
            self.counters.end(self.dev, self.base)

    def step(self):
        other = 1 - self.cur
        path = self.paths[other]
        blocks = self.blocks_of[path]
        n = self.rng.randint(1, min(16, self.nblocks - 1))
        b = self.rng.randrange(self.nblocks - n + 1)
        data = self.rng.randbytes(n * BS)
        crcs = crc_blocks(data)
        recs = blocks.start(range(b, b + n), lambda blk, prev: [crcs[blk - b]])
        if recs is None:
            raise Stop
        ffd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(ffd, data, b * BS)
        finally:
            os.close(ffd)
        blocks.done(recs)
        rec = blocks.flush_start()
        if rec is None:
            raise Stop
        ffd = os.open(path, os.O_RDONLY)
        dfd = os.open(self.dev, os.O_RDONLY)
        try:
            fcntl.ioctl(dfd, sysio.loopioctl.LOOP_CHANGE_FD, ffd)
        finally:
            os.close(dfd)
            os.close(ffd)
        self.cur = other
        if not blocks.flush_done(rec):
            raise Stop
        self.stats["changes"] += 1
        time.sleep(self.rng.uniform(0.05, 0.3))
