# shellcheck shell=bash
# Sourced by the host-side script tests (tests/scripts/*.sh; this file's name keeps it out of
# that glob): strict mode, the project root as the working directory, a scratch directory $tmp
# removed at exit, fail() recording a failure in $failed, and $py, the project's Python (its
# venv when set up, for matplotlib).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
py=python3
venv_py=${RUST_LOOP_CACHE:-$HOME/.cache/rust-loop}/venv/bin/python
if [ -x "$venv_py" ]; then py=$venv_py; fi
