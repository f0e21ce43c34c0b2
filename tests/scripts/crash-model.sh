#!/usr/bin/env bash
# Host-side check of the crash tests' model of what is durable when (tests/crash/model.py) and
# of their verdict (tests/crash/report.py): tests/crash/test_model.py.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
python3 tests/crash/test_model.py || fail "tests/crash/test_model.py"
exit "$failed"
