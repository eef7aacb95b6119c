"""vLLM's adaptive verification in the protocol: as a peer, and trimming inside the bandit's K
(``bandit+av``), on the scenarios where it runs (issue 48)."""

import math

import numpy as np
import pytest

from banditk.core.server_mode import FULL
from banditk.core.types import StepContext
from banditk.evaluation import PEERS
from banditk.sim.adaptive_verification import GOVERNED_SPEC, SPEC, GovernedAdaptiveVerification
from banditk.sim.engine import StepView
from banditk.sim.policies import build_policy, runs_adaptive_verification
from banditk.sim.protocol import AV_TARGETS, _av_comparison, default_policies
from banditk.sim.run import run_policy
from banditk.sim.scenario import parse_scenario


def gpu(base_dict, **drafter):
    base_dict.update(hardware="h200", model="qwen3.6-35b-a3b")
    base_dict["drafter"].update(drafter)
    return parse_scenario(base_dict)


def test_adaptive_verification_joins_the_peers_and_the_subjects_where_it_runs(base_dict):
    s = gpu(base_dict)
    pols = default_policies(s, None)
    assert runs_adaptive_verification(s) and SPEC in pols and GOVERNED_SPEC in pols
    assert SPEC in PEERS  # the protocol's peer checks cover it
    assert pols.index(SPEC) < pols.index("bandit") < pols.index(GOVERNED_SPEC) < pols.index("oracle")
    cpu = parse_scenario({**base_dict, "hardware": "cpu-2core", "model": "qwen3.5-122b-a10b-int4"})
    suffix = gpu(base_dict, **{"class": "suffix"})
    for s in (cpu, suffix):  # no FULL graphs; a drafter Model Runner V2 cannot serve
        assert not runs_adaptive_verification(s)
        assert SPEC not in default_policies(s, None) and GOVERNED_SPEC not in default_policies(s, None)


def test_bandit_av_is_the_governed_server_choosing_k_and_verifying_a_trimmed_budget(base_dict):
    s = gpu(base_dict)
    b = build_policy(GOVERNED_SPEC, s)
    assert isinstance(b.policy, GovernedAdaptiveVerification) and b.policy.name == GOVERNED_SPEC
    assert (b.server_mode, b.graph_mode, b.graph_ladders, b.dynamic) == ("MRv2 FULL", FULL, 3, True)
    ctx = StepContext(num_decoding=2, k_max=2, drafter_class="mtp")
    d = b.policy.select(ctx)
    assert 0 <= d.k <= 2 and d.bucket >= 0  # the bandit's decision, not the peer's (bucket -1)
    # The simulator hands the step view to the composite; the verifier trims inside the K drafted.
    view = StepView(np.array([[0.99, 0.99], [0.01, 0.01]]), lambda n: 1.0 + np.asarray(n, dtype=float), 2)
    b.policy.step_view = view
    assert b.policy.verifier.step_view is view
    out = b.policy.allot(["0", "1"], np.array([1, 1]))
    assert out.shape == (2,) and (out <= 1).all() and out[0] >= out[1]


@pytest.mark.slow
def test_bandit_av_cuts_drafts_in_the_loop_where_verification_costs(base_dict):
    base_dict["workload"]["concurrency"] = 64
    s = gpu(base_dict)
    summ = run_policy(s, GOVERNED_SPEC, steps=800, warmup=200).summary
    assert summ["verified_share"] < 1.0 and summ["server_mode"] == "MRv2 FULL"
    assert math.isclose(run_policy(s, "bandit", steps=200, warmup=50).summary["verified_share"], 1.0)


def stats(*values: float) -> dict:
    """A protocol point's metric: median over seeds and the values by seed."""
    return {"throughput_tok_s": {"median": float(np.median(values)), "values": list(values)}}


def test_the_av_comparison_gives_each_subjects_ratio_spread_geomean_and_targets():
    per_point = {
        "c1": {SPEC: stats(100.0, 90.0, 110.0), "bandit": stats(110.0, 99.0, 121.0), GOVERNED_SPEC: stats(99.0, 90.0, 100.0)},
        "c64": {SPEC: stats(400.0, 400.0, 400.0), "bandit": stats(380.0, 370.0, 390.0),
                GOVERNED_SPEC: stats(440.0, 440.0, 440.0)},
    }  # fmt: skip
    out = _av_comparison(per_point, ["bandit", GOVERNED_SPEC, "bandit+prior"])
    assert out["peer"] == SPEC and out["targets"] == AV_TARGETS
    bandit, both = out["subjects"]["bandit"], out["subjects"][GOVERNED_SPEC]
    assert bandit["vs_av"] == pytest.approx({"c1": 1.1, "c64": 0.95})
    assert bandit["vs_av_by_seed"]["c1"] == pytest.approx([1.1, 1.1])  # paired seed by seed
    assert bandit["vs_av_by_seed"]["c64"] == pytest.approx([0.925, 0.975])
    assert bandit["geomean"] == pytest.approx(math.sqrt(1.1 * 0.95))
    assert (bandit["worst_at"], bandit["meets_each_point"], bandit["meets_geomean"]) == ("c64", False, False)
    assert both["worst"] == pytest.approx(0.99) and both["meets_each_point"]
    assert both["meets_geomean"] == (math.sqrt(0.99 * 1.1) >= 1.03)
    assert "bandit+prior" not in out["subjects"]  # not run: no row, not a zero
    assert _av_comparison({"c1": {"bandit": stats(1.0)}}, ["bandit"]) == {}
