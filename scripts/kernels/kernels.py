#!/usr/bin/env python3
"""The Debian kernels with Rust that the archive has now, against the kernel matrix.

    scripts/kernels/kernels.py [--all]        (make kernels)

For each suite rust_loop's users run (trixie-backports on amd64 and arm64, forky, sid,
experimental) and each flavour (amd64, cloud-amd64, rt-amd64; arm64, cloud-arm64, rt-arm64), it
reads the headers package's .config of the newest kernel of every upstream series (every kernel
with --all) and prints one line per kernel built with CONFIG_RUST: its release, version, suite,
the rustc it was built with, and where it stands: its row of config/kernels.conf; "not
buildable" when the archive no longer has that rustc (a module can be built with that one
only); "NEWER" when it is newer than every kernel the matrix pins for its suite and flavour (the
next kernel those users get: add it); else "not in the matrix" (a flavour or an older kernel the
matrix does not sample). Then the rows whose pinned packages the archive no longer has ("LOST").
Exits 1 when there is a NEWER kernel or a LOST row. The headers' configs are cached ($RUST_LOOP_CACHE/stock/archive/<suite>/headers/).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import debian_archive as A  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITES = (("trixie-backports", "amd64", "trixie"), ("trixie-backports", "arm64", "trixie"),
          ("forky", "amd64", "forky"), ("sid", "amd64", "sid"),
          ("experimental", "amd64", "sid"))
FLAVOURS = {"amd64": ("amd64", "cloud-amd64", "rt-amd64"),
            "arm64": ("arm64", "cloud-arm64", "rt-arm64")}


def matrix():
    rows = []
    with open(os.path.join(ROOT, "config", "kernels.conf")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 8:
                rows.append(dict(zip(("name", "root", "pkgs", "arch", "krel", "version",
                                      "source", "runs"), line)))
    return rows


def vkey(v):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.+~-]", v)]


def cfg_value(text, key):
    m = re.search(rf'^{key}="?(.*?)"?$', text, re.M)
    return m.group(1) if m else None


def main(argv):
    every = "--all" in argv
    rows = matrix()
    in_matrix = {(r["krel"], r["version"]): r["name"] for r in rows}
    # What the matrix covers: (suite, flavour) -> the newest series and version it pins.
    covered = {}
    for r in rows:
        flavour = r["krel"].split("-", 1)[1]
        covered.setdefault((r["pkgs"], flavour), []).append(r)
    stale, out = [], []
    rustc_of_root = {}
    for suite, arch, root in SUITES:
        entries = A.index(suite, arch, max_age=86400)
        if root not in rustc_of_root:
            idx = A.index(root, "amd64", max_age=86400)
            rustc_of_root[root] = {e["Version"] for e in idx if e.get("Package") == "rustc"}
        kernels = {}
        for e in entries:
            m = re.fullmatch(r"linux-headers-(\d+\.\d+)(\.\d+)?(\+deb\d+)?(?:~[^-]*)?-(.+)",
                             e.get("Package", ""))
            if not m or m.group(4) not in FLAVOURS[arch]:
                continue
            krel = e["Package"][len("linux-headers-"):]
            kernels.setdefault((m.group(1), m.group(4)), []).append((krel, e["Version"]))
        for (series, flavour), versions in sorted(kernels.items(), key=lambda kv: (vkey(kv[0][0]), kv[0][1])):
            versions.sort(key=lambda kv: vkey(kv[1]))
            for krel, ver in (versions if every else versions[-1:]):
                text = A.config_text(suite, arch, f"linux-headers-{krel}={ver}")
                if cfg_value(text, "CONFIG_RUST") != "y":
                    continue
                rustc = cfg_value(text, "CONFIG_RUSTC_VERSION_TEXT") or "?"
                rv = rustc.split()[1] if len(rustc.split()) > 1 else "?"
                buildable = any(v.startswith(rv + "+") or v.startswith(rv + "-")
                                for v in rustc_of_root[root])
                name = in_matrix.get((krel, ver))
                pinned = covered.get((suite, flavour), [])
                newest_pinned = max((vkey(r["version"]) for r in pinned), default=None)
                if name:
                    state = f"in the matrix: {name}"
                elif not buildable:
                    state = f"not buildable ({root} has no rustc {rv} any more)"
                elif newest_pinned is not None and vkey(ver) > newest_pinned:
                    # Newer than every kernel the matrix pins for this suite and flavour: the
                    # next one users get.
                    state = "NEWER than the matrix's: add it"
                    stale.append(krel)
                else:
                    state = "not in the matrix"
                out.append(f"{krel:28} {ver:18} {suite:17} rustc {rv:7} {state}")
    print("\n".join(out))
    lost = []
    for r in rows:
        idx = A.index(r["pkgs"], r["arch"], max_age=86400)
        if not any(e.get("Package") == f"linux-headers-{r['krel']}" and
                   e.get("Version") == r["version"] for e in idx):
            lost.append(r["name"])
            print(f"LOST: {r['name']} ({r['krel']} {r['version']}) is no longer in {r['pkgs']}: "
                  f"pin a newer kernel in config/kernels.conf")
    if stale:
        print(f"the matrix lacks {len(stale)} kernel(s) newer than those it pins for their suite "
              f"and flavour: {' '.join(stale)} (README 'Supported kernels' says how to add one)")
    sys.exit(1 if stale or lost else 0)


if __name__ == "__main__":
    main(sys.argv)
