#!/usr/bin/env python3
"""README's "Supported kernels" table, made from the kernel matrix and the results of its runs.

    scripts/kernels/kernels_table.py --update    (make kernels-table)
        Folds the results of this checkout's runs (results/matrix/results.tsv, written by
        `make matrix`, `make smoke`, `make subset`, `make check` and .ci/run) into
        docs/kernels-results.tsv, the record of the last result of each kernel and step, and
        rewrites the table between README's markers from it and config/kernels.conf.
    scripts/kernels/kernels_table.py --check
        Exits 1 when README's table is not the one the matrix and the record make (a kernel
        added to the matrix without its table row, a table edited by hand): a host test.
    scripts/kernels/kernels_table.py --print
        Prints the table.
    scripts/kernels/kernels_table.py --print-results
        Prints the table with this checkout's results folded in, writing nothing (.ci/run).

A results row is: kernel name, step (build, smoke, subset, suite, package), ok or FAIL, a
detail (the build's rustc; the test counts of a subset or suite run; else seconds), the date. A step the row's "runs" column does not name
shows as "–" unless a run by hand recorded a result for it (the arm64 kernel's smoke boot, `make
arm64-boot`, which CI does not run); one it names without a result yet as "not run".
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF = os.path.join(ROOT, "config", "kernels.conf")
RECORD = os.path.join(ROOT, "docs", "kernels-results.tsv")
RESULTS = os.path.join(ROOT, "results", "matrix", "results.tsv")
README = os.path.join(ROOT, "README.md")
BEGIN = "<!-- kernels-table: made by `make kernels-table` from config/kernels.conf and " \
        "docs/kernels-results.tsv; do not edit -->"
END = "<!-- kernels-table end -->"
STEPS = (("build", "built (warning-free, clippy)"), ("smoke", "smoke boot"),
         ("subset", "reliability subset"), ("suite", "whole suite"),
         ("package", "DKMS package installed"))


def matrix():
    rows = []
    with open(CONF) as f:
        for line in f:
            cols = line.split("#", 1)[0].split()
            if len(cols) >= 8:
                rows.append(dict(zip(("name", "root", "pkgs", "arch", "krel", "version",
                                      "source", "runs"), cols)))
    return rows


def read_results(path):
    """{(name, step): (result, detail, date)}: the last row of each."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if len(cols) >= 5 and not line.startswith("#"):
                    out[(cols[0], cols[1])] = (cols[2], cols[3], cols[4])
    return out


def write_record(rec):
    with open(RECORD + ".tmp", "w") as f:
        f.write("# The last result of each kernel of the matrix and step (make kernels-table "
                "folds results/matrix/results.tsv in).\n# name\tstep\tresult\tdetail\tdate\n")
        for (name, step), (res, detail, date) in sorted(rec.items()):
            f.write(f"{name}\t{step}\t{res}\t{detail}\t{date}\n")
    os.replace(RECORD + ".tmp", RECORD)


def table(rec):
    rows = matrix()
    head = ["kernel (`STOCK=`)", "release", "from", "rustc"] + [t for _, t in STEPS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        runs = r["runs"].split(",")
        built = rec.get((r["name"], "build"))
        cells = [f"`{r['name']}`", f"`{r['krel']}`", f"{r['pkgs']} ({r['arch']})",
                 built[1].replace("rustc ", "") if built and built[1].startswith("rustc") else "?"]
        for step, _ in STEPS:
            res = rec.get((r["name"], step))
            if step not in runs and res is None:
                cells.append("–")
                continue
            if res is None:
                cells.append("not run")
            else:
                mark = "yes" if res[0] == "ok" else "**FAILED**"
                detail = f", {res[1]}" if res[1] and step in ("subset", "suite") else ""
                cells.append(f"{mark}{detail} ({res[2]})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def readme_parts():
    with open(README) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"README.md has no kernels-table markers ({BEGIN} ... {END})")
    a, rest = text.split(BEGIN, 1)
    _, b = rest.split(END, 1)
    return a, rest.split(END, 1)[0], b


def main(argv):
    rec = read_results(RECORD)
    if "--update" in argv:
        rec.update(read_results(RESULTS))
        names = {r["name"] for r in matrix()}
        rec = {k: v for k, v in rec.items() if k[0] in names}
        write_record(rec)
        a, _, b = readme_parts()
        with open(README, "w") as f:
            f.write(a + BEGIN + "\n" + table(rec) + END + b)
        print(table(rec), end="")
    elif "--check" in argv:
        _, cur, _ = readme_parts()
        if cur.strip() != table(rec).strip():
            sys.exit("README's kernels table is not the one config/kernels.conf and "
                     "docs/kernels-results.tsv make: run `make kernels-table`")
    elif "--print" in argv:
        print(table(rec), end="")
    elif "--print-results" in argv:
        rec.update(read_results(RESULTS))
        print(table(rec), end="")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
