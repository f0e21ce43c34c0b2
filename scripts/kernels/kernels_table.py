#!/usr/bin/env python3
"""README's "Supported kernels" table, made from the kernel matrix and the results of its runs.

    scripts/kernels/kernels_table.py --update    (make kernels-table)
        Folds the results of this checkout's runs (results/matrix/results.tsv, written by
        `make matrix`, `make smoke`, `make subset`, `make check`, `make dkms-test`, `make
        arm64-boot` and .ci/run) into docs/kernels-results.tsv, the record of the last result of
        each kernel, step and scope, and rewrites the table between README's markers from it
        and config/kernels.conf.
    scripts/kernels/kernels_table.py --check
        Exits 1 when README's table is not the one the matrix and the record make (a kernel
        added to the matrix without its table row, a table edited by hand, a driver change that
        made a result stale): a host test.
    scripts/kernels/kernels_table.py --print
        Prints the table.
    scripts/kernels/kernels_table.py --print-results
        Prints the table with this checkout's results folded in, writing nothing (.ci/run).
    scripts/kernels/kernels_table.py --provenance
        Prints the provenance of a run in this checkout now: "commit tree by" (below).
    scripts/kernels/kernels_table.py --append NAME STEP RESULT DETAIL [whole|partial]
        Appends a result to results/matrix/results.tsv with its provenance: $RUN_PROVENANCE,
        taken when the run started, else now (the scripts that run a step call it through
        scripts/common.sh's run_provenance and result_row).

A results row is: kernel name, step (build, smoke, subset, suite, package), ok or FAIL, a detail
(the build's rustc; the test counts of a subset or suite run; else seconds), the date, and its
provenance: the commit it ran at (git rev-parse HEAD, "-" outside a git checkout), the tree
("clean"; "dirty": uncommitted changes, none to the driver's sources; "dirty-driver": some to
them), who ran it ("ci" when CI=true is in the environment, as CI services set it, else "hand"),
and the scope ("whole", or "partial": a test regex, `make subset SUBSET_TESTS=<part>`, an install
test given the Rust artefacts instead of regenerating them).

A result is stale when it is not known to come from today's driver source: it names no commit
(rows from before provenance was recorded) or one this repository lacks, it ran on a tree whose
driver sources had uncommitted changes, or the driver sources (DRIVER below: rust_loop/,
rust_loop.rs, uapi/, Kbuild, packaging/) differ between its commit and the checkout (`git diff
--quiet <commit> -- DRIVER`: committed changes and those not committed yet). A stale result never
shows as "yes": its cell says "stale" with what it was and where. A cell shows the whole run's
result, or a partial run's (marked "partial") when there is no whole one or only the partial one
is fresh. A step the row's "runs" column does not name shows as "–"
unless a run by hand recorded a result for it (the arm64 kernel's smoke boot, `make arm64-boot`,
which CI does not run); one it names without a result yet as "not run".
"""
import os
import subprocess
import sys
from datetime import date

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
# The driver's sources: what a result stands for. A change to any of them after a result's commit
# makes that result stale.
DRIVER = ("rust_loop", "rust_loop.rs", "uapi", "Kbuild", "packaging")
COLUMNS = ("name", "step", "result", "detail", "date", "commit", "tree", "by", "scope")
SCOPES = ("whole", "partial")


def git(*args):
    """(exit status, stdout) of git in the checkout; (128, "") without git or a repository."""
    try:
        p = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    except OSError:
        return 128, ""
    return p.returncode, p.stdout.strip()


def matrix():
    """The rows of config/kernels.conf, as `make kernels` reads them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kernels  # noqa: E402
    return kernels.matrix(CONF)


def read_results(path):
    """{(name, step, scope): row}: the last row of each. A row from before provenance was
    recorded (5 columns) names no commit and counts as whole."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                cols = line.rstrip("\n").split("\t")
                if len(cols) < 5:
                    continue
                row = dict(zip(COLUMNS, cols + ["-", "-", "-", "whole"][len(cols) - 5:]))
                if row["scope"] not in SCOPES:
                    row["scope"] = "partial"
                out[(row["name"], row["step"], row["scope"])] = row
    return out


def write_record(rec):
    with open(RECORD + ".tmp", "w") as f:
        f.write("# The last result of each kernel of the matrix, step and scope (make kernels-table "
                "folds results/matrix/results.tsv in;\n# scripts/kernels/kernels_table.py says "
                "what the columns hold).\n# " + "\t".join(COLUMNS) + "\n")
        for key in sorted(rec):
            f.write("\t".join(rec[key][c] for c in COLUMNS) + "\n")
    os.replace(RECORD + ".tmp", RECORD)


def provenance():
    """(commit, tree, by) of a run in this checkout now."""
    rc, commit = git("rev-parse", "--verify", "-q", "HEAD")
    if rc != 0 or not commit:
        return "-", "-", ("ci" if os.environ.get("CI") == "true" else "hand")
    _, driver = git("status", "--porcelain", "--", *DRIVER)
    _, anything = git("status", "--porcelain")
    tree = "dirty-driver" if driver else "dirty" if anything else "clean"
    return commit, tree, ("ci" if os.environ.get("CI") == "true" else "hand")


def append(args):
    if len(args) not in (4, 5) or (len(args) == 5 and args[4] not in SCOPES):
        sys.exit("usage: kernels_table.py --append NAME STEP RESULT DETAIL [whole|partial]")
    name, step, result, detail = args[:4]
    scope = args[4] if len(args) == 5 else "whole"
    if step not in dict(STEPS):
        sys.exit(f"kernels_table.py --append: unknown step '{step}'")
    given = os.environ.get("RUN_PROVENANCE", "").split()
    commit, tree, by = given if len(given) == 3 else provenance()
    row = [name, step, result, detail.replace("\t", " "), date.today().isoformat(), commit, tree,
           by, scope]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write("\t".join(row) + "\n")


_fresh = {}


def stale_reason(row):
    """Why a result is not known to come from today's driver source, or None when it does."""
    commit = row["commit"]
    if commit in ("", "-"):
        return "no commit"
    if row["tree"] == "dirty-driver":
        return "uncommitted driver changes"
    if commit not in _fresh:
        rc, _ = git("cat-file", "-e", commit + "^{commit}")
        if rc != 0:
            _fresh[commit] = "unknown commit"
        else:
            rc, _ = git("diff", "--quiet", commit, "--", *DRIVER)
            _fresh[commit] = None if rc == 0 else "driver changed since"
    return _fresh[commit]


def cell(row, step):
    ok = row["result"] == "ok"
    detail = f", {row['detail']}" if row["detail"] and step in ("subset", "suite") else ""
    commit = f"`{row['commit'][:7]}`" if row["commit"] not in ("", "-") else None
    tree = "dirty tree" if row["tree"] == "dirty" else None
    by = {"ci": "CI", "hand": "by hand"}.get(row["by"])
    where = ", ".join(filter(None, [commit, tree, by, row["date"]]))
    why = stale_reason(row)
    if why:
        return f"stale: {'ok' if ok else 'FAILED'}{detail} ({where}; {why})"
    mark = "yes" if ok else "**FAILED**"
    if row["scope"] == "partial":
        mark = "partial: " + ("ok" if ok else "**FAILED**")
    return f"{mark}{detail} ({where})"


def pick(whole, partial):
    """The result a cell shows: the whole run's, unless only the partial one is fresh."""
    if whole and (stale_reason(whole) is None or partial is None or stale_reason(partial)):
        return whole
    return partial


def table(rec):
    rows = matrix()
    head = ["kernel (`STOCK=`)", "release", "from", "rustc"] + [t for _, t in STEPS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        runs = r["runs"].split(",")
        get = lambda step: pick(rec.get((r["name"], step, "whole")),
                                rec.get((r["name"], step, "partial")))
        built = get("build")
        cells = [f"`{r['name']}`", f"`{r['krel']}`", f"{r['pkgs']} ({r['arch']})",
                 built["detail"].replace("rustc ", "") if built and built["detail"].startswith("rustc") else "?"]
        for step, _ in STEPS:
            res = get(step)
            if step not in runs and res is None:
                cells.append("–")
            elif res is None:
                cells.append("not run")
            else:
                cells.append(cell(res, step))
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
    if len(argv) > 1 and argv[1] == "--append":
        append(argv[2:])
        return
    if argv[1:] == ["--provenance"]:
        print(*provenance())
        return
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
            sys.exit("README's kernels table is not the one config/kernels.conf, "
                     "docs/kernels-results.tsv and the driver's history make (a row added, the "
                     "table edited, or a result made stale by a driver change): run `make "
                     "kernels-table`")
    elif "--print" in argv:
        print(table(rec), end="")
    elif "--print-results" in argv:
        rec.update(read_results(RESULTS))
        print(table(rec), end="")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
