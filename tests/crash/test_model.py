#!/usr/bin/env python3
"""Host-side checks of the crash tests' model (model.py) and verdict (report.py): what is
expected at a point, for files and for blocks behind a volatile cache, and that a loss fails."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Blocks, Files, Model, ZERO4K  # noqa: E402

failed = 0


def check(what, got, want):
    global failed
    if got != want:
        failed += 1
        print(f"FAIL: {what}: got {got!r}, expected {want!r}")


marks = []
m = Model(mark=marks.append)
m.stopped = False
f = Files(m)

# A file acknowledged, then an operation in flight: known before it started, in flux after.
r = f.start("a")
f.ack(r, (1, 11))
s1 = m.seq
r2 = f.start("a")
check("acked file at its mark", f.expected(s1), ({"a": (1, 11)}, 0))
check("file with an operation in flight", f.expected(m.seq + 1), ({}, 1))
check("a mark after each acknowledgement", marks, [f"s{s1}"])
# A cut: the operation is abandoned; acknowledgements after it do not count.
with m.lock:
    m.stopped = True
check("acknowledgement after a cut refused", f.ack(r2, (2, 22)), False)
check("abandoned operation in flux", f.in_flux(), ["a"])
m.stopped = False
# The resync unlinks it: known (absent) again.
r3 = f.start("a")
f.ack(r3, None)
check("unlinked after the cut", f.expected(m.seq), ({"a": None}, 0))
check("still unknown at a point during the abandoned operation", f.expected(r2[0] + 0.5), ({}, 1))

b = Blocks(m, "raw")
w = b.start([1, 2], lambda blk, prev: [blk * 10])
b.done(w)
check("completed, not flushed: in flux", b.expected(m.seq + 1), ({}, 2))
fl = b.flush_start()
w2 = b.start([3], lambda blk, prev: [30])  # completes after the flush was issued
b.done(w2)
b.flush_done(fl)
s2 = m.seq
check("flush covers what completed before its issue", b.expected(s2),
      ({1: frozenset([10]), 2: frozenset([20])}, 1))
check("block 3 not covered yet", b.in_flux(), [3])
# Another thread's flush covers block 3.
fl2 = b.flush_start()
b.flush_done(fl2)
check("a later flush covers it", b.expected(m.seq)[0].get(3), frozenset([30]))
# A discard: zeroes or what was there.
d = b.start([1], lambda blk, prev: prev | {ZERO4K})
b.done(d)
fl3 = b.flush_start()
b.flush_done(fl3)
check("discarded block: old data or zeroes", b.expected(m.seq)[0][1], frozenset([10, ZERO4K]))
# A point before the flush of a write issued: the block is in flux there.
w3 = b.start([2], lambda blk, prev: [21])
check("written block before its flush", b.expected(m.seq + 1)[0].get(2), None)
b.done(w3)
fl4 = b.flush_start()
b.flush_done(fl4)
check("and after", b.expected(m.seq)[0][2], frozenset([21]))

# report.py: a loss fails the verdict, a clean run passes.
run = {"driver": "rust_loop", "stack": "flakey", "mode": "dio", "backing": "xfs", "upper": "ext4",
       "error": None, "acks": 5, "marks": 5, "marks_failed": 0, "log_mib": 1.0,
       "counters": {}, "work": {},
       "cuts": {"points": 1, "objects": 3, "lost": 0, "fsck_failed": 0, "mount_failed": 0,
                "recover_mean": 1.0, "recover_max": 1.0, "details": []},
       "replay": {"points": 1, "objects": 3, "lost": 0, "fsck_failed": 0, "mount_failed": 0,
                  "recover_mean": None, "recover_max": None, "details": []}}
report = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.py")
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "a.json"), "w") as fh:
        json.dump(run, fh)
    rc = subprocess.run([sys.executable, report, d, "--cuts", "1", "--points", "1"],
                        stdout=subprocess.DEVNULL, check=False).returncode
    check("report: a clean run passes", rc, 0)
    rc = subprocess.run([sys.executable, report, d, "--cuts", "2", "--points", "1"],
                        stdout=subprocess.DEVNULL, check=False).returncode
    check("report: fewer cuts than asked fail", rc, 1)
    run["replay"]["lost"] = 1
    with open(os.path.join(d, "a.json"), "w") as fh:
        json.dump(run, fh)
    rc = subprocess.run([sys.executable, report, d, "--cuts", "1", "--points", "1"],
                        stdout=subprocess.DEVNULL, check=False).returncode
    check("report: a lost write fails", rc, 1)
    run["replay"]["lost"] = 0
    run["cuts"]["fsck_failed"] = 1
    with open(os.path.join(d, "a.json"), "w") as fh:
        json.dump(run, fh)
    rc = subprocess.run([sys.executable, report, d, "--cuts", "1", "--points", "1"],
                        stdout=subprocess.DEVNULL, check=False).returncode
    check("report: a failed file-system check fails", rc, 1)
    # --paths: every way a write ends taken passes; one never taken fails.
    run["cuts"]["fsck_failed"] = 0
    run["cpus"] = 4
    run["counters"] = {c: 1 for c in ("nowait_completions", "worker_submissions", "worker_spread",
                                      "cgroup_worker_submissions", "completions_batched",
                                      "flushes_racing", "flushes_racing_set_status",
                                      "change_fd_racing_io", "flushes_racing_clr_fd",
                                      "flushes_after_discard", "flushes_after_write_zeroes")}
    shutdown = dict(run, stack="shutdown", counters=dict(run["counters"]))
    with open(os.path.join(d, "a.json"), "w") as fh:
        json.dump(run, fh)
    with open(os.path.join(d, "b.json"), "w") as fh:
        json.dump(shutdown, fh)
    paths = [sys.executable, report, d, "--cuts", "1", "--points", "1", "--shutdown-cuts", "1",
             "--require-paths"]
    rc = subprocess.run(paths, stdout=subprocess.DEVNULL, check=False).returncode
    check("report --require-paths: every way taken passes", rc, 0)
    for r in (run, shutdown):
        r["counters"]["flushes_racing_clr_fd"] = 0
    with open(os.path.join(d, "a.json"), "w") as fh:
        json.dump(run, fh)
    with open(os.path.join(d, "b.json"), "w") as fh:
        json.dump(shutdown, fh)
    rc = subprocess.run(paths, stdout=subprocess.DEVNULL, check=False).returncode
    check("report --require-paths: a way never taken fails", rc, 1)
    rc = subprocess.run(paths[:-1] + ["--paths"], stdout=subprocess.DEVNULL,
                        check=False).returncode
    check("report --paths: shown, not required", rc, 0)

    # --matrix: the runs must be the matrix's, each once (make crashcheck: a skipped driver, or
    # a result an earlier run left, fails); a run that checked no object fails.
    for f in ("a.json", "b.json"):
        os.remove(os.path.join(d, f))
    base = [sys.executable, report, d, "--cuts", "1", "--points", "1", "--shutdown-cuts", "1"]
    matrix = os.path.join(d, "matrix")
    with open(matrix, "w") as fh:
        fh.write("loop flakey dio xfs ext4\nrust_loop flakey dio xfs ext4\n"
                 "rust_loop shutdown dio ext4 xfs\n")
    rc = subprocess.run(base + ["--matrix", matrix], stdout=subprocess.DEVNULL,
                        check=False).returncode
    check("report --matrix: no result at all fails", rc, 1)
    run["counters"] = {}
    for name, r in (("loop", dict(run, driver="loop")), ("rust", run),
                    ("shutdown", dict(run, stack="shutdown", backing="ext4", upper="xfs"))):
        with open(os.path.join(d, f"{name}.json"), "w") as fh:
            json.dump(r, fh)
    rc = subprocess.run(base + ["--matrix", matrix], stdout=subprocess.DEVNULL,
                        check=False).returncode
    check("report --matrix: the matrix's runs pass", rc, 0)
    rc = subprocess.run(base + ["--matrix", matrix, "--driver", "loop"],
                        stdout=subprocess.DEVNULL, check=False).returncode
    check("report --matrix --driver: that driver's runs pass", rc, 0)
    os.remove(os.path.join(d, "loop.json"))
    out = subprocess.run(base + ["--matrix", matrix], capture_output=True, text=True,
                         check=False)
    check("report --matrix: a driver's runs missing (skipped) fail", out.returncode, 1)
    check("report --matrix: says which", "loop flakey dio xfs ext4: no result" in out.stdout,
          True)
    with open(os.path.join(d, "loop.json"), "w") as fh:
        json.dump(dict(run, driver="loop"), fh)
    with open(os.path.join(d, "old.json"), "w") as fh:
        json.dump(dict(run, mode="buffered"), fh)
    rc = subprocess.run(base + ["--matrix", matrix], stdout=subprocess.DEVNULL,
                        check=False).returncode
    check("report --matrix: a result of another run fails", rc, 1)
    os.remove(os.path.join(d, "old.json"))
    run["cuts"]["objects"] = run["replay"]["objects"] = 0
    with open(os.path.join(d, "rust.json"), "w") as fh:
        json.dump(run, fh)
    out = subprocess.run(base + ["--matrix", matrix], capture_output=True, text=True,
                         check=False)
    check("report: a run that checked no object fails", out.returncode, 1)
    check("report: says so", "checked no object" in out.stdout, True)

print("ok: the crash model and verdict" if not failed else f"{failed} failed")
sys.exit(1 if failed else 0)
