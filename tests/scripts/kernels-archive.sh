#!/usr/bin/env bash
# Host-side checks of the archive tool (scripts/kernels/kernels.py, make kernels;
# scripts/kernels/debian_archive.py) on fabricated index data, without the network: Debian versions ordered as dpkg orders them
# (the host's dpkg --compare-versions is the reference), a warning for a suite's index past its
# Valid-Until, and kernels.py's verdicts (the newest kernel of each series and flavour, arm64-16k
# and experimental included; NEWER, a new series, LOST; its exit status).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

export RUST_LOOP_CACHE=$tmp/cache ARCHIVE=http://127.0.0.1:9/nothing
$py - "$tmp" <<'EOF' || failed=1
import contextlib
import io
import os
import subprocess
import sys
import time

sys.path.insert(0, "scripts/kernels")
import debian_archive as A  # noqa: E402
import kernels as K  # noqa: E402

tmp = sys.argv[1]
bad = []


def check(what, got, want):
    if got != want:
        bad.append(f"{what}: got {got!r}, expected {want!r}")


# 1. dpkg's order.
pairs = [
    ("7.2.13-1~bpo13+1", "7.2.13-1", -1), ("7.3~rc10-1~exp1", "7.3~rc9-1~exp1", 1),
    ("7.3~rc7-1~exp1", "7.3.4-1~bpo13+1", -1), ("7.3~rc7-1~exp1", "7.2.13-1", 1),
    ("7.3.4-1~bpo13+1", "7.3.4-1~bpo13+2", -1), ("7.3-1", "7.3.0-1", -1),
    ("1:7.0-1", "7.9-1", 1), ("7.2.9-1", "7.2.10-1", -1), ("1.0~", "1.0", -1),
    ("1.0", "1.0-0", 0), ("1.0a", "1.0+", -1), ("1.0.a", "1.0a", 1), ("01.2", "1.02", 0),
    ("2.0~~", "2.0~", -1), ("7.3.4+deb13", "7.3.4", 1), ("7.3.4~", "7.3.4+deb13", -1),
]
dpkg = subprocess.run(["sh", "-c", "command -v dpkg"], capture_output=True).returncode == 0
for a, b, want in pairs:
    check(f"version_compare({a}, {b})", A.version_compare(a, b), want)
    check(f"version_compare({b}, {a})", A.version_compare(b, a), -want)
    if dpkg:
        for op, res in (("lt", want < 0), ("eq", want == 0), ("gt", want > 0)):
            rc = subprocess.run(["dpkg", "--compare-versions", a, op, b]).returncode
            check(f"dpkg --compare-versions {a} {op} {b} (the reference)", rc == 0, res)
order = ["7.2.12-1~bpo13+1", "7.2.12-1", "7.2.13-1~bpo13+1", "7.2.13-1", "7.3~rc9-1~exp1",
         "7.3~rc10-1~exp1", "7.3-1", "7.3.4-1~bpo13+1", "7.3.4-1"]
check("sorted", sorted(reversed(order), key=A.version_key), order)

# 2. Valid-Until: a warning for an index past it, none for one within it, once per suite.
past = "Origin: Debian\nDate: Fri, 30 Oct 2026 08:08:01 UTC\nValid-Until: Fri, 06 Nov 2026 08:08:01 UTC\n"
future = "Origin: Debian\nDate: Sat, 05 Dec 2026 02:11:04 UTC\nValid-Until: Sat, 12 Dec 2099 02:11:04 UTC\n"
w = A.valid_until_warning("sid", past)
check("past Valid-Until warns", bool(w and "sid's index is past its Valid-Until" in w
                                      and "Fri, 06 Nov 2026" in w), True)
check("future Valid-Until", A.valid_until_warning("trixie-backports", future), None)
check("no Valid-Until", A.valid_until_warning("x", "Origin: Debian\n"), None)
pkgs = "Package: rustc\nVersion: 1.97.1+dfsg1-1\nArchitecture: amd64\n\n"
for suite, text in (("sid", past), ("trixie-backports", future)):
    d = os.path.join(A.CACHE, suite)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "InRelease"), "w") as f:
        f.write(text)
    with open(os.path.join(d, "Packages-amd64"), "w") as f:
        f.write(pkgs)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    for _ in range(2):
        entries = A.index("sid", "amd64", max_age=86400)
        A.index("trixie-backports", "amd64", max_age=86400)
check("the cached index is read", entries, [{"Package": "rustc", "Version": "1.97.1+dfsg1-1",
                                             "Architecture": "amd64"}])
check("index(): one warning, for the suite past its Valid-Until",
      [line.split("'")[0] for line in err.getvalue().splitlines()], ["warning: sid"])

# 3. kernels.py on fabricated indexes.
def hdr(krel, ver, arch):
    return {"Package": f"linux-headers-{krel}", "Version": ver, "Architecture": arch}


def src(series, ver):
    return {"Package": f"linux-source-{series}", "Version": ver, "Architecture": "all"}


rustc = [{"Package": "rustc", "Version": "1.85.1+dfsg1-1", "Architecture": "amd64"},
         {"Package": "rustc", "Version": "1.97.1+dfsg1-1", "Architecture": "amd64"}]
INDEX = {
    ("trixie", "amd64"): rustc, ("forky", "amd64"): rustc,
    ("trixie-backports", "amd64"): [
        hdr("7.3.4+deb13-amd64", "7.3.4-1~bpo13+1", "amd64"), src("7.3", "7.3.4-1~bpo13+1"),
        hdr("7.3.5+deb13-cloud-amd64", "7.3.5-1~bpo13+1", "amd64"),
        hdr("7.3.4+deb13-cloud-amd64", "7.3.4-1~bpo13+1", "amd64"),
        hdr("7.2.13+deb13-amd64", "7.2.13-1~bpo13+1", "amd64"),
        hdr("7.2.13+deb13-amd64", "7.2.13-1", "amd64"),
        hdr("7.3.4+deb13-common", "7.3.4-1~bpo13+1", "all")],
    ("trixie-backports", "arm64"): [hdr("7.3.4+deb13-arm64-16k", "7.3.4-1~bpo13+1", "arm64")],
    ("sid", "amd64"): rustc + [hdr("7.2.13+deb14-amd64", "7.2.13-1", "amd64")],
    ("sid", "arm64"): [hdr("7.2.13+deb14-arm64", "7.2.13-1", "arm64")],
    ("experimental", "amd64"): [hdr("7.4-amd64", "7.4~rc9-1~exp1", "amd64"),
                                hdr("7.4-amd64", "7.4~rc10-1~exp1", "amd64")],
    ("experimental", "arm64"): [], ("forky", "arm64"): [],
}
RUST_CFG = 'CONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT="rustc {} (abc 2026-01-01)"\n'


def fake_index(suite, arch, refresh=False, max_age=None):
    return INDEX.get((suite, arch), [])


def fake_config(suite, arch, spec):
    return RUST_CFG.format("1.85.1" if "deb13" in spec else "1.97.1")


K.A.index, K.A.config_text = fake_index, fake_config
conf = os.path.join(tmp, "kernels.conf")


def run(rows):
    with open(conf, "w") as f:
        f.write("# name root pkgs arch krel version source runs\n" + rows)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = K.main(["kernels.py"], conf)
    return rc, out.getvalue()


row73 = "7.3 trixie trixie-backports amd64 7.3.4+deb13-amd64 7.3.4-1~bpo13+1 linux-source-7.3 build\n"
rowcloud = ("7.3-cloud trixie trixie-backports amd64 7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1 "
            "linux-source-7.3 build\n")
row72 = "7.2 trixie trixie-backports amd64 7.2.13+deb13-amd64 7.2.13-1~bpo13+1 linux-source-7.2 build\n"
rc, out = run(row73 + rowcloud)
lines = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines()
         if line and not line.startswith(("LOST", "the matrix"))}
check("status with a NEWER kernel", rc, K.EXIT_NEWER)
check("in the matrix", "in the matrix: 7.3" in lines.get("7.3.4+deb13-amd64 7.3.4-1~bpo13+1", ""), True)
check("NEWER: the cloud kernel after the pinned one",
      "NEWER" in lines.get("7.3.5+deb13-cloud-amd64 7.3.5-1~bpo13+1", ""), True)
check("only the newest of a series and flavour", "7.3.4+deb13-cloud-amd64 7.3.4-1~bpo13+1" in lines, False)
check("7.2.13-1 is newer than 7.2.13-1~bpo13+1", "7.2.13+deb13-amd64 7.2.13-1" in lines, True)
check("arm64-16k listed", "7.3.4+deb13-arm64-16k 7.3.4-1~bpo13+1" in lines, True)
check("sid's arm64 listed", "7.2.13+deb14-arm64 7.2.13-1" in lines, True)
check("experimental: rc10 after rc9", "7.4-amd64 7.4~rc10-1~exp1" in lines, True)
check("experimental: a new series", "new series 7.4" in lines.get("7.4-amd64 7.4~rc10-1~exp1", ""), True)
check("the common headers are no kernel", any("common" in k for k in lines), False)
check("no LOST row", "LOST" in out, False)
# A pinned kernel gone from the archive: LOST, status 4; an experimental row beside numeric ones.
rowexp = "7.4 sid experimental amd64 7.4-amd64 7.4~rc10-1~exp1 linux-source-7.4 build\n"
rc, out = run(row73 + rowcloud + row72 + rowexp)
check("status with LOST rows", rc, K.EXIT_LOST)
check("LOST: 7.2 (its source)", "LOST: 7.2 (7.2.13+deb13-amd64 7.2.13-1~bpo13+1): linux-source-7.2 no longer" in out, True)
check("LOST: 7.4 (its headers are there, its source not)", "LOST: 7.4 " in out, True)
check("7.3 is not LOST", "LOST: 7.3 " in out, False)
check("experimental row: in the matrix", "in the matrix: 7.4" in out, True)
INDEX[("trixie-backports", "amd64")].append(src("7.2", "7.2.13-1~bpo13+1"))
INDEX[("experimental", "amd64")].append(src("7.4", "7.4~rc10-1~exp1"))
INDEX[("trixie-backports", "amd64")] = [e for e in INDEX[("trixie-backports", "amd64")]
                                        if e["Version"] != "7.3.5-1~bpo13+1"]
rc, out = run(row73 + rowcloud + row72 + rowexp)
check("status of a current matrix", rc, 0)
# (Older than 7.3.4, the flavour's newest pinned kernel: not NEWER.)
check("7.2.13-1 beside the pinned 7.2.13-1~bpo13+1",
      "7.2.13+deb13-amd64           7.2.13-1           trixie-backports  amd64 rustc 1.85.1  "
      "not in the matrix" in out, True)

for b in bad:
    print(f"FAIL: {b}")
sys.exit(1 if bad else 0)
EOF

exit "$failed"
