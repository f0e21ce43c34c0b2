# One lifecycle cycle per device (5 devices per driver) with the kernel's uevents and udev's handling
# recorded (udevadm monitor), and the EBUSY retries of LOOP_CTL_REMOVE counted, with the holders.
# From the project root, after `make`: bash scripts/vm.sh -- python3 docs/bench/lifecycle-add-lock/uevents.py
import os, subprocess, sys, time, mmap
sys.path.insert(0, "scripts")
import importlib.util
spec = importlib.util.spec_from_file_location("gl", "scripts/guest-lifecycle.py")
gl = importlib.util.module_from_spec(spec); spec.loader.exec_module(gl)

backing = "/tmp/backing.img"
with open(backing, "wb") as f:
    f.write(os.urandom(1 << 20))

def cycle(i, ctl, bfd, buf):
    t = {}
    t0 = time.perf_counter()
    gl.ioctl(ctl, gl.LOOP_CTL_ADD, i); t["add"] = time.perf_counter()
    path = f"/dev/loop{i}"
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT); break
        except FileNotFoundError:
            time.sleep(0.001)
    cfg = gl.CONFIG.pack(bfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, gl.LO_FLAGS_READ_ONLY, b"", b"", b"", 0, 0, *([0] * 8))
    gl.ioctl(fd, gl.LOOP_CONFIGURE, cfg); t["configure"] = time.perf_counter()
    os.preadv(fd, [buf], 0); t["read"] = time.perf_counter()
    gl.ioctl(fd, gl.LOOP_CLR_FD); os.close(fd); t["clear"] = time.perf_counter()
    busy = 0; holders = set()
    while True:
        try:
            gl.ioctl(ctl, gl.LOOP_CTL_REMOVE, i); break
        except OSError as e:
            if e.errno != 16: raise
            busy += 1
            if busy < 5:
                r = subprocess.run(f"fuser -v {path} 2>&1 | tail -n +2", shell=True, capture_output=True, text=True)
                holders.add(r.stdout.strip().replace("\n", " | "))
            time.sleep(0.005)
    t["remove"] = time.perf_counter()
    prev = t0; out = []
    for k in ("add", "configure", "read", "clear", "remove"):
        out.append(f"{k} {1e3*(t[k]-prev):.1f}ms"); prev = t[k]
    return " ".join(out) + f" ebusy={busy} holders={holders}"

for d in ("loop", "rust_loop"):
    gl.load(d); gl.settle(); time.sleep(1)
    mon = subprocess.Popen(["udevadm", "monitor", "--kernel", "--udev", "-s", "block"], stdout=open(f"/tmp/mon-{d}", "w"))
    time.sleep(1)
    ctl = os.open("/dev/loop-control", os.O_RDWR); bfd = os.open(backing, os.O_RDONLY)
    buf = mmap.mmap(-1, 4096)
    for i in range(5):
        print(d, i, cycle(i, ctl, bfd, buf), flush=True)
    gl.settle(); time.sleep(1); mon.terminate(); mon.wait()
    os.close(ctl); os.close(bfd)
    print(f"=== {d} events:"); print(open(f"/tmp/mon-{d}").read(), flush=True)
gl.unload()
