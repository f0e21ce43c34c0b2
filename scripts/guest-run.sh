#!/usr/bin/env bash
# The guest half of scripts/run.sh (runs inside the VM as root).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$ROOT/results/run
mkdir -p "$out"
echo "== kernel: $(uname -r)"
insmod "$ROOT/rust_loop.ko"
echo "== module: rust_loop loaded"
modinfo "$ROOT/rust_loop.ko" | grep -E '^(name|description|license|parm|alias)' || true
grep -H . /sys/module/rust_loop/parameters/* 2>/dev/null || true
rmmod rust_loop
echo "== module: rust_loop unloaded"
