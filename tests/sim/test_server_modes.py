"""Each policy runs in its own server's graph mode (issue 15, item 4).

The mode per policy and hardware, the ``@FULL`` / ``@PIECEWISE`` suffix and its errors, the KV
cache the graph ladders take, what PIECEWISE costs, the summary's mode, and the protocol's
mode twins (informational, never checked) down to the README's sweep table.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from banditk.core.errors import ConfigError, IncompatiblePriorError
from banditk.sim.cli import main
from banditk.sim.engine import capture_kv_tokens, default_kv_capacity
from banditk.sim.hardware import HARDWARE, get_hardware
from banditk.sim.models import get_model
from banditk.sim.policies import build_policy, split_mode
from banditk.sim.protocol import ProtocolConfig, default_policies, mode_twins, run_protocol
from banditk.sim.report import print_checks
from banditk.sim.run import run_policy
from banditk.sim.scenario import ScenarioError, load_scenario, parse_scenario
from banditk.sim.step_time import StepCostModel

from .simulate import simulator_for

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "experiments" / "scenarios"
GIB = 2**30


_sim = simulator_for


# ---- the mode of each policy, per hardware -----------------------------------------------------

# gb10, K_max = 2, the scenario's table [[1,4,2],[5,512,0]] (conftest.BASE).
GPU_MODES = {
    "nospec": ("FULL", 1, "nospec FULL"),
    "fixed:2": ("FULL", 1, "static FULL"),
    "fixed:0": ("FULL", 1, "static FULL"),
    "bandit": ("FULL", 3, "MRv2 FULL"),
    "bandit+prior": ("FULL", 3, "MRv2 FULL"),
    "bandit+context": ("FULL", 3, "MRv2 FULL"),
    "ucb": ("FULL", 3, "MRv2 FULL"),
    "oracle": ("FULL", 3, "MRv2 FULL"),
    "table": ("PIECEWISE", 0, "V1 PIECEWISE"),
    "table-ctx:[[1,64,0,768,2],[1,64,769,32768,1],[65,512,0]]": ("PIECEWISE", 0, "V1 PIECEWISE"),
    "peer:sglang": ("FULL", 2, "SGLang FULL"),
    "peer:vllm-adaptive-k": ("PIECEWISE", 0, "V1 PIECEWISE"),
    "bandit@PIECEWISE": ("PIECEWISE", 0, "V1 PIECEWISE"),
    "bandit+prior@PIECEWISE": ("PIECEWISE", 0, "V1 PIECEWISE"),
    "bandit@FULL": ("FULL", 3, "MRv2 FULL"),
    "table@FULL": ("FULL", 2, "MRv2 FULL"),  # K 2 and 0: one ladder each
    "table:[[1,512,1]]@FULL": ("FULL", 1, "MRv2 FULL"),
    "peer:sglang@PIECEWISE": ("PIECEWISE", 0, "SGLang PIECEWISE"),
    "peer:vllm-adaptive-k@FULL": ("FULL", 3, "MRv2 FULL"),
}


@pytest.mark.parametrize(("spec", "expected"), sorted(GPU_MODES.items()))
def test_mode_of_every_policy_on_a_gpu_profile(scn, spec, expected):
    b = build_policy(spec, scn)
    assert (b.graph_mode, b.graph_ladders, b.server_mode) == expected


def test_governed_policies_follow_the_scenario_s_table_mode_only_where_vllm_s_own(base_dict):
    base_dict["dynamic_cudagraph"] = "FULL"
    s = parse_scenario(base_dict)
    assert build_policy("table", s).server_mode == "MRv2 FULL"
    assert build_policy("peer:vllm-adaptive-k", s).graph_ladders == 3
    # The governed servers and the static ones do not read `dynamic_cudagraph`.
    for spec in ("bandit", "ucb", "oracle", "fixed:2", "peer:sglang"):
        assert build_policy(spec, s).server_mode == GPU_MODES[spec][2], spec


@pytest.mark.parametrize("hw", sorted(h for h in HARDWARE if HARDWARE[h].cuda_graphs))
def test_ladders_are_k_max_plus_one_on_every_graph_profile(scn, hw):
    s = copy.deepcopy(scn)
    s.hardware = hw
    b = build_policy("bandit", s)
    assert (b.server_mode, b.graph_ladders) == ("MRv2 FULL", s.k_max + 1)
    assert get_hardware(hw).graph_ladder_gib > 0
    assert get_hardware(hw).sources["graph_ladder_gib"].startswith("assumed")


def test_no_graphs_on_cpu_every_mode_is_none():
    s = load_scenario(SCENARIOS / "draft-model-cpu.json")
    assert not get_hardware(s.hardware).cuda_graphs
    for spec in ("nospec", "fixed:1", "bandit", "bandit@PIECEWISE", "bandit@FULL", "table", "peer:sglang", "oracle"):
        b = build_policy(spec, s)
        assert b.graph_mode == "NONE" and b.graph_ladders == 0, spec
        assert b.server_mode.endswith(" NONE"), (spec, b.server_mode)
    assert build_policy("bandit", s).server_mode == "V1 NONE"
    assert build_policy("fixed:1", s).server_mode == "static NONE"


def test_a_drafter_mrv2_cannot_serve_keeps_the_governed_server_on_v1():
    s = load_scenario(SCENARIOS / "suffix-glm5.2-8xh200.json")
    assert build_policy("bandit", s).server_mode == "V1 PIECEWISE"
    assert build_policy("bandit", s).graph_ladders == 0
    # Forced FULL is the hypothetical MRv2 server, with its ladders.
    assert (build_policy("bandit@FULL", s).server_mode, build_policy("bandit@FULL", s).graph_ladders) == (
        "MRv2 FULL",
        s.k_max + 1,
    )


# ---- the suffix ----------------------------------------------------------------------------------


def test_split_mode():
    assert split_mode("bandit") == ("bandit", None)
    assert split_mode("bandit+prior@PIECEWISE") == ("bandit+prior", "PIECEWISE")
    assert split_mode("table:[[1,4,2],[5,512,0]]@FULL") == ("table:[[1,4,2],[5,512,0]]", "FULL")


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("bandit@full", r"`--policy`='bandit@full': the mode suffix '@full' must be one of @FULL, @PIECEWISE"),
        ("bandit@NONE", r"`--policy`='bandit@NONE': the mode suffix '@NONE'"),
        ("bandit@", r"`--policy`='bandit@': the mode suffix '@'"),
        ("fixed:2@PIECEWISE", r"`--policy`='fixed:2@PIECEWISE': 'fixed:2' runs a static server"),
        ("nospec@FULL", r"`--policy`='nospec@FULL': 'nospec' runs a static server"),
        ("@FULL", r"`--policy`='@FULL' names no policy"),
    ],
)
def test_bad_suffix_is_a_config_error_naming_policy_and_value(scn, spec, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        build_policy(spec, scn)


def test_sim_cli_refuses_a_bad_suffix(capsys):
    rc = main(["sim", "--scenario", str(SCENARIOS / "49548.json"), "--policy", "bandit@FLAT", "--steps", "10"])
    assert rc == 2
    assert "`--policy`='bandit@FLAT'" in capsys.readouterr().err


def test_suffixed_policy_keeps_its_name(scn):
    b = build_policy("bandit@PIECEWISE", scn)
    assert b.spec == b.policy.name == "bandit@PIECEWISE"
    assert build_policy("table@FULL", scn).spec == "table:[[1,4,2],[5,512,0]]@FULL"


# ---- graph-capture memory against the KV cache --------------------------------------------------


def _expected_lost(scn, ladders):
    """(ladders - 1) x graph_ladder_gib over the model's KV bytes per token, by hand."""
    m = get_model(scn.model)
    assert not m.swa_kv_bytes_per_token  # the by-hand figure below has no sliding-window share
    return math.ceil((ladders - 1) * get_hardware(scn.hardware).graph_ladder_gib * GIB / m.kv_bytes_per_token)


def test_capture_memory_lowers_the_default_capacity(scn):
    base = default_kv_capacity(scn)
    lost = _expected_lost(scn, 3)
    assert lost == math.ceil(2 * 0.5 * GIB / 24576)  # gb10, qwen3.5-122b: 0.5 GiB a ladder, 24 KiB a token
    assert capture_kv_tokens(scn, 3) == lost
    sim = _sim(scn, "bandit")
    assert sim.kv_cap == base - lost and sim.graph_kv_tokens == lost and not sim.graph_kv_clipped
    for spec in ("fixed:2", "nospec", "table", "bandit@PIECEWISE"):  # one ladder or none: nothing taken
        s = _sim(scn, spec)
        assert s.kv_cap == base and s.graph_kv_tokens == 0, spec
    assert _sim(scn, "peer:sglang").kv_cap == base - _expected_lost(scn, 2)


def test_capture_memory_lowers_a_capacity_set_in_the_scenario(base_dict):
    base_dict["workload"]["kv_capacity_tokens"] = 200_000
    s = parse_scenario(base_dict)
    lost = _expected_lost(s, 3)
    assert _sim(s, "bandit").kv_cap == 200_000 - lost
    assert _sim(s, "fixed:2").kv_cap == 200_000


def test_sliding_window_layers_count_at_their_window():
    s = load_scenario(SCENARIOS / "gemma4-h100nvl-49986.json")
    m = get_model(s.model)
    assert m.swa_kv_bytes_per_token > 0
    req = s.workload["prompt_tokens"] + s.workload["output_tokens"]
    per_token = m.kv_bytes_per_token + m.swa_kv_bytes_per_token * min(1.0, m.swa_window / req)
    assert capture_kv_tokens(s, 4) == math.ceil(3 * 0.5 * GIB / per_token)


def test_capacity_that_fits_without_ladders_is_clipped_not_refused(base_dict):
    s = parse_scenario(base_dict)
    lost = capture_kv_tokens(s, 3)
    need = 512 + 180 + 1 + 2  # the longest request with its K_max lookahead
    base_dict["workload"]["kv_capacity_tokens"] = lost + 300  # fits alone, not after the ladders
    s = parse_scenario(base_dict)
    sim = _sim(s, "bandit")
    assert sim.kv_cap == need and sim.graph_kv_clipped and sim.graph_kv_tokens == lost + 300 - need
    summ = run_policy(s, "bandit", steps=60, warmup=10).summary
    assert summ["graph_kv_clipped"] is True and summ["kv_capacity_tokens"] == need
    base_dict["workload"]["kv_capacity_tokens"] = lost  # the ladders take all of it
    s = parse_scenario(base_dict)
    with pytest.raises(ScenarioError, match=r"3 FULL decode graph ladders .* `graph_ladder_gib`=0.5 .* whole KV cache"):
        _sim(s, "bandit")
    assert _sim(s, "bandit@PIECEWISE").kv_cap == lost  # no ladders beyond one: runs as before


def _scenario_files():
    return sorted(SCENARIOS.glob("*.json")) + sorted((SCENARIOS / "context").glob("*.json"))


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_every_shipped_scenario_still_fits_every_policy(path):
    s = load_scenario(path)
    pols = default_policies(s, None)
    for spec in pols + mode_twins(s, pols):
        try:
            sim = _sim(s, spec)
        except IncompatiblePriorError:  # a shipped prior below K_max: the sweep reports it for that policy
            assert spec.startswith("bandit+prior")
            continue
        assert not sim.graph_kv_clipped, spec
        assert sim.graph_kv_tokens < 0.1 * (sim.kv_cap + sim.graph_kv_tokens), spec


# ---- what the mode costs -------------------------------------------------------------------------


def test_piecewise_step_costs_more_on_gpu_and_the_same_on_cpu():
    m = get_model("qwen3.5-122b-a10b-int4")
    for hw_name, more in (("gb10", True), ("cpu-2core", False)):
        hw = get_hardware(hw_name)
        full = StepCostModel(hw, m, "mtp", 2, graph_mode="FULL")
        pw = StepCostModel(hw, m, "mtp", 2, graph_mode="PIECEWISE")
        none = StepCostModel(hw, m, "mtp", 2, graph_mode="NONE")
        t_full, t_pw = full.times(8, 8, 0, 1e9), pw.times(8, 8, 0, 1e9)
        assert np.array_equal(none.times(8, 8, 0, 1e9), t_full)
        if more:  # the target forward and at least one drafter forward pay per layer
            assert np.all(t_pw - t_full >= m.n_layers * hw.piecewise_launch_s - 1e-12)
        else:
            assert np.array_equal(t_pw, t_full)
        # A mixed prefill/decode step is piecewise in every mode.
        assert np.array_equal(full.times(8, 9, 100, 1e9), pw.times(8, 9, 100, 1e9))
    with pytest.raises(ValueError, match="graph_mode"):
        StepCostModel(get_hardware("gb10"), m, "mtp", 2, graph_mode="EAGER")


def test_piecewise_governed_run_is_slower_on_gpu(scn):
    full = run_policy(scn, "bandit", seed=0, steps=800, warmup=200).summary
    pw = run_policy(scn, "bandit@PIECEWISE", seed=0, steps=800, warmup=200).summary
    assert full["throughput_tok_s"] > 1.05 * pw["throughput_tok_s"]
    # Same K every step: the gap is the mode alone.
    f = run_policy(scn, "table:[[1,512,2]]@FULL", seed=0, steps=600, warmup=100).summary
    p = run_policy(scn, "table:[[1,512,2]]@PIECEWISE", seed=0, steps=600, warmup=100).summary
    assert f["mean_k"] == p["mean_k"] == 2.0
    assert f["throughput_tok_s"] > 1.05 * p["throughput_tok_s"]


def test_piecewise_governed_run_is_identical_on_cpu():
    s = load_scenario(SCENARIOS / "draft-model-cpu.json").with_workload(concurrency=4)
    a = run_policy(s, "bandit", seed=0, steps=300, warmup=50, keep_trace=True)
    b = run_policy(s, "bandit@PIECEWISE", seed=0, steps=300, warmup=50, keep_trace=True)
    assert np.array_equal(a.trace.duration, b.trace.duration) and np.array_equal(a.trace.k, b.trace.k)
    assert a.summary["throughput_tok_s"] == b.summary["throughput_tok_s"]


# ---- the summary ---------------------------------------------------------------------------------


def test_summary_says_the_mode(scn):
    lost = capture_kv_tokens(scn, 3)
    expected = {
        "nospec": ("nospec FULL", "FULL", 1, 0),
        "fixed:2": ("static FULL", "FULL", 1, 0),
        "bandit": ("MRv2 FULL", "FULL", 3, lost),
        "bandit@PIECEWISE": ("V1 PIECEWISE", "PIECEWISE", 0, 0),
        "table": ("V1 PIECEWISE", "PIECEWISE", 0, 0),
    }
    for spec, want in expected.items():
        s = run_policy(scn, spec, steps=40, warmup=5).summary
        assert (s["server_mode"], s["graph_mode"], s["graph_ladders"], s["graph_kv_tokens"]) == want, spec
        assert s["policy"] == spec
        assert s["kv_capacity_tokens"] == default_kv_capacity(scn) - want[3]


def test_sim_cli_report_has_the_mode(tmp_path):
    out = tmp_path / "r.json"
    args = ["sim", "--scenario", str(SCENARIOS / "49548.json"), "--policy", "bandit@PIECEWISE", "--steps", "50"]
    assert main([*args, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["policy"] == "bandit@PIECEWISE" and r["server_mode"] == "V1 PIECEWISE" and r["graph_ladders"] == 0


# ---- the protocol's mode twins -------------------------------------------------------------------


def test_twins_only_where_the_governed_server_runs_full(scn):
    assert mode_twins(scn, ["fixed:1", "bandit", "bandit+prior", "ucb", "oracle"]) == [
        "bandit@PIECEWISE",
        "bandit+prior@PIECEWISE",
    ]
    assert mode_twins(scn, ["bandit", "bandit@PIECEWISE"]) == []  # named already
    cpu = load_scenario(SCENARIOS / "draft-model-cpu.json")
    assert mode_twins(cpu, ["bandit", "bandit+prior"]) == []  # no graphs
    suffix = load_scenario(SCENARIOS / "suffix-glm5.2-8xh200.json")
    assert mode_twins(suffix, ["bandit"]) == []  # PIECEWISE already


def _tiny_cfg(**kw):
    base = dict(
        points=(1,),
        warmup=20,
        measured=120,
        regret_steps=150,
        convergence_levels=(2, 4),
        convergence_phase_steps=80,
        workers=1,
        include_49548_shape=False,
        policies=("nospec", "fixed:1", "fixed:2", "bandit"),
    )
    base.update(kw)
    return ProtocolConfig.quick_mode(**base)


def test_protocol_runs_the_twin_side_by_side_and_never_checks_it(scn):
    rep = run_protocol(scn, _tiny_cfg(), progress=False)
    pols = rep["protocol"]["policies"]
    assert pols == ["nospec", "fixed:1", "fixed:2", "bandit", "bandit@PIECEWISE"]
    assert rep["protocol"]["mode_twins"] == ["bandit@PIECEWISE"]
    assert "bandit@PIECEWISE" in rep["results"]["c1"]
    assert rep["server_modes"]["bandit"]["server_mode"] == "MRv2 FULL"
    assert rep["server_modes"]["bandit@PIECEWISE"]["server_mode"] == "V1 PIECEWISE"
    assert rep["server_modes"]["fixed:2"]["server_mode"] == "static FULL"
    assert rep["server_modes"]["bandit"]["graph_kv_tokens"]["c1"] > 0
    assert all(c["policy"] in ("bandit", "bandit+prior") for c in rep["checks"])
    assert not any("@" in str(c.get("note")) for c in rep["checks"])
    assert "bandit@PIECEWISE" not in rep["regret"] and "bandit@PIECEWISE" not in rep["convergence"]
    comp = rep["mode_comparison"]["bandit"]
    assert comp["informational"] and comp["twin"] == "bandit@PIECEWISE"
    assert comp["modes"] == {"bandit": "MRv2 FULL", "bandit@PIECEWISE": "V1 PIECEWISE"}
    row = comp["points"]["c1"]
    res = rep["results"]["c1"]
    best = max(res[f"fixed:{k}"]["throughput_tok_s"]["median"] for k in (1, 2))
    assert row["vs_best_fixed"]["bandit@PIECEWISE"] == pytest.approx(
        res["bandit@PIECEWISE"]["throughput_tok_s"]["median"] / best
    )
    assert row["vs_best_fixed"]["bandit"] > row["vs_best_fixed"]["bandit@PIECEWISE"]
    out = io.StringIO()
    print_checks(rep, out)
    text = out.getvalue()
    assert "bandit@PIECEWISE" in text and "V1 PIECEWISE" in text and "MRv2 FULL" in text
    assert "informational: no threshold applies to bandit@PIECEWISE" in text
    rep2 = run_protocol(scn, _tiny_cfg(mode_twins=False), progress=False)
    assert rep2["protocol"]["policies"] == ["nospec", "fixed:1", "fixed:2", "bandit"] and not rep2["mode_comparison"]


def test_twin_of_bandit_plus_prior_gets_the_prior(monkeypatch):
    from banditk.sim import protocol

    seen = {}

    def fake_run_policy(scn, spec, *, prior_path=None, **kw):
        seen[spec] = prior_path
        raise RuntimeError("stop here")

    monkeypatch.setattr(protocol, "run_policy", fake_run_policy)
    for spec in ("bandit@PIECEWISE", "bandit+prior@PIECEWISE"):
        protocol._job(("point", "c1", None, spec, 0, 10, 0, "priors/some.json"))
    assert seen == {"bandit@PIECEWISE": None, "bandit+prior@PIECEWISE": "priors/some.json"}


# ---- the README's sweep table --------------------------------------------------------------------


def _readme_results():
    spec = importlib.util.spec_from_file_location(
        "experiments_readme_results_modes", ROOT / "experiments" / "readme_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def m(x):
    return {"median": x, "min": x, "max": x, "values": [x]}


MODED = {
    "provenance": {"commit": "abcdef0123", "dirty": False},
    "server_modes": {"bandit": {"server_mode": "MRv2 FULL"}, "bandit@PIECEWISE": {"server_mode": "V1 PIECEWISE"}},
    "results": {
        "c1": {
            "fixed:1": {"throughput_tok_s": m(100.0)},
            "bandit": {"throughput_tok_s": m(98.0), "oscillations_per_1000": m(0.5)},
            "bandit@PIECEWISE": {"throughput_tok_s": m(86.0)},
        },
        "c8": {
            "fixed:1": {"throughput_tok_s": m(40.0)},
            "fixed:2": {"throughput_tok_s": m(80.0)},
            "bandit": {"throughput_tok_s": m(79.2), "oscillations_per_1000": m(1.0)},
            "bandit@PIECEWISE": {"throughput_tok_s": m(72.0)},
        },
    },
    "checks": [{"status": "pass"}],
    "regret": {"bandit": {"final": m(0.01)}},
}
OLD = {"results": {"c1": {"bandit": {"throughput_tok_s": m(10.0)}}}}


def test_readme_sweep_table_shows_the_mode_and_the_piecewise_twin():
    rr = _readme_results()
    text = rr.render_sweeps([("results/sweep-a/report.json", MODED), ("results/sweep-b/report.json", OLD)])
    lines = text.splitlines()
    assert (
        "| scenario | checks pass / fail | bandit mode | worst bandit / best fixed K "
        "| worst bandit on V1 PIECEWISE (vLLM 0.33 only) / best fixed K | max oscillations / 1k steps | regret flat / prior | commit |"
    ) in lines
    assert "| a | 1 / 0 | MRv2 FULL | 0.98x | 0.86x | 1.0 | 1.00% / - | `abcdef0` |" in lines
    assert "| b | 0 / 0 | - | - | - | - | - / - | no provenance |" in lines
    assert "informational, no check applies to it" in text
    # Reports without modes keep the table they had.
    old = rr.render_sweeps([("results/sweep-b/report.json", OLD)])
    assert "bandit mode" not in old and old.splitlines()[-1] == "| b | 0 / 0 | - | - | - / - | no provenance |"
