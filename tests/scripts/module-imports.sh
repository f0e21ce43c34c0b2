#!/usr/bin/env bash
# Host-side check of the crate's layering (docs/internals.md "Where the code is"): the driver
# modules of rust_loop/ import each other one way (no cycle), rust_loop/sys/ imports nothing from
# the driver, no `#[path]` attribute wires a module, and no driver file but the two listed below
# holds an `unsafe impl`. A module's imports are the driver modules its files name as `super::X`,
# `super::super::X` (from rust_loop/device/) or `crate::rust_loop::X`, comments left out.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

"$py" - <<'EOF' >"$tmp/report" || fail "$(cat "$tmp/report")"
import glob, os, re, sys

root = "rust_loop"
mods = sorted(os.path.basename(f)[:-3] for f in glob.glob(f"{root}/*.rs"))
if len(mods) < 10:
    print(f"found only {len(mods)} modules in {root}/")
    sys.exit(1)

def code(path):
    text = open(path).read()
    # Comments (doc comments included) name modules without importing them.
    return re.sub(r"//[^\n]*", "", text)

def files_of(mod):
    files = [f"{root}/{mod}.rs"]
    files += sorted(glob.glob(f"{root}/{mod}/**/*.rs", recursive=True))
    return files

names = "|".join(mods)
edges = {}
problems = []
for mod in mods:
    deps = set()
    for f in files_of(mod):
        src = code(f)
        if "#[path" in src:
            problems.append(f"{f}: a #[path] attribute")
        # `use super::{a::.., b::..}` blocks and single paths, from rust_loop/ and its subfolders.
        for block in re.findall(r"(?:super::)+\{(.*?)\};", src, re.S):
            deps.update(re.findall(rf"(?:^|[\s,{{]){{1}}({names})\b(?=::|,|\s*\}}|$)", block, re.M))
        deps.update(re.findall(rf"\b(?:super::)+({names})\b", src))
        deps.update(re.findall(rf"\bcrate::rust_loop::({names})\b", src))
        if mod != "sys" and re.search(r"\bunsafe\s+impl\b", src):
            # The driver's only ones: where the per-request data holds its work item and kiocb
            # (io.rs), and a worker claim's `Send` (cgroup_workers.rs: a counted pointer, not an
            # `Arc`, so that its drop never stops the thread it runs on).
            if f not in (f"{root}/io.rs", f"{root}/cgroup_workers.rs"):
                problems.append(f"{f}: an `unsafe impl` outside sys/")
    deps.discard(mod)
    edges[mod] = deps

for dep in sorted(edges["sys"]):
    problems.append(f"sys imports the driver module {dep}")

# Cycles: depth-first search over the import graph.
state = {}
def visit(m, path):
    state[m] = 1
    for d in sorted(edges.get(m, ())):
        if state.get(d) == 1:
            cyc = path[path.index(d):] + [d] if d in path else [m, d]
            problems.append("import cycle: " + " -> ".join(cyc))
        elif d not in state:
            visit(d, path + [d])
    state[m] = 2
for m in mods:
    if m not in state:
        visit(m, [m])

for m in mods:
    print(f"{m} -> {' '.join(sorted(edges[m])) or '-'}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
EOF
if [ "$failed" = 0 ]; then
	echo "ok: $(wc -l <"$tmp/report") modules, imports one way, sys/ independent of the driver"
	cat "$tmp/report"
fi
exit "$failed"
