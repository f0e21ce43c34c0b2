#!/usr/bin/env python3
"""A bind right after the last close of an autoclear device, many times, under load.

    autoclear_race.py DEV CHURN_DEV WORKDIR ITERATIONS [HOGS]

loop.c clears an autoclear device in lo_release(), before the last close(2) returns, so a
LOOP_SET_FD issued right after on a new descriptor finds the device unbound and succeeds. Each
iteration on DEV:

  1. LOOP_CONFIGURE: a read-only file, block size 1024, offset 512, size limit 1 MiB, READ_ONLY;
  2. LOOP_SET_STATUS64: offset 4096, size limit 4096, AUTOCLEAR | PARTSCAN;
  3. close: the last opener (the clear happens here);
  4. at once, on a new descriptor, LOOP_SET_FD of a read-only 12 KiB file: must succeed;
  5. LOOP_CLR_FD and close, and the device must be unbound when the close has returned.

Beside it, HOGS processes spin on the CPUs and a second process churns CHURN_DEV (binds with
autoclear, opens and closes from two descriptors, direct-I/O reads, unbinds) over a file of its
own, so that only the scheduler and the module's shared state (worker threads parked and
taken, the release queue) connect the two devices.
Prints "N iterations, N failures" and each failure's errno and step; exits 1 on any failure.
"""
import errno
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

DEV, CHURN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
ITERS = int(sys.argv[4])
HOGS = int(sys.argv[5]) if len(sys.argv) > 5 else 2
AUTOCLEAR, READ_ONLY, PARTSCAN = 4, 1, 8


def mkfile(name, size):
    path = os.path.join(WORK, name)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    return path


def hog():
    while True:
        pass


def churn(img):
    """Binds, uses and unbinds CHURN_DEV over and over (autoclear and LOOP_CLR_FD in turn)."""
    n = 0
    while True:
        n += 1
        try:
            fd = os.open(CHURN, os.O_RDWR)
        except OSError:
            continue
        try:
            bfd = os.open(img, os.O_RDWR | (os.O_DIRECT if n % 2 else 0))
            try:
                L.configure(fd, bfd, info=dict(L.zero_info64(),
                                               flags=AUTOCLEAR if n % 3 else 0))
            except OSError:
                continue
            finally:
                os.close(bfd)
            fd2 = os.open(CHURN, os.O_RDONLY)
            os.pread(fd2, 4096, 0)
            if n % 3 == 0:
                L.ioctl(fd, L.LOOP_CLR_FD)
            os.close(fd2)
        except OSError:
            pass
        finally:
            os.close(fd)


def status_flags(fd):
    return L.get_status64(fd)["flags"]


def main():
    ro_a = mkfile("race-a.img", 2 << 20)
    ro_b = mkfile("race-b.img", 12 << 10)
    churn_img = mkfile("race-churn.img", 4 << 20)
    kids = []
    for _ in range(HOGS):
        pid = os.fork()
        if pid == 0:
            hog()
        kids.append(pid)
    pid = os.fork()
    if pid == 0:
        churn(churn_img)
        os._exit(0)
    kids.append(pid)
    failures = []
    try:
        for i in range(ITERS):
            step = "open"
            try:
                fd = os.open(DEV, os.O_RDWR)
                try:
                    step = "configure"
                    bfd = os.open(ro_a, os.O_RDONLY)
                    try:
                        L.configure(fd, bfd, block_size=1024, info=dict(
                            L.zero_info64(), offset=512, sizelimit=1 << 20, flags=READ_ONLY))
                    finally:
                        os.close(bfd)
                    step = "set-status64"
                    v = dict(L.get_status64(fd), offset=4096, sizelimit=4096,
                             flags=AUTOCLEAR | PARTSCAN)
                    L.ioctl(fd, L.LOOP_SET_STATUS64, bytearray(L.pack_info64(v)))
                finally:
                    os.close(fd)
                step = "set-fd after the last close"
                fd = os.open(DEV, os.O_RDONLY)
                try:
                    bfd = os.open(ro_b, os.O_RDONLY)
                    try:
                        L.ioctl(fd, L.LOOP_SET_FD, bfd)
                    finally:
                        os.close(bfd)
                    step = "clr-fd"
                    L.ioctl(fd, L.LOOP_CLR_FD)
                finally:
                    os.close(fd)
                step = "status after the last close"
                fd = os.open(DEV, os.O_RDONLY)
                try:
                    flags = status_flags(fd)
                    failures.append((i, step, f"still bound (flags {flags:#x})"))
                except OSError as e:
                    if e.errno != errno.ENXIO:
                        raise
                finally:
                    os.close(fd)
            except OSError as e:
                failures.append((i, step, errno.errorcode.get(e.errno, str(e.errno))))
                # Let the device come free before the next iteration (the failure is counted).
                for _ in range(200):
                    try:
                        fd = os.open(DEV, os.O_RDONLY)
                    except OSError:
                        os.sched_yield()
                        continue
                    try:
                        try:
                            L.ioctl(fd, L.LOOP_CLR_FD)
                        except OSError:
                            pass
                        try:
                            L.get_status64(fd)
                        except OSError:
                            break
                    finally:
                        os.close(fd)
    finally:
        for k in kids:
            os.kill(k, signal.SIGKILL)
        for k in kids:
            os.waitpid(k, 0)
    for i, step, what in failures[:20]:
        print(f"iteration {i}: {step}: {what}")
    print(f"{ITERS} iterations, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
