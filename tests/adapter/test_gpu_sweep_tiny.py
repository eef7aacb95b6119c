"""experiments/gpu_sweep.sh end to end at toy size on CPU (TINY=1): ~4 minutes, so marked slow.

.venv/bin/python -m pytest -m slow tests/adapter/test_gpu_sweep_tiny.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.vllm
def test_gpu_sweep_script_runs_end_to_end_at_tiny_size(vllm_cpu, tmp_path):
    out = tmp_path / "gpu"
    env = {**os.environ, "TINY": "1", "PYTHON": sys.executable}
    run = subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_sweep.sh"), str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    got = {(p["policy"], p["concurrency"]) for p in report["points"]}
    assert got == {(p, c) for p in ("nospec", "fixed:1", "bandit", "bandit@v1") for c in (1, 4)}
    assert all(p["completed"] > 0 and p["throughput_tok_s"] > 0 for p in report["points"])
    assert report["checks"] and (out / "throughput.png").exists()
    # the V1 twin really ran on V1: its server was told so (on CPU both run without graphs)
    v1_log = (out / "runs" / "bandit@v1" / "server.log").read_text()
    assert "banditk: server mode V1 NONE" in v1_log
