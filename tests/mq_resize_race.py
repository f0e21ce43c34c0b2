#!/usr/bin/env python3
"""Changing a device's hardware queues while it is bound, unbound, removed and re-added
(stdlib only; root).

    mq_resize_race.py INDEX FILE SECONDS

For SECONDS, three threads race on loop<INDEX>:
- resize: writes 1, 2, 1, ... to /sys/block/loop<INDEX>/rust_loop/nr_hw_queues; success,
  EBUSY (bound, or another change running) and a vanished or vanishing file (device removed:
  ENOENT, ENODEV) are expected;
- bind: LOOP_CONFIGURE with FILE, writes 64 KiB with O_DIRECT at a rotating offset,
  reads it back, compares, LOOP_CLR_FD; EBUSY and a missing device are expected;
- control: LOOP_CTL_REMOVE and LOOP_CTL_ADD of INDEX; EBUSY, ENODEV and EEXIST are expected.
Any other errno, or data that reads back differently, fails (exit 1). Prints how many of each
operation succeeded; each must have succeeded at least once.
"""
import errno
import mmap
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

failures = []
counts = {"resize": 0, "bind": 0, "verify": 0, "remove": 0, "add": 0}
lock = threading.Lock()


def fail(msg):
    with lock:
        failures.append(msg)


def count(what):
    with lock:
        counts[what] += 1


def resize(index, stop):
    path = "/sys/block/loop%d/rust_loop/nr_hw_queues" % index
    n = 0
    while not stop.is_set() and not failures:
        n += 1
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError as e:
            # ENOENT: the group is gone; ENODEV: it is being removed (kernfs_fop_open on a
            # deactivated node).
            if e.errno not in (errno.ENOENT, errno.ENODEV):
                fail("open %s: %s" % (path, errno.errorcode.get(e.errno, e.errno)))
            time.sleep(0.01)
            continue
        try:
            os.write(fd, b"%d" % (1 + n % 2))
            count("resize")
        except OSError as e:
            # ENODEV: the device was removed between the open and the write.
            if e.errno not in (errno.EBUSY, errno.ENODEV, errno.ENOENT):
                fail("write %s: %s" % (path, errno.errorcode.get(e.errno, e.errno)))
        finally:
            os.close(fd)


def bind(index, backing, stop):
    dev = "/dev/loop%d" % index
    buf = mmap.mmap(-1, 65536)
    rbuf = mmap.mmap(-1, 65536)
    n = 0
    while not stop.is_set() and not failures:
        n += 1
        try:
            fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            # ENXIO: the device is being removed; ENOENT: its node is gone.
            if e.errno not in (errno.ENXIO, errno.ENOENT, errno.ENODEV):
                fail("open %s: %s" % (dev, errno.errorcode.get(e.errno, e.errno)))
            time.sleep(0.01)
            continue
        try:
            bfd = os.open(backing, os.O_RDWR)
            try:
                L.configure(fd, bfd, 512)
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENXIO):
                    fail("LOOP_CONFIGURE: %s" % errno.errorcode.get(e.errno, e.errno))
                continue
            finally:
                os.close(bfd)
            count("bind")
            data = os.urandom(65536)
            buf.seek(0)
            buf.write(data)
            off = (n % 64) * 65536
            if os.pwritev(fd, [buf], off) != 65536:
                fail("short write at %d" % off)
            elif os.preadv(fd, [rbuf], off) != 65536 or rbuf[:] != data:
                fail("read back at %d differs" % off)
            else:
                count("verify")
            L.ioctl(fd, L.LOOP_CLR_FD, 0)
        except OSError as e:
            fail("bound device I/O: %s" % errno.errorcode.get(e.errno, e.errno))
        finally:
            os.close(fd)
        # A closed, unbound moment for the control thread's LOOP_CTL_REMOVE to hit.
        time.sleep(0.03)


def control(index, stop):
    ctl = os.open("/dev/loop-control", os.O_RDWR)
    while not stop.is_set() and not failures:
        for what, cmd, ok in (("remove", L.LOOP_CTL_REMOVE, (errno.EBUSY, errno.ENODEV)),
                              ("add", L.LOOP_CTL_ADD, (errno.EEXIST,))):
            try:
                L.ioctl(ctl, cmd, index)
                count(what)
            except OSError as e:
                if e.errno not in ok:
                    fail("%s %d: %s" % (what, index, errno.errorcode.get(e.errno, e.errno)))
            time.sleep(0.01)
    os.close(ctl)


def main():
    index, backing, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    stop = threading.Event()
    threads = [threading.Thread(target=resize, args=(index, stop)),
               threading.Thread(target=bind, args=(index, backing, stop)),
               threading.Thread(target=control, args=(index, stop))]
    for t in threads:
        t.start()
    time.sleep(secs)
    stop.set()
    for t in threads:
        t.join()
    print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    missing = [k for k, v in counts.items() if v == 0]
    if missing:
        print("FAIL: never succeeded: " + " ".join(missing), file=sys.stderr)
    return 1 if failures or missing else 0


if __name__ == "__main__":
    sys.exit(main())
