#!/usr/bin/env python3
"""Module unload/reload cycles with devices created, used and removed (stdlib only; root).

    module_cycles.py LOAD-CMD MODULE CYCLES FILE

Each cycle: run LOAD-CMD (a shell command loading MODULE with max_loop=0), create loop<a> and
loop<a+1> (a = 10, 12, ... 88) with LOOP_CTL_ADD, bind loop<a> to FILE with LOOP_CONFIGURE
(block size 512..4096), write 64 KiB with O_DIRECT through it and read it back, every 10th cycle check that
delete_module(2) refuses with EWOULDBLOCK while loop<a+1> is open, LOOP_CLR_FD, remove both
devices with LOOP_CTL_REMOVE and unload with delete_module(2). Retries EBUSY/EWOULDBLOCK for up
to 10 s where udev may briefly hold a device open. Exits 1 with a message on the first failure.
"""
import ctypes
import errno
import mmap
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

libc = ctypes.CDLL(None, use_errno=True)
SYS_DELETE_MODULE = 176


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def delete_module(name):
    r = libc.syscall(SYS_DELETE_MODULE, name.encode(), os.O_NONBLOCK)
    return 0 if r == 0 else ctypes.get_errno()


def retry(what, fn, errs, secs=10):
    end = time.monotonic() + secs
    while True:
        try:
            return fn()
        except OSError as e:
            if e.errno not in errs or time.monotonic() > end:
                fail("%s: %s" % (what, errno.errorcode.get(e.errno, e.errno)))
            time.sleep(0.05)


def wait_path(path, present, secs=10):
    end = time.monotonic() + secs
    while os.path.exists(path) != present:
        if time.monotonic() > end:
            fail("%s %s after %d s" % (path, "missing" if present else "still there", secs))
        time.sleep(0.02)


def load(load_cmd, module, cycle):
    """Runs LOAD-CMD. If it fails because the C loop driver holds block major 7 and the
    loop-control minor (udev opening a node of a removed device after the unload autoloads it
    through block-major-7-*), says so, unloads it and tries again, up to three times."""
    for _ in range(3):
        if subprocess.run(load_cmd, shell=True).returncode == 0:
            return
        if module == "loop" or not os.path.isdir("/sys/module/loop"):
            break
        print("cycle %d: the C loop driver was autoloaded after the unload; unloading it"
              % cycle, file=sys.stderr)
        subprocess.run(["udevadm", "settle", "-t", "10"])
        subprocess.run(["rmmod", "loop"])
    fail("cycle %d: %s failed%s" % (
        cycle, load_cmd,
        " (the C loop driver is loaded)" if os.path.isdir("/sys/module/loop") else ""))


def main():
    load_cmd, module, cycles, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    buf = mmap.mmap(-1, 65536)
    data = os.urandom(65536)
    buf.write(data)
    rbuf = mmap.mmap(-1, 65536)
    start = time.monotonic()
    for i in range(cycles):
        # Above loop7: something in the guest (udev) sometimes opens /dev/loop0-7 right after
        # the load, which creates them (block device autoloading).
        a = 10 + 2 * (i % 40)
        b = a + 1
        load(load_cmd, module, i)
        wait_path("/dev/loop-control", True)
        ctl = os.open("/dev/loop-control", os.O_RDWR)
        for n in (a, b):
            got = L.ioctl(ctl, L.LOOP_CTL_ADD, n)
            if got != n:
                fail("cycle %d: LOOP_CTL_ADD %d returned %d" % (i, n, got))
        dev = "/dev/loop%d" % a
        wait_path(dev, True)
        fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
        bfd = os.open(path, os.O_RDWR)
        L.configure(fd, bfd, 512 << (i % 4))
        os.close(bfd)
        off = (i % 16) * 65536
        if os.pwritev(fd, [buf], off) != 65536:
            fail("cycle %d: short write" % i)
        if os.preadv(fd, [rbuf], off) != 65536 or rbuf[:] != data:
            fail("cycle %d: read back differs" % i)
        if i % 10 == 0:
            hold = os.open("/dev/loop%d" % b, os.O_RDONLY)
            e = delete_module(module)
            if e != errno.EWOULDBLOCK:
                fail("cycle %d: delete_module with loop%d open: %s" % (
                    i, b, "success" if e == 0 else errno.errorcode.get(e, e)))
            if not os.path.isdir("/sys/module/" + module):
                fail("cycle %d: module unloaded while a device was open" % i)
            os.close(hold)
        L.ioctl(fd, L.LOOP_CLR_FD, 0)
        os.close(fd)
        wait_path("/sys/block/loop%d/loop" % a, False)
        # udev probes the device on the detach's change event; let it finish before the device
        # and the driver go, or its late open of /dev/loop<a> autoloads a driver for major 7.
        subprocess.run(["udevadm", "settle", "-t", "10"])
        for n in (a, b):
            retry("cycle %d: LOOP_CTL_REMOVE %d" % (i, n),
                  lambda: L.ioctl(ctl, L.LOOP_CTL_REMOVE, n), (errno.EBUSY,))
        os.close(ctl)

        def unload():
            e = delete_module(module)
            if e:
                raise OSError(e, os.strerror(e))
        retry("cycle %d: delete_module" % i, unload, (errno.EWOULDBLOCK, errno.EBUSY))
    print("%d cycles in %.1f s" % (cycles, time.monotonic() - start))


if __name__ == "__main__":
    main()
