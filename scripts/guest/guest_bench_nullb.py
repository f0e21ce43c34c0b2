# SPDX-License-Identifier: GPL-2.0
"""guest-bench.py loaded as a module (`gb`), set up for one memory-backed null_blk backing of
256 MiB unless the environment says otherwise: the set-up, drivers and fio job files of the
bench, for the guest scripts that run one driver at a time (guest-profile.py, guest-split.py)."""

import importlib.util
import os

os.environ.setdefault("BENCH_BACKINGS", "nullb")
os.environ.setdefault("BENCH_FILE_MB", "256")
_spec = importlib.util.spec_from_file_location(
    "guest_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest-bench.py"))
gb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gb)
