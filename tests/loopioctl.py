#!/usr/bin/env python3
"""Raw loop ioctls for the tests (stdlib only).

    loopioctl.py [--ro] [--excl] [--user UID] DEVICE CMD [ARGS...]

DEVICE is /dev/loopN (or /dev/loop-control for the ctl-* commands). The device is opened
O_RDWR (O_RDONLY with --ro, plus O_EXCL with --excl); with --user the process drops to that
uid/gid (and no supplementary groups) after opening it, before the ioctl.

Commands (PATH is opened O_RDWR, O_RDONLY with --ro-file, plus O_DIRECT with --direct and
O_APPEND with --append, or O_PATH alone with --o-path; it may also be "fd=N" for a raw
descriptor number, "pipe" for the read end of a pipe, "socket" for a unix socket; a directory is opened O_RDONLY|O_DIRECTORY):
    set-fd PATH [FILE-OPTIONS]
    configure PATH [--offset N] [--sizelimit N] [--flags N] [--block-size N]
                   [--encrypt-type N] [--encrypt-key-size N] [--name S] [FILE-OPTIONS]
    change-fd PATH [FILE-OPTIONS]
    clr-fd
    get-status64 | get-status                 print the fields as key=value
    set-status64 | set-status [--zero] [--offset N] [--sizelimit N] [--flags N] [--name S]
                   [--encrypt-type N] [--encrypt-key-size N]
                   (starts from the current status unless --zero or the device is unbound)
    set-capacity | set-direct-io 0|1 | set-block-size N
    raw NUMBER [ARG]                          any ioctl number with an integer argument
    null-arg CMD                              CMD (name like get-status64 or a number) with NULL
    ctl-add N... | ctl-remove N... | ctl-get-free
                                              on /dev/loop-control; print the result (with
                                              several N, one line per N: the result or the
                                              errno name; exits 1 if any failed)
    hold SECONDS                              keep the device open for that long

On success prints the result (if any) and exits 0; on error prints the errno name
(e.g. "EINVAL") to stderr and exits 1. Usage errors exit 2.
"""
import errno
import fcntl
import os
import struct
import sys
import time

LO_NAME_SIZE = 64
LO_KEY_SIZE = 32

LOOP_SET_FD = 0x4C00
LOOP_CLR_FD = 0x4C01
LOOP_SET_STATUS = 0x4C02
LOOP_GET_STATUS = 0x4C03
LOOP_SET_STATUS64 = 0x4C04
LOOP_GET_STATUS64 = 0x4C05
LOOP_CHANGE_FD = 0x4C06
LOOP_SET_CAPACITY = 0x4C07
LOOP_SET_DIRECT_IO = 0x4C08
LOOP_SET_BLOCK_SIZE = 0x4C09
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_ADD = 0x4C80
LOOP_CTL_REMOVE = 0x4C81
LOOP_CTL_GET_FREE = 0x4C82

CMD_NUMBERS = {
    "set-fd": LOOP_SET_FD, "clr-fd": LOOP_CLR_FD, "set-status": LOOP_SET_STATUS,
    "get-status": LOOP_GET_STATUS, "set-status64": LOOP_SET_STATUS64,
    "get-status64": LOOP_GET_STATUS64, "change-fd": LOOP_CHANGE_FD,
    "set-capacity": LOOP_SET_CAPACITY, "set-direct-io": LOOP_SET_DIRECT_IO,
    "set-block-size": LOOP_SET_BLOCK_SIZE, "configure": LOOP_CONFIGURE,
    "ctl-add": LOOP_CTL_ADD, "ctl-remove": LOOP_CTL_REMOVE, "ctl-get-free": LOOP_CTL_GET_FREE,
}

# struct loop_info64 (include/uapi/linux/loop.h): 232 bytes, no padding.
INFO64 = struct.Struct("=QQQQQIIII64s64s32s2Q")
INFO64_FIELDS = ("device", "inode", "rdevice", "offset", "sizelimit", "number",
                 "encrypt_type", "encrypt_key_size", "flags", "file_name", "crypt_name",
                 "encrypt_key", "init0", "init1")
# struct loop_config: u32 fd, u32 block_size, struct loop_info64 info, u64 __reserved[8].
CONFIG = struct.Struct("=II" + INFO64.format[1:] + "8Q")
# struct loop_info (old), x86-64 native layout: __kernel_old_dev_t and unsigned long are 8
# bytes; "0L" adds the trailing padding the C compiler adds (sizeof == 168).
INFO_OLD = struct.Struct("@iLLLiiii64s32s2L4s0L")
INFO_OLD_FIELDS = ("number", "device", "inode", "rdevice", "offset", "encrypt_type",
                   "encrypt_key_size", "flags", "file_name", "encrypt_key", "init0", "init1",
                   "reserved")

assert INFO64.size == 232, INFO64.size
assert CONFIG.size == 304, CONFIG.size
assert INFO_OLD.size == 168, INFO_OLD.size

# ctypes and socket are imported where needed: under TCG each costs 0.3-0.5 s of the helper's
# start, which the tests pay on every call.
_libc = None


def _libc_ioctl():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
        _libc.ioctl.restype = ctypes.c_int
    return _libc


class Usage(Exception):
    pass


def ioctl(fd, cmd, arg=0):
    """ioctl(fd, cmd, arg): arg is an int (passed as unsigned long), a bytearray (the structure
    the argument points to, updated in place) or a ctypes buffer."""
    if isinstance(arg, bytearray) or (isinstance(arg, int) and 0 <= arg <= 0x7FFFFFFF):
        # fcntl.ioctl passes a small int as it is and a bytearray by address.
        return fcntl.ioctl(fd, cmd, arg, True)
    import ctypes
    if isinstance(arg, int):
        p = ctypes.c_void_p(arg & 0xFFFFFFFFFFFFFFFF)
    else:
        p = ctypes.cast(arg, ctypes.c_void_p)
    r = _libc_ioctl().ioctl(fd, cmd, p)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def cstr(b):
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_int(s):
    return int(s, 0)


def parse_opts(args, spec):
    """spec: {'--name': type or None for a flag}. Returns (positional, dict)."""
    pos, opts = [], {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in spec:
            if spec[a] is None:
                opts[a] = True
                i += 1
            else:
                if i + 1 >= len(args):
                    raise Usage("missing value for " + a)
                opts[a] = spec[a](args[i + 1])
                i += 2
        elif a.startswith("--"):
            raise Usage("unknown option " + a)
        else:
            pos.append(a)
            i += 1
    return pos, opts


_keep = []  # objects (sockets, pipe ends) that must stay open until the ioctl


def open_backing(spec, ro=False, direct=False, append=False, opath=False):
    if spec.startswith("fd="):
        return int(spec[3:])
    if spec == "pipe":
        r, w = os.pipe()
        _keep.append(w)
        return r
    if spec == "socket":
        import socket
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        _keep.extend((a, b))
        return a.fileno()
    if opath:
        return os.open(spec, os.O_PATH)
    if os.path.isdir(spec):
        return os.open(spec, os.O_RDONLY | os.O_DIRECTORY)
    flags = os.O_RDONLY if ro else os.O_RDWR
    if direct:
        flags |= os.O_DIRECT
    if append:
        flags |= os.O_APPEND
    return os.open(spec, flags)


def pack_info64(v):
    return INFO64.pack(v["device"], v["inode"], v["rdevice"], v["offset"], v["sizelimit"],
                       v["number"], v["encrypt_type"], v["encrypt_key_size"], v["flags"],
                       v["file_name"], v["crypt_name"], v["encrypt_key"], v["init0"], v["init1"])


def zero_info64():
    return dict(device=0, inode=0, rdevice=0, offset=0, sizelimit=0, number=0,
                encrypt_type=0, encrypt_key_size=0, flags=0, file_name=b"", crypt_name=b"",
                encrypt_key=b"", init0=0, init1=0)


def configure(fd, bfd, block_size=0, info=None):
    """LOOP_CONFIGURE of loop device fd with backing fd bfd (info: a loop_info64 dict)."""
    data = CONFIG.pack(bfd, block_size, *INFO64.unpack(pack_info64(info or zero_info64())),
                       *([0] * 8))
    ioctl(fd, LOOP_CONFIGURE, bytearray(data))


def get_status64(fd):
    buf = bytearray(INFO64.size)
    ioctl(fd, LOOP_GET_STATUS64, buf)
    return dict(zip(INFO64_FIELDS, INFO64.unpack(buf)))


def get_status_old(fd):
    buf = bytearray(INFO_OLD.size)
    ioctl(fd, LOOP_GET_STATUS, buf)
    return dict(zip(INFO_OLD_FIELDS, INFO_OLD.unpack(buf)))


def print_status(v, fields):
    for k in fields:
        if k in ("encrypt_key", "init0", "init1", "reserved"):
            continue
        x = v[k]
        print("%s=%s" % (k, cstr(x) if isinstance(x, bytes) else x))


STATUS_OPTS = {"--zero": None, "--offset": parse_int, "--sizelimit": parse_int,
               "--flags": parse_int, "--name": str, "--encrypt-type": parse_int,
               "--encrypt-key-size": parse_int}
FILE_OPTS = {"--ro-file": None, "--direct": None, "--append": None, "--o-path": None}


def apply_status_opts(v, o):
    for opt, key in (("--offset", "offset"), ("--sizelimit", "sizelimit"), ("--flags", "flags"),
                     ("--encrypt-type", "encrypt_type"),
                     ("--encrypt-key-size", "encrypt_key_size")):
        if opt in o:
            v[key] = o[opt]
    if "--name" in o:
        v["file_name"] = o["--name"].encode()


def run(fd, cmd, args):
    if cmd in ("set-fd", "change-fd"):
        pos, o = parse_opts(args, FILE_OPTS)
        if len(pos) != 1:
            raise Usage(cmd + " PATH")
        bfd = open_backing(pos[0], "--ro-file" in o, "--direct" in o, "--append" in o,
                           "--o-path" in o)
        ioctl(fd, CMD_NUMBERS[cmd], bfd)
    elif cmd == "configure":
        spec = dict(STATUS_OPTS)
        spec.update(FILE_OPTS)
        spec["--block-size"] = parse_int
        pos, o = parse_opts(args, spec)
        if len(pos) != 1:
            raise Usage("configure PATH [options]")
        bfd = open_backing(pos[0], "--ro-file" in o, "--direct" in o, "--append" in o,
                           "--o-path" in o)
        v = zero_info64()
        apply_status_opts(v, o)
        configure(fd, bfd, o.get("--block-size", 0), v)
    elif cmd == "clr-fd":
        ioctl(fd, LOOP_CLR_FD, 0)
    elif cmd == "get-status64":
        print_status(get_status64(fd), INFO64_FIELDS)
    elif cmd == "get-status":
        print_status(get_status_old(fd), INFO_OLD_FIELDS)
    elif cmd == "set-status64":
        _, o = parse_opts(args, STATUS_OPTS)
        v = zero_info64()
        if "--zero" not in o:
            try:
                v = get_status64(fd)
            except OSError:
                pass
        apply_status_opts(v, o)
        buf = bytearray(pack_info64(v))
        ioctl(fd, LOOP_SET_STATUS64, buf)
    elif cmd == "set-status":
        _, o = parse_opts(args, STATUS_OPTS)
        if "--sizelimit" in o:
            raise Usage("the old loop_info has no sizelimit")
        v = dict(zip(INFO_OLD_FIELDS, INFO_OLD.unpack(bytes(INFO_OLD.size))))
        if "--zero" not in o:
            try:
                v = get_status_old(fd)
            except OSError:
                pass
        apply_status_opts(v, o)
        data = INFO_OLD.pack(*(v[k] for k in INFO_OLD_FIELDS))
        buf = bytearray(data)
        ioctl(fd, LOOP_SET_STATUS, buf)
    elif cmd == "set-capacity":
        ioctl(fd, LOOP_SET_CAPACITY, 0)
    elif cmd in ("set-direct-io", "set-block-size"):
        if len(args) != 1:
            raise Usage(cmd + " N")
        ioctl(fd, CMD_NUMBERS[cmd], parse_int(args[0]))
    elif cmd == "raw":
        if len(args) not in (1, 2):
            raise Usage("raw NUMBER [ARG]")
        r = ioctl(fd, parse_int(args[0]), parse_int(args[1]) if len(args) == 2 else 0)
        print(r)
    elif cmd == "null-arg":
        if len(args) != 1:
            raise Usage("null-arg CMD")
        n = CMD_NUMBERS.get(args[0])
        if n is None:
            n = parse_int(args[0])
        ioctl(fd, n, 0)
    elif cmd in ("ctl-add", "ctl-remove"):
        if not args:
            raise Usage(cmd + " N...")
        if len(args) == 1:
            print(ioctl(fd, CMD_NUMBERS[cmd], parse_int(args[0])))
            return
        failed = False
        for a in args:
            try:
                print(ioctl(fd, CMD_NUMBERS[cmd], parse_int(a)), flush=True)
            except OSError as e:
                print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
                failed = True
        if failed:
            sys.exit(1)
    elif cmd == "ctl-get-free":
        print(ioctl(fd, LOOP_CTL_GET_FREE, 0))
    elif cmd == "hold":
        time.sleep(float(args[0]))
    else:
        raise Usage("unknown command " + cmd)


def main(argv):
    ro = excl = False
    user = None
    while argv and argv[0].startswith("--"):
        a = argv.pop(0)
        if a == "--ro":
            ro = True
        elif a == "--excl":
            excl = True
        elif a == "--user":
            user = int(argv.pop(0))
        else:
            raise Usage("unknown option " + a)
    if len(argv) < 2:
        raise Usage("loopioctl.py [--ro] [--excl] [--user UID] DEVICE CMD [ARGS...]")
    dev, cmd, args = argv[0], argv[1], argv[2:]
    flags = os.O_RDONLY if ro else os.O_RDWR
    if excl:
        flags |= os.O_EXCL
    fd = os.open(dev, flags)
    if user is not None:
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
    try:
        run(fd, cmd, args)
    finally:
        os.close(fd)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Usage as e:
        print("usage: " + str(e), file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)), file=sys.stderr)
        sys.exit(1)
