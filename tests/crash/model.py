"""What the workload was told is durable, and when: the expected state of every object at any
point of a run.

Every event takes a number from one sequence (`Model.seq`), under one lock, which is also held
while a dm-log-writes mark is placed and while dm-flakey starts dropping writes: an operation that
started after a mark has no write in the log before it, and one acknowledged before a cut was
acknowledged before any write was dropped.

Two kinds of object:

- A *file* of the file system on the loop device (`Files`): each operation on it (create,
  overwrite, append, replace by rename, unlink) ends with its own fsync (and the directory's), so
  its acknowledgement makes its result durable. At point `s` a file is expected in the state of
  its last operation acknowledged before `s`, unless an operation on it started before `s` and
  was not acknowledged by then (the file is "in flux" and not checked).
- A 4 KiB *block* of a device with a volatile cache (`Blocks`): a write's completion makes
  nothing durable; a flush makes durable every write that completed before the flush was issued,
  when the flush completes (the promise of REQ_PREFLUSH). At point `s` a block is expected to hold
  its last write covered by a flush completed before `s`, unless a later write to it had been
  issued before `s` (in flux). A discard leaves either zeroes or what was there before.
"""
import bisect
import threading
import zlib

ZERO4K = zlib.crc32(bytes(4096))


class Model:
    """The shared sequence, lock and mark placement of a run."""

    def __init__(self, mark=None):
        self.lock = threading.Lock()
        self.seq = 0
        self.marks = []  # sequence numbers of the marks placed, in order
        self._mark = mark  # callable(name) placing a dm-log-writes mark, or None
        self.stopped = True  # no acknowledgement counts (before a start, after a cut)
        self.acks = 0

    def next(self):
        """The next sequence number (with the lock held)."""
        self.seq += 1
        return self.seq

    def acked(self):
        """An acknowledgement was just recorded (lock held): a mark after it."""
        self.acks += 1
        s = self.next()
        if self._mark is not None:
            self._mark(f"s{s}")
            self.marks.append(s)
        return s


class Files:
    """Files on the upper file system: their operations and acknowledged states. A state is
    (length, crc32) or None (absent)."""

    def __init__(self, model):
        self.m = model
        self.hist = {}  # name -> [(start_seq, ack_seq or None, state)]

    def start(self, name, op="", intended=None):
        """An operation `op` on `name` starts, meant to leave state `intended`; returns its
        record, or None if the run is stopped."""
        with self.m.lock:
            if self.m.stopped:
                return None
            rec = [self.m.next(), None, None, op, intended]
            self.hist.setdefault(name, []).append(rec)
            return rec

    def ack(self, rec, state):
        """The operation `rec` was acknowledged (its fsyncs returned) leaving `state`. Returns
        False if the run stopped meanwhile (a cut): the acknowledgement does not count."""
        with self.m.lock:
            if self.m.stopped:
                return False
            rec[2] = state
            rec[1] = self.m.acked()
            return True

    def expected(self, s):
        """{name: state} of every file whose state is known at point `s`; and the number of
        files in flux."""
        out, flux = {}, 0
        for name, ops in self.hist.items():
            state, known = None, True
            for start, ack, st, *_ in ops:
                if start >= s:
                    break
                # Operations on a file are sequential: a later one acknowledged by `s` decides,
                # even after one abandoned at a cut.
                if ack is not None and ack <= s:
                    state, known = st, True
                else:
                    known = False
            if known:
                out[name] = state
            else:
                flux += 1
        return out, flux

    def in_flux(self):
        """Names whose last operation was not acknowledged (after a cut or a failure)."""
        return [n for n, ops in self.hist.items() if ops and ops[-1][1] is None]


class Blocks:
    """4 KiB blocks of a device (or of a file made durable by a device's flush) with a volatile
    cache: writes, flushes, and what each block holds at a point."""

    def __init__(self, model, name):
        self.m = model
        self.name = name
        self.hist = {}  # block -> [[issue, complete or None, allowed crcs (frozenset)]]
        self.issues = {}  # block -> [issue of each entry of hist[block]] (for bisect)
        self.flushes = []  # [issue, complete] in issue order

    def start(self, blocks, allowed):
        """A write (or discard, write-zeroes) of `blocks` is issued; `allowed(prev)` gives the
        contents the block may hold once it is durable, from the previous entry's. Returns a
        token, or None if the run is stopped."""
        with self.m.lock:
            if self.m.stopped:
                return None
            s = self.m.next()
            recs = []
            for b in blocks:
                h = self.hist.setdefault(b, [])
                prev = h[-1][2] if h else frozenset([ZERO4K])
                rec = [s, None, frozenset(allowed(b, prev))]
                h.append(rec)
                self.issues.setdefault(b, []).append(s)
                recs.append(rec)
            return recs

    def done(self, recs):
        """The write completed (not durable yet)."""
        with self.m.lock:
            if self.m.stopped or recs is None:
                return
            s = self.m.next()
            for r in recs:
                r[1] = s

    def flush_start(self):
        with self.m.lock:
            if self.m.stopped:
                return None
            rec = [self.m.next(), None]
            self.flushes.append(rec)
            return rec

    def flush_done(self, rec):
        """The flush completed: every write completed before its issue is durable."""
        with self.m.lock:
            if self.m.stopped or rec is None:
                return False
            rec[1] = self.m.acked()
            return True

    def covered_upto(self, s):
        """The latest issue of a flush completed by point `s` (a mark's number is that of the
        acknowledgement it follows): writes completed before it are durable at `s`."""
        best = 0
        for issue, complete in self.flushes:
            if complete is not None and complete <= s and issue > best:
                best = issue
        return best

    def expected(self, s):
        """{block: allowed crcs} of every block written whose state is known at point `s`, and
        the number in flux. A block's writes are sequential (its writer never has two of them
        in flight): the last one issued before `s` decides, known if it completed before the
        latest flush covering `s` was issued (its `allowed` was made from the one before,
        covered then too), in flux if not."""
        cov = self.covered_upto(s)
        out, flux = {}, 0
        for b, h in self.hist.items():
            i = bisect.bisect_left(self.issues[b], s)
            if i == 0:
                out[b] = frozenset([ZERO4K])
                continue
            _, complete, alw = h[i - 1]
            if complete is not None and complete < cov:
                out[b] = alw
            else:
                flux += 1
        return out, flux

    def ever(self, b):
        """Every content block `b` may have held: zeroes and whatever a write left."""
        with self.m.lock:
            out = {ZERO4K}
            for _, _, alw in self.hist.get(b, []):
                out |= alw
            return out

    def in_flux(self):
        """Blocks whose last write is not known durable now (after a cut)."""
        cov = self.covered_upto(self.m.seq + 1)
        return [b for b, h in self.hist.items()
                if h and (h[-1][1] is None or h[-1][1] >= cov)]


def crc_blocks(data):
    """crc32 of each 4 KiB block of `data`."""
    mv = memoryview(data)
    return [zlib.crc32(mv[i:i + 4096]) for i in range(0, len(mv), 4096)]
