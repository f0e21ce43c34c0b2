#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Atomic-write probes for tests/atomic.t.sh (the host's xfs_io predates `statx` atomic fields
and `pwrite -A`).

  atomic_io.py statx PATH
      prints "unit_min unit_max segments_max" of statx(STATX_WRITE_ATOMIC) (0 0 0: none)
  atomic_io.py pwrite PATH OFFSET LENGTH SEED [NVEC]
      one pwritev2(RWF_ATOMIC) with O_DIRECT of LENGTH bytes (NVEC iovecs, default 1) made
      from SEED; prints "ok" or the errno's name, exits 0 either way
  atomic_io.py pattern LENGTH SEED
      writes the bytes that `pwrite ... SEED` writes to stdout
"""
import ctypes
import errno
import mmap
import os
import struct
import sys

AT_FDCWD = -100
STATX_WRITE_ATOMIC = 0x10000
RWF_ATOMIC = 0x40
SYS_STATX = {"x86_64": 332, "aarch64": 291}[os.uname().machine]


def statx(path):
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    rc = libc.syscall(SYS_STATX, AT_FDCWD, path.encode(), 0, STATX_WRITE_ATOMIC, buf)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    mask = struct.unpack_from("I", buf.raw, 0)[0]
    if not mask & STATX_WRITE_ATOMIC:
        return (0, 0, 0)
    return struct.unpack_from("III", buf.raw, 168)


def pattern(length, seed):
    block = (b"%08x:" % seed) * 8
    out = bytearray((block * (length // len(block) + 1))[:length])
    # Every 4 KiB differs, so that a torn or misplaced block shows.
    for off in range(0, length, 4096):
        out[off:off + 8] = struct.pack("<Q", (seed << 32) | (off // 4096))
    return bytes(out)


def pwrite(path, offset, length, seed, nvec=1):
    data = pattern(length, seed)
    mem = mmap.mmap(-1, max(length, 4096))
    mem[:length] = data
    view = memoryview(mem)
    step = length // nvec
    bufs = [view[i * step:(i + 1) * step] for i in range(nvec)]
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        n = os.pwritev(fd, bufs, offset, RWF_ATOMIC)
        return "ok" if n == length else "short:%d" % n
    except OSError as e:
        # ENOTSUP and EOPNOTSUPP are one value on Linux; the kernel names it EOPNOTSUPP.
        if e.errno == errno.EOPNOTSUPP:
            return "EOPNOTSUPP"
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        os.close(fd)
        for b in bufs:
            b.release()
        view.release()
        mem.close()


def main():
    cmd = sys.argv[1]
    if cmd == "statx":
        print("%d %d %d" % statx(sys.argv[2]))
    elif cmd == "pwrite":
        nvec = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        print(pwrite(sys.argv[2], int(sys.argv[3], 0), int(sys.argv[4], 0), int(sys.argv[5], 0), nvec))
    elif cmd == "pattern":
        sys.stdout.buffer.write(pattern(int(sys.argv[2], 0), int(sys.argv[3], 0)))
    else:
        sys.exit("usage: atomic_io.py statx|pwrite|pattern ...")


if __name__ == "__main__":
    main()
