#!/usr/bin/env python3
"""The Debian kernels with Rust that the archive has now, against the kernel matrix.

    scripts/kernels/kernels.py [--all]   (make kernels; .ci/run runs it as a step of its own)

For every suite rust_loop's users run (trixie-backports, forky, sid, experimental), every
architecture (amd64, arm64) and every flavour (amd64, cloud-amd64, rt-amd64; arm64, arm64-16k,
cloud-arm64, rt-arm64), it reads the headers package's .config of the newest kernel of every
upstream series (every kernel with --all) and prints one line per kernel built with CONFIG_RUST:
its release, version, suite, the rustc it was built with, and where it stands: its row of
config/kernels.conf; "not buildable" when the archive no longer has that rustc (a module can be
built with that one only); "NEWER" when it is newer than every kernel the matrix pins for its
suite and flavour (the next kernel those users get: add it); else "not in the matrix" (a
flavour, an architecture or an older kernel the matrix does not sample), with "new series" when
no row of the matrix is of its series (docs/kernels.md: how a series is added). Versions are
ordered as dpkg orders them (debian_archive.version_compare). Then the rows whose pinned
packages (headers and source) the archive no longer has ("LOST"). A suite whose index is past its
Valid-Until is used with a warning (debian_archive.py).

Exit status: 0 when the matrix is current, 3 when the archive has a NEWER kernel (nothing is
broken: the matrix is behind), 4 when a row is LOST (its kernel can no longer be built: CI fails),
1 on any error. The headers' configs are cached ($RUST_LOOP_CACHE/stock/archive/<suite>/headers/);
the indexes are fetched again when a day old.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import debian_archive as A  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (suite of the packages, architecture, suite of the build root: its rustc)
SUITES = tuple((suite, arch, root)
               for suite, root in (("trixie-backports", "trixie"), ("forky", "forky"),
                                   ("sid", "sid"), ("experimental", "sid"))
               for arch in ("amd64", "arm64"))
FLAVOURS = {"amd64": ("amd64", "cloud-amd64", "rt-amd64"),
            "arm64": ("arm64", "arm64-16k", "cloud-arm64", "rt-arm64")}
# linux-headers-<ABI>-<flavour>: 7.3.4+deb13-amd64, 7.2.13+deb14-arm64-16k, 7.3-amd64
# (experimental's 7.3~rc7).
HEADERS = re.compile(r"linux-headers-(\d+\.\d+)((?:\.\d+)?(?:\+deb\d+)?)-(.+)")
EXIT_NEWER, EXIT_LOST = 3, 4


def matrix(path=None):
    rows = []
    with open(path or os.path.join(ROOT, "config", "kernels.conf")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 8:
                rows.append(dict(zip(("name", "root", "pkgs", "arch", "krel", "version",
                                      "source", "runs"), line)))
    return rows


def series_of(krel):
    m = re.match(r"(\d+\.\d+)", krel)
    return m.group(1) if m else None


def cfg_value(text, key):
    m = re.search(rf'^{key}="?(.*?)"?$', text, re.M)
    return m.group(1) if m else None


def archive_kernels(suite, arch, every):
    """The suite's kernels of arch's flavours: [(series, flavour, krel, version)], each series'
    and flavour's newest (every one with `every`), in dpkg's order."""
    kernels = {}
    for e in A.index(suite, arch, max_age=86400):
        m = HEADERS.fullmatch(e.get("Package", ""))
        if not m or m.group(3) not in FLAVOURS[arch] or e.get("Architecture") != arch:
            continue
        krel = e["Package"][len("linux-headers-"):]
        kernels.setdefault((m.group(1), m.group(3)), []).append((krel, e["Version"]))
    out = []
    for (series, flavour), versions in sorted(
            kernels.items(), key=lambda kv: (A.version_key(kv[0][0]), kv[0][1])):
        versions.sort(key=lambda kv: A.version_key(kv[1]))
        for krel, ver in (versions if every else versions[-1:]):
            out.append((series, flavour, krel, ver))
    return out


def lost_rows(rows):
    """The rows whose headers or source package at the pinned version the archive lacks."""
    lost = []
    for r in rows:
        idx = A.index(r["pkgs"], r["arch"], max_age=86400)
        have = {(e.get("Package"), e.get("Version")) for e in idx}
        gone = [p for p in (f"linux-headers-{r['krel']}", r["source"])
                if (p, r["version"]) not in have]
        if gone:
            lost.append((r, gone))
    return lost


def main(argv, conf=None):
    every = "--all" in argv
    rows = matrix(conf)
    in_matrix = {(r["krel"], r["version"]): r["name"] for r in rows}
    matrix_series = {series_of(r["krel"]) for r in rows}
    # What the matrix covers: (suite, flavour) -> the versions it pins.
    covered = {}
    for r in rows:
        flavour = r["krel"].split("-", 1)[1]
        covered.setdefault((r["pkgs"], flavour), []).append(r["version"])
    newer, out = [], []
    rustc_of_root = {}
    for suite, arch, root in SUITES:
        if root not in rustc_of_root:
            idx = A.index(root, "amd64", max_age=86400)
            rustc_of_root[root] = {e["Version"] for e in idx if e.get("Package") == "rustc"}
        for series, flavour, krel, ver in archive_kernels(suite, arch, every):
            text = A.config_text(suite, arch, f"linux-headers-{krel}={ver}")
            if cfg_value(text, "CONFIG_RUST") != "y":
                continue
            rustc = cfg_value(text, "CONFIG_RUSTC_VERSION_TEXT") or "?"
            rv = rustc.split()[1] if len(rustc.split()) > 1 else "?"
            buildable = any(v.startswith(rv + "+") or v.startswith(rv + "-")
                            for v in rustc_of_root[root])
            name = in_matrix.get((krel, ver))
            pinned = covered.get((suite, flavour), [])
            newest_pinned = max(pinned, key=A.version_key) if pinned else None
            if name:
                state = f"in the matrix: {name}"
            elif not buildable:
                state = f"not buildable ({root} has no rustc {rv} any more)"
            elif newest_pinned is not None and A.version_compare(ver, newest_pinned) > 0:
                # Newer than every kernel the matrix pins for this suite and flavour: the
                # next one users get.
                state = f"NEWER than the matrix's ({newest_pinned}): add it"
                newer.append(krel)
            else:
                state = "not in the matrix"
                if series not in matrix_series:
                    state += f" (new series {series}: docs/kernels.md)"
            out.append(f"{krel:28} {ver:18} {suite:17} {arch:5} rustc {rv:7} {state}")
    print("\n".join(out))
    lost = lost_rows(rows)
    for r, gone in lost:
        print(f"LOST: {r['name']} ({r['krel']} {r['version']}): {', '.join(gone)} no longer in "
              f"{r['pkgs']} ({r['arch']}): pin a newer kernel in config/kernels.conf")
    if newer:
        print(f"the matrix lacks {len(newer)} kernel(s) newer than those it pins for their suite "
              f"and flavour: {' '.join(newer)} (README 'Supported kernels' says how to add one)")
    return EXIT_LOST if lost else EXIT_NEWER if newer else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
