#!/usr/bin/env python3
"""kmemleak for the test runner (debug kernel flavour: CONFIG_DEBUG_KMEMLEAK, no auto scan).

    kmemleak.py start            scan once and clear: what is suspected now (boot) is ignored
    kmemleak.py check LOGFILE    scan (twice, after the minimum object age), write the full
                                 report to LOGFILE, print a summary; exit 1 if a suspected leak
                                 is rust_loop's, 2 if kmemleak is unusable

A suspect is counted as rust_loop's when a frame of its allocation backtrace is in rust_loop
(a symbol with "rust_loop" in it), or is a bare address: a frame in a module that has been
unloaded since, and at the end of a run every test module has been (rust_loop; the only other
modules a run loads are tests/kmod/rl_journal_probe, which never stays loaded, and loop.ko with
TEST_DRIVER=loop). Suspects whose backtrace is all core kernel are listed as "not ours" and do
not fail the run: they come from the kernel or from user space activity (udev, the 9p root).
"""
import os
import re
import subprocess
import sys
import time

KMEMLEAK = "/sys/kernel/debug/kmemleak"
MIN_AGE = 5.5  # kmemleak reports objects older than 5 s (jiffies_min_age)


def ensure_debugfs():
    if not os.path.exists(KMEMLEAK):
        subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"],
                       stderr=subprocess.DEVNULL)
    return os.path.exists(KMEMLEAK)


def command(cmd):
    with open(KMEMLEAK, "w") as f:
        f.write(cmd)


def read_report():
    with open(KMEMLEAK) as f:
        return f.read()


def parse(text):
    """[(header line, [lines], backtrace frames)] of the report."""
    entries = []
    cur = None
    in_bt = False
    for line in text.splitlines():
        if line.startswith("unreferenced object"):
            cur = [line, [line], []]
            entries.append(cur)
            in_bt = False
            continue
        if cur is None:
            continue
        cur[1].append(line)
        s = line.strip()
        if s.startswith("backtrace"):
            in_bt = True
        elif in_bt and s:
            cur[2].append(s)
    return entries


BARE = re.compile(r"^(\[<[0-9a-f]+>\]\s*)?0x[0-9a-f]+$")


def ours(frames):
    return any("rust_loop" in f or BARE.match(f) for f in frames)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("start", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if not ensure_debugfs():
        print("kmemleak: not available (no %s)" % KMEMLEAK)
        return 0 if sys.argv[1] == "start" else 3
    try:
        if sys.argv[1] == "start":
            command("scan")
            command("clear")
            print("kmemleak: cleared the suspects present at the start")
            return 0
        time.sleep(MIN_AGE)
        t0 = time.monotonic()
        command("scan")
        time.sleep(1)
        command("scan")
        secs = time.monotonic() - t0
        text = read_report()
    except OSError as e:
        print("kmemleak: unusable (%s); is it disabled? see dmesg" % e)
        return 2
    entries = parse(text)
    mine = [e for e in entries if ours(e[2])]
    other = [e for e in entries if not ours(e[2])]
    with open(sys.argv[2], "w") as f:
        f.write("# %d suspects: %d rust_loop's (or an unloaded module's), %d not ours\n"
                % (len(entries), len(mine), len(other)))
        for title, es in (("rust_loop", mine), ("not ours", other)):
            f.write("\n## %s\n" % title)
            for e in es:
                f.write("\n".join(e[1]) + "\n")
    print("kmemleak: 2 scans in %.1fs; %d suspects: %d rust_loop's, %d not ours (%s)"
          % (secs, len(entries), len(mine), len(other), sys.argv[2]))
    for e in mine[:5]:
        print("\n".join("  | " + x for x in e[1][:2] + ["  backtrace:"] + e[2][:12]))
    return 1 if mine else 0


if __name__ == "__main__":
    sys.exit(main())
