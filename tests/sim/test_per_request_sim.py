"""Per-request verification in the simulator: population mixtures, allotments, the cost of a
verified draft, vLLM's adaptive verification as a peer, and the per-request governor."""

import math

import numpy as np
import pytest

from banditk.core.server_mode import FULL
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.sim.acceptance import draw_mixture_acceptance, draw_request_acceptance, sample_accepted
from banditk.sim.adaptive_verification import AdaptiveVerificationPeer
from banditk.sim.engine import SimulationError, Simulator, StepView
from banditk.sim.policies import build_policy
from banditk.sim.run import run_policy
from banditk.sim.scenario import ScenarioError, parse_scenario
from banditk.sim.step_time import StepCostModel

POPS = [
    {"name": "code", "weight": 1, "acceptance": [0.95, 0.9]},
    {"name": "chat", "weight": 3, "acceptance": [0.5, 0.3]},
]


@pytest.fixture
def mix_dict(base_dict):
    del base_dict["drafter"]["acceptance"]
    base_dict["drafter"]["populations"] = [dict(p) for p in POPS]
    return base_dict


# ---- scenario files ------------------------------------------------------------------------------


def test_populations_are_normalised_and_summarised_by_their_mean(mix_dict):
    s = parse_scenario(mix_dict)
    assert [(p.name, p.weight, p.request_dispersion) for p in s.populations] == [
        ("code", 0.25, 20.0),
        ("chat", 0.75, 20.0),
    ]
    assert s.acceptance == pytest.approx([0.25 * 0.95 + 0.75 * 0.5, 0.25 * 0.9 + 0.75 * 0.3])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d["drafter"].__setitem__("acceptance", [0.8, 0.6]), r"`drafter.acceptance`=\[0.8, 0.6\] must be left out"),
        (lambda d: d["drafter"]["populations"][1].__setitem__("weight", 0), r"`drafter.populations\[1\].weight`=0 must be > 0"),
        (lambda d: d["drafter"]["populations"][0].__setitem__("weight", "a lot"), r"`drafter.populations\[0\].weight`='a lot'"),
        (lambda d: d["drafter"]["populations"][0].__setitem__("acceptance", [0.9]), r"`drafter.populations\[0\].acceptance`=\[0.9\] must have k_max=2"),
        (lambda d: d["drafter"]["populations"][1].__setitem__("name", "code"), r"`drafter.populations\[1\].name`='code' must be .* unique"),
        (lambda d: d["drafter"]["populations"][1].__setitem__("share", 2), r"`drafter.populations\[1\].share`=2 is not a known field"),
        (lambda d: d["drafter"].__setitem__("populations", []), r"`drafter.populations`=\[\] must be a non-empty list"),
        (lambda d: d.__setitem__("phases", [{"at_step": 5, "drafter": {"acceptance": [0.5, 0.5]}}]),
         r"`phases\[0\].drafter.acceptance`=\[0.5, 0.5\] cannot change a mixture scenario's requests"),
    ],
)  # fmt: skip
def test_bad_populations_name_the_field_and_the_value(mix_dict, mutate, match):
    mutate(mix_dict)
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(mix_dict)


def test_a_phase_may_bring_a_mixture_to_a_one_population_scenario(base_dict):
    base_dict["phases"] = [{"at_step": 100, "drafter": {"populations": POPS}}]
    s = parse_scenario(base_dict)
    assert s.populations == [] and [p.name for p in s.phases[0].populations] == ["code", "chat"]
    base_dict["phases"].append({"at_step": 50, "drafter": {"request_dispersion": 5.0}})
    with pytest.raises(ScenarioError, match=r"`phases\[1\].drafter.request_dispersion`=5.0 cannot change"):
        parse_scenario(base_dict)


# ---- drawing requests and verifying them ----------------------------------------------------------


def test_a_mixture_admits_each_population_at_its_weight():
    mus = np.array([[0.95, 0.9], [0.5, 0.3]])
    a, which = draw_mixture_acceptance(
        np.array([0.25, 0.75]), mus, np.array([20.0, 20.0]), 20_000, np.random.default_rng(1)
    )
    assert abs(np.mean(which == 0) - 0.25) < 0.01
    for j in (0, 1):  # each request drew around its own population
        assert a[which == j].mean(axis=0) == pytest.approx(mus[j], abs=0.01)


def test_one_population_replays_the_draws_from_before_mixtures():
    mu = np.array([0.8, 0.6])
    old = draw_request_acceptance(mu, 20.0, 50, np.random.default_rng(7))
    new, which = draw_mixture_acceptance(np.ones(1), mu[None, :], np.array([20.0]), 50, np.random.default_rng(7))
    assert np.array_equal(old, new) and not which.any()


def test_allotted_verification_accepts_only_within_the_allotment():
    alpha = np.full((400, 4), 0.9)
    allotted = np.tile(np.arange(5), 80)
    got = sample_accepted(alpha, 4, np.random.default_rng(0), allotted)
    assert (got <= allotted).all() and (got[allotted == 4] == 4).mean() > 0.5
    # Verifying every draft is the draw without an allotment, number for number.
    full = sample_accepted(alpha, 4, np.random.default_rng(3), np.full(400, 4))
    assert np.array_equal(full, sample_accepted(alpha, 4, np.random.default_rng(3)))


@pytest.mark.parametrize("hardware, model", [("gb10", "qwen3.5-122b-a10b-int4"), ("h200", "qwen3.6-35b-a3b")])
@pytest.mark.parametrize("graph_mode", ["FULL", "PIECEWISE"])
def test_a_step_verifying_every_draft_costs_what_its_k_costs(hardware, model, graph_mode):
    from banditk.sim.hardware import get_hardware
    from banditk.sim.models import get_model

    cost = StepCostModel(get_hardware(hardware), get_model(model), "mtp", 4, graph_mode=graph_mode)
    for n_dec, n_sched, prefill in ((1, 1, 0), (24, 24, 0), (24, 26, 700), (200, 200, 0)):
        kv = cost.kv_read_bytes(np.full(n_dec, 900), n_dec)
        times = cost.times(n_dec, n_sched, prefill, kv)
        for k in range(5):
            verified = np.arange(n_dec * k + 1)
            vt = cost.verified_times(n_dec, n_sched, prefill, kv, k, verified)
            assert vt[-1] == pytest.approx(times[k], rel=1e-12)
            assert (np.diff(vt) >= -1e-15).all()  # a verified draft never makes the step faster
        # Drafting K and verifying none costs more than K = 0 by the drafter alone, whatever K.
        assert cost.verified_times(n_dec, n_sched, prefill, kv, 3, np.array([0]))[0] > times[0]


# ---- the engine with a policy that allots -----------------------------------------------------------


class FixedAllot:
    """K = 2 every step; verifies ``keep`` drafts of each request (all of them when None)."""

    name = "fixed-allot"

    def __init__(self, keep=None):
        self.keep, self.heard, self.outcomes, self.known = keep, [], [], []
        self._step = 0

    def select(self, ctx: StepContext) -> Decision:
        self._step += 1
        return Decision(k=2, bucket=-1, num_decoding=ctx.num_decoding, step_id=self._step)

    def allot(self, request_ids, drafted):
        self.last_ids = list(request_ids)
        return drafted.copy() if self.keep is None else self.keep(np.asarray(drafted))

    def on_verified(self, request_id, drafted, accepted):
        self.heard.append((request_id, drafted, accepted))

    def forget_finished(self, live_ids):
        self.known = list(live_ids)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        self.outcomes.append(outcome)


def test_verifying_every_draft_replays_the_run_without_allotments(scn):
    a = Simulator(scn, FixedAllot(), seed=2, dynamic=False)
    b = Simulator(scn, build_policy("fixed:2", scn).policy, seed=2, dynamic=False)
    ta, _ = a.run(300)
    tb, _ = b.run(300)
    for f in ("duration", "tokens", "verified", "k"):
        assert np.array_equal(getattr(ta, f), getattr(tb, f)), f
    # The same sum taken per request rather than per K: equal up to the order of the additions.
    assert np.allclose(ta.expected_tokens, tb.expected_tokens, rtol=1e-12, atol=0)


def test_cut_requests_are_reported_as_vllm_reports_them(scn):
    # Every other request verifies nothing, the others their first draft.
    pol = FixedAllot(keep=lambda d: (np.arange(d.size) % 2) * np.minimum(d, 1))
    sim = Simulator(scn, pol, seed=0, dynamic=False)
    tr, _ = sim.run(200)
    decided = tr.k >= 0
    assert (tr.verified[decided] == tr.n_dec[decided] // 2).all()
    last = pol.outcomes[-1]
    n_heard = int((last.drafted > 0).sum())
    # Verifications heard first, one per verifying request and at most its allotment; zero rows last.
    assert (last.drafted[:n_heard] == 1).all() and (last.drafted[n_heard:] == 0).all()
    assert (last.accepted <= last.drafted).all() and last.drafted.size == len(pol.last_ids)
    assert {r for r, _, _ in pol.heard[-n_heard:]} == set(pol.last_ids[1::2])
    assert set(pol.last_ids) <= set(pol.known)


def test_an_allotment_above_the_drafts_stops_the_run(scn):
    sim = Simulator(scn, FixedAllot(keep=lambda d: d + 1), seed=0, dynamic=False)
    with pytest.raises(SimulationError, match=r"allotted \[3, .*each must be in 0..2"):
        sim.run(50)


# ---- vLLM's adaptive verification -----------------------------------------------------------------


def test_the_peer_verifies_everything_when_verification_is_free_and_little_when_it_is_dear():
    alpha = np.array([[0.95, 0.9, 0.9], [0.3, 0.3, 0.3]])
    peer = AdaptiveVerificationPeer(k_max=3, confidence_noise=0.0)
    peer.step_view = StepView(alpha, lambda v: np.ones_like(np.asarray(v, dtype=float)), 2)
    assert peer.allot(["a", "b"], np.array([3, 3])).tolist() == [3, 3]
    # A verified draft at a fifth of the fixed step: worth it only where survival beats that price.
    peer.step_view = StepView(alpha, lambda v: 1.0 + 0.2 * np.asarray(v, dtype=float), 2)
    assert peer.allot(["a", "b"], np.array([3, 3])).tolist() == [3, 0]
    assert peer.select(StepContext(2, 3, "mtp")).k == 3


def test_the_peers_confidence_is_noisy_around_the_acceptance():
    peer = AdaptiveVerificationPeer(k_max=2, confidence_noise=1.0, seed=1)
    c = peer.confidences(np.full((5000, 2), 0.8))
    assert 0.70 < c.mean() < 0.80 and c.std() > 0.1  # logit noise pulls a high rate toward 1/2
    with pytest.raises(Exception, match=r"`confidence_noise` must be a finite number >= 0, got -1"):
        AdaptiveVerificationPeer(k_max=2, confidence_noise=-1)


def test_per_request_policies_run_in_their_servers_modes(mix_dict):
    mix_dict.update(hardware="h200", model="qwen3.6-35b-a3b")
    s = parse_scenario(mix_dict)
    b = build_policy("bandit-per-request", s)
    assert (b.server_mode, b.graph_mode, b.graph_ladders, b.dynamic) == ("MRv2 FULL", FULL, 3, True)
    p = build_policy("peer:vllm-adaptive-verification", s)
    assert (p.server_mode, p.graph_ladders, p.dynamic) == ("MRv2 FULL varlen", 1, False)
    with pytest.raises(Exception, match=r"only applies to a policy that changes K per step"):
        build_policy("peer:vllm-adaptive-verification@PIECEWISE", s)


# ---- the per-request governor in the loop ---------------------------------------------------------


@pytest.mark.slow
def test_the_per_request_governor_verifies_the_accepting_population_more(mix_dict):
    # H200 at C = 64: verification is a real share of the step, so drafts get cut.
    mix_dict.update(hardware="h200", model="qwen3.6-35b-a3b")
    mix_dict["workload"]["concurrency"] = 64
    s = parse_scenario(mix_dict)
    summ = run_policy(s, "bandit-per-request", steps=800, warmup=200).summary
    by = summ["verified_share_by_population"]
    assert summ["verified_share"] < 1.0
    assert by["code"] > by["chat"] + 0.1, by
    assert math.isclose(run_policy(s, "bandit", steps=200, warmup=50).summary["verified_share"], 1.0)


# ---- the experiment's checks -------------------------------------------------------------------


def _per_request_sim():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "experiments" / "per_request_sim.py"
    spec = importlib.util.spec_from_file_location("experiments_per_request_sim", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_half_and_half_mix_must_gain_from_c16_and_every_point_must_not_lose():
    exp = _per_request_sim()
    half = exp.HALF_AND_HALF
    # Below C=16 only the no-loss bar applies, on every scenario.
    assert [c["status"] for c in exp.point_checks(half, 4, 1.0)] == ["pass"]
    assert [c["status"] for c in exp.point_checks(half, 4, 0.985)] == ["fail"]
    # From C=16 on, the half-and-half mix must also gain 5%: 1.03x passes one bar and fails the other.
    assert [c["status"] for c in exp.point_checks(half, 16, 1.03)] == ["pass", "fail"]
    assert [c["status"] for c in exp.point_checks(half, 64, 1.06)] == ["pass", "pass"]
    # Another scenario at high concurrency is held to no loss only.
    assert [c["status"] for c in exp.point_checks("mtp-qwen3.6-h200", 64, 0.995)] == ["pass"]


def test_the_homogeneous_set_is_the_shipped_fixed_concurrency_scenarios():
    exp = _per_request_sim()
    homog = exp.homogeneous_scenarios()
    assert "mtp-qwen3.6-h200" in homog and "49548" in homog
    # Phased (drift) and open-loop (arrival rate) scenarios have no one concurrency to hold.
    assert "drift" not in homog and "open-loop-gb10" not in homog
    assert exp.HALF_AND_HALF in exp.scenarios()
