#!/usr/bin/env python3
"""A transcript of the loop ioctl ABI as user space sees it, to compare two drivers.

    abi_transcript.py DEVICE WORKDIR

Runs a fixed sequence of loop ioctls and block-device reads and writes on DEVICE (an unbound
/dev/loopN) with backing files made in WORKDIR, and prints one line per step: the step's name,
then "ok" with what it returned (status fields, sysfs values, sizes) or the errno name. The same
sequence run against loop.c and against rust_loop in the same kernel must print the same lines
(tests/core-ioctl.t.sh: t_ioctl_transcript_as_loop_c). Nothing in it depends on the driver's
name, the device's number or the time.
"""
import errno
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopioctl as L  # noqa: E402

DEV = sys.argv[1]
WORK = sys.argv[2]
NAME = os.path.basename(DEV)


def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def step(name, fn):
    try:
        r = fn()
        print(f"{name}: ok" + (f" {r}" if r not in (None, "") else ""))
    except OSError as e:
        print(f"{name}: {ename(e)}")


def sysfs(rel):
    try:
        with open(f"/sys/block/{NAME}/{rel}") as f:
            return f.read().strip()
    except OSError as e:
        return ename(e)


def status(fd):
    v = L.get_status64(fd)
    return (f"offset={v['offset']} sizelimit={v['sizelimit']} flags={v['flags']:#x} "
            f"name={L.cstr(v['file_name'])} lbs={sysfs('queue/logical_block_size')} "
            f"size={sysfs('size')} ro={sysfs('ro')}")


def diskseq():
    """The disk's sequence number: a media change (disk_force_media_change) raises it."""
    with open(f"/sys/block/{NAME}/diskseq") as f:
        return int(f.read())


def wait_unbound(timeout=10.0):
    """The clear of a device happens at its last close (udev may hold it a moment)."""
    end = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(DEV, os.O_RDONLY)
        except OSError as e:
            # ENXIO: the device is running down (lo_open refuses it meanwhile).
            if e.errno != errno.ENXIO:
                raise
            fd = None
        if fd is not None:
            try:
                L.get_status64(fd)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    return
            finally:
                os.close(fd)
        if time.monotonic() > end:
            raise SystemExit(f"{DEV} still bound {timeout} s after LOOP_CLR_FD")
        time.sleep(0.05)


def bdev_io(label, flags, write):
    """Opens the device with flags and reads or writes 4 KiB at offset 0; the errno or size."""
    def io():
        fd = os.open(DEV, flags)
        try:
            if write:
                return os.pwrite(fd, b"\xa5" * 4096, 0)
            return len(os.pread(fd, 4096, 0))
        finally:
            os.close(fd)
    step(label, io)


def bind(label, fd, img, fflags, cflags=None):
    """Binds img (opened with fflags) to the device open as fd: LOOP_SET_FD, or LOOP_CONFIGURE
    with the loop_info64 flags cflags."""
    bfd = os.open(img, fflags)
    try:
        if cflags is None:
            step(label, lambda: L.ioctl(fd, L.LOOP_SET_FD, bfd))
        else:
            info = dict(L.zero_info64(), flags=cflags)
            step(label, lambda: L.configure(fd, bfd, info=info))
    finally:
        os.close(bfd)


def main():
    img = os.path.join(WORK, "abi.img")
    with open(img, "wb") as f:
        f.truncate(8 << 20)
    fd = os.open(DEV, os.O_RDWR)
    try:
        step("unbound get-status64", lambda: status(fd))
        step("unbound set-block-size 4096", lambda: L.ioctl(fd, L.LOOP_SET_BLOCK_SIZE, 4096))
        step("unbound set-capacity", lambda: L.ioctl(fd, L.LOOP_SET_CAPACITY, 0))
    finally:
        os.close(fd)

    # LOOP_CONFIGURE with each block size: the kernel's BLK_MAX_BLOCK_SIZE decides. The clear
    # takes effect at the device's last close.
    for bs in (256, 512, 3072, 4096, 8192, 65536, 131072):
        fd = os.open(DEV, os.O_RDWR)
        try:
            bfd = os.open(img, os.O_RDWR)
            try:
                step(f"configure block-size {bs}", lambda: L.configure(fd, bfd, block_size=bs))
            finally:
                os.close(bfd)
            step(f"  status after configure {bs}", lambda: status(fd))
            try:
                L.ioctl(fd, L.LOOP_CLR_FD)
                bound = True
            except OSError:
                bound = False
        finally:
            os.close(fd)
        if bound:
            wait_unbound()

    fd = os.open(DEV, os.O_RDWR)
    try:
        # LOOP_SET_BLOCK_SIZE on a bound device.
        bind("set-fd", fd, img, os.O_RDWR)
        for bs in (1024, 3000, 4096, 8192, 16384, 65536, 131072, 512):
            step(f"set-block-size {bs}", lambda: L.ioctl(fd, L.LOOP_SET_BLOCK_SIZE, bs))
            step(f"  status after set-block-size {bs}", lambda: status(fd))
        step("set-status64 offset 4096 sizelimit 1 MiB", lambda: L.ioctl(
            fd, L.LOOP_SET_STATUS64, bytearray(L.pack_info64(dict(
                L.get_status64(fd), offset=4096, sizelimit=1 << 20)))))
        step("  status after set-status64", lambda: status(fd))
        step("set-capacity", lambda: L.ioctl(fd, L.LOOP_SET_CAPACITY, 0))
        step("clr-fd", lambda: L.ioctl(fd, L.LOOP_CLR_FD))
    finally:
        os.close(fd)
    wait_unbound()

    # Read-only bindings made each way (the device or the file opened read-only, LOOP_CONFIGURE
    # with LO_FLAGS_READ_ONLY as `losetup -r` does, with autoclear), then the unbound device
    # again: reads and writes of the block device.
    variants = (
        ("set-fd, device and file read-only", os.O_RDONLY, os.O_RDONLY, None),
        ("set-fd, file read-only", os.O_RDWR, os.O_RDONLY, None),
        ("configure read-only", os.O_RDONLY, os.O_RDONLY, 1),
        ("configure read-only flag, file read-write", os.O_RDWR, os.O_RDWR, 1),
        ("configure read-only autoclear", os.O_RDONLY, os.O_RDONLY, 1 | 4),
    )
    for label, dflags, fflags, cflags in variants:
        fd = os.open(DEV, dflags)
        try:
            bind(f"{label}: bind", fd, img, fflags, cflags)
            step(f"{label}: status", lambda: status(fd))
            bdev_io(f"{label}: read", os.O_RDONLY, False)
            bdev_io(f"{label}: write", os.O_RDWR, True)
            if cflags is None or not cflags & 4:
                step(f"{label}: clr-fd", lambda: L.ioctl(fd, L.LOOP_CLR_FD))
        finally:
            os.close(fd)
        wait_unbound()
        step(f"{label}: unbound sysfs", lambda: f"ro={sysfs('ro')} size={sysfs('size')}")
        bdev_io(f"{label}: unbound read", os.O_RDONLY, False)
        bdev_io(f"{label}: unbound write", os.O_RDWR, True)
        bdev_io(f"{label}: unbound write O_DIRECT", os.O_RDWR | os.O_DIRECT, True)

    # A failed LOOP_CONFIGURE leaves the read-only state it had decided: loop.c applies it
    # (set_disk_ro) after loop_set_status_from_info and before the queue limits, which refuse
    # the block size. Nothing resets it, not LOOP_CLR_FD, not a later failure.
    failed_configures = (
        ("set-fd read-only file then clr-fd", os.O_RDONLY, None, 0),
        ("configure read-write file, block size 1234", os.O_RDWR, 0, 1234),
        ("configure read-only file, block size 1234", os.O_RDONLY, 0, 1234),
        ("configure read-write file, block size 4096", os.O_RDWR, 0, 4096),
        ("configure read-only flag, block size 1234", os.O_RDWR, 1, 1234),
        ("configure read-write file, offset overflow", os.O_RDWR, "overflow", 0),
        ("configure read-write file, unknown flag", os.O_RDWR, 0x100, 1234),
    )
    for label, fflags, cflags, bs in failed_configures:
        seq = diskseq()
        fd = os.open(DEV, os.O_RDWR)
        try:
            bfd = os.open(img, fflags)
            try:
                if cflags is None:
                    step(f"{label}: bind", lambda: L.ioctl(fd, L.LOOP_SET_FD, bfd))
                else:
                    info = L.zero_info64()
                    if cflags == "overflow":
                        info = dict(info, offset=1 << 63)
                    else:
                        info = dict(info, flags=cflags)
                    step(f"{label}: bind", lambda: L.configure(fd, bfd, block_size=bs, info=info))
            finally:
                os.close(bfd)
            try:
                L.ioctl(fd, L.LOOP_CLR_FD)
                bound = True
            except OSError:
                bound = False
        finally:
            os.close(fd)
        if bound:
            wait_unbound()
        step(f"{label}: unbound sysfs",
             lambda: f"ro={sysfs('ro')} size={sysfs('size')} diskseq+{diskseq() - seq}")
        bdev_io(f"{label}: unbound write", os.O_RDWR, True)

    # A read-write binding after it: writable again.
    fd = os.open(DEV, os.O_RDWR)
    try:
        bind("set-fd read-write file", fd, img, os.O_RDWR)
        step("  status read-write", lambda: status(fd))
        bdev_io("read-write bound: write", os.O_RDWR, True)
        step("clr-fd read-write", lambda: L.ioctl(fd, L.LOOP_CLR_FD))
    finally:
        os.close(fd)
    wait_unbound()
    step("unbound after read-write: sysfs", lambda: f"ro={sysfs('ro')} size={sysfs('size')}")
    bdev_io("unbound after read-write: write", os.O_RDWR, True)


if __name__ == "__main__":
    main()
