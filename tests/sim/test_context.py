"""Per-request prompt lengths, the batch's context in StepContext, and #49986's sign flip."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from banditk.core.types import Decision
from banditk.sim.engine import DECODE, Simulator
from banditk.sim.policies import build_policy
from banditk.sim.run import run_policy
from banditk.sim.scenario import (
    ScenarioError,
    draw_prompt_tokens,
    load_scenario,
    parse_prompt_tokens,
    parse_scenario,
)

GEMMA = Path(__file__).resolve().parents[2] / "experiments" / "scenarios" / "gemma4-h100nvl-49986.json"
MIX = {"mix": [[400, 3], [4000, 1]]}


def _with_prompt(base_dict, prompt, **wl):
    d = copy.deepcopy(base_dict)
    d["workload"]["prompt_tokens"] = prompt
    d["workload"].update(wl)
    return d


def _sim(scn, spec="fixed:2", seed=0, policy=None):
    b = build_policy(spec, scn, seed=seed)
    return Simulator(
        scn,
        policy or b.policy,
        seed=seed,
        speculation=b.speculation,
        dynamic=b.dynamic,
        graph_mode=b.graph_mode,
        graph_ladders=b.graph_ladders,
    )


# -- parsing --------------------------------------------------------------------------------
def test_parse_forms():
    assert parse_prompt_tokens(512) == 512
    assert parse_prompt_tokens(MIX) == {"mix": [[400, 0.75], [4000, 0.25]]}
    ln = parse_prompt_tokens({"lognormal": {"median": 900, "sigma": 0.8, "max": 8000, "min": 16}})
    assert ln == {"lognormal": {"median": 900, "sigma": 0.8, "max": 8000, "min": 16}}


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        (0, "`workload.prompt_tokens`=0"),
        (1.5, "`workload.prompt_tokens`=1.5"),
        ({"mix": []}, "`workload.prompt_tokens.mix`=[]"),
        ({"mix": [[400, 0]]}, "`workload.prompt_tokens.mix[0][1]`=0"),
        ({"mix": [[0, 1]]}, "`workload.prompt_tokens.mix[0][0]`=0"),
        ({"mix": [[400]]}, "`workload.prompt_tokens.mix[0]`=[400]"),
        ({"mix": [[400, -1.0]]}, "must be a weight > 0"),
        ({"uniform": [1, 2]}, "`workload.prompt_tokens`={'uniform'"),
        ({"mix": [[400, 1]], "lognormal": {}}, "must be an integer"),
        ({"lognormal": {"median": 900, "sigma": 0.5}}, "`workload.prompt_tokens.lognormal.max`"),
        ({"lognormal": {"median": 9000, "sigma": 0.5, "max": 8000}}, "`workload.prompt_tokens.lognormal.median`=9000"),
        ({"lognormal": {"median": 900, "sigma": -1, "max": 8000}}, "`workload.prompt_tokens.lognormal.sigma`=-1"),
        ({"lognormal": {"median": 900, "sigma": 1, "max": 8000, "mu": 3}}, "`workload.prompt_tokens.lognormal.mu`=3"),
        ({"lognormal": {"median": 900, "sigma": 1, "max": 800, "min": 1000}}, "`workload.prompt_tokens.lognormal.min`"),
    ],
)
def test_parse_errors_name_field_and_value(base_dict, prompt, needle):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(_with_prompt(base_dict, prompt))
    assert needle in str(e.value)


def test_phase_prompt_error_names_the_phase(base_dict):
    base_dict["phases"] = [{"at_step": 10, "workload": {"prompt_tokens": {"mix": [[5, 0]]}}}]
    with pytest.raises(ScenarioError, match=r"`phases\[0\]\.workload\.prompt_tokens\.mix\[0\]\[1\]`=0"):
        parse_scenario(base_dict)


def test_context_limit_and_prefix_checked(base_dict):
    with pytest.raises(ScenarioError, match="max_model_len=1000"):
        parse_scenario(_with_prompt(base_dict, {"mix": [[400, 1], [900, 1]]}, max_model_len=1000))
    parse_scenario(_with_prompt(base_dict, {"mix": [[400, 1], [820, 1]]}, max_model_len=1000))
    with pytest.raises(ScenarioError, match=r"`workload.prefix_cached_tokens`=400"):
        parse_scenario(_with_prompt(base_dict, MIX, prefix_cached_tokens=400))
    d = json.loads(GEMMA.read_text())
    d["workload"]["prompt_tokens"] = 262144  # Gemma 4 31B's own limit, with 100 output tokens on top
    with pytest.raises(ScenarioError, match="max_model_len=262144"):
        parse_scenario(d)


def test_kv_cache_must_hold_the_longest_request(base_dict):
    scn = parse_scenario(_with_prompt(base_dict, MIX, kv_capacity_tokens=3000))
    with pytest.raises(ScenarioError, match="kv_capacity_tokens"):
        _sim(scn)


def test_long_context_up_to_the_model_limit_runs():
    d = json.loads(GEMMA.read_text())
    d["workload"].update(concurrency=2, prompt_tokens=200_000, prefix_cached_tokens=199_000, output_tokens=64)
    scn = parse_scenario(d)
    sim = _sim(scn, "fixed:3")
    tr, done = sim.run(150)
    assert len(done.out) >= 2 and tr.tokens.sum() > 0


# -- drawing ----------------------------------------------------------------------------------
def test_draws_deterministic_and_match_weights():
    spec = parse_prompt_tokens(MIX)
    a = draw_prompt_tokens(spec, 4000, np.random.default_rng(7))
    b = draw_prompt_tokens(spec, 4000, np.random.default_rng(7))
    assert np.array_equal(a, b)
    assert set(np.unique(a)) == {400, 4000}
    assert abs(np.mean(a == 400) - 0.75) < 0.03
    ln = parse_prompt_tokens({"lognormal": {"median": 1000, "sigma": 1.0, "max": 5000, "min": 50}})
    x = draw_prompt_tokens(ln, 20000, np.random.default_rng(1))
    assert x.min() >= 50 and x.max() <= 5000 and abs(np.median(x) - 1000) < 50
    assert np.mean(x == 5000) > 0.03  # the tail is clipped at max


def test_engine_prompts_differ_match_weights_and_replay(base_dict):
    scn = parse_scenario(_with_prompt(base_dict, MIX, concurrency=16))
    prompts = []
    for _ in range(2):
        sim = _sim(scn, seed=3)
        seen = []
        orig = sim._admit_new

        def admit(slots, arrivals, sim=sim, seen=seen, orig=orig):
            orig(slots, arrivals)
            seen.extend(sim.prompt[slots].tolist())

        sim._admit_new = admit
        sim.run(1500)
        prompts.append(seen)
    assert prompts[0] == prompts[1]  # same seed, same draws
    p = np.array(prompts[0])
    assert len(p) > 200 and set(np.unique(p)) == {400, 4000}
    assert abs(np.mean(p == 400) - 0.75) < 0.07
    other = _sim(scn, seed=4)
    other.run(200)
    assert not np.array_equal(other.prompt, _run_prompts(scn, 3, 200))


def _run_prompts(scn, seed, steps):
    sim = _sim(scn, seed=seed)
    sim.run(steps)
    return sim.prompt


def test_int_prompt_draws_nothing(base_dict):
    """An integer prompt_tokens consumes no random numbers: the run is the one it always was."""
    scn = parse_scenario(base_dict)
    a = _sim(scn, seed=2)
    ta, _ = a.run(300)
    b = _sim(parse_scenario(_with_prompt(base_dict, {"mix": [[512, 1]]})), seed=2)
    tb, _ = b.run(300)
    assert not np.array_equal(ta.duration, tb.duration)  # the one-point mix draws; the int does not
    assert (a.prompt[a.state != 0] == 512).all()


# -- the batch's context ------------------------------------------------------------------------
class Recorder:
    """Plays fixed K and records each StepContext with the engine's own decoding contexts."""

    name = "recorder"

    def __init__(self, sim_ref):
        self.sim_ref = sim_ref
        self.rows = []

    def select(self, ctx):
        sim = self.sim_ref[0]
        dec = np.flatnonzero(sim.state == DECODE)
        self.rows.append((ctx.context_tokens, int((sim.prompt[dec] + sim.gen[dec]).sum()), ctx.num_decoding))
        return Decision(k=1, bucket=-1, num_decoding=ctx.num_decoding, step_id=len(self.rows))

    def observe(self, decision, outcome):
        pass


def test_context_tokens_is_the_sum_of_decoding_contexts(base_dict):
    scn = parse_scenario(_with_prompt(base_dict, MIX, concurrency=12))
    ref = []
    rec = Recorder(ref)
    sim = Simulator(scn, rec, seed=1)
    ref.append(sim)
    sim.run(800)
    assert len(rec.rows) > 500
    ctx = np.array([r[0] for r in rec.rows])
    truth = np.array([r[1] for r in rec.rows])
    assert np.array_equal(ctx, truth)
    assert len(np.unique(ctx)) > 50 and ctx.max() > 4000


# -- #49986 -------------------------------------------------------------------------------------
def test_gemma_h100nvl_fixed3_sign_flips_with_context():
    scn = load_scenario(GEMMA)
    ratio = {}
    for c in (400, 4000):
        s = scn.with_workload(prompt_tokens=c, prefix_cached_tokens=c - 96)
        t = {
            p: run_policy(s, p, seed=0, steps=500, warmup=150).summary["throughput_tok_s"]
            for p in ("nospec", "fixed:3")
        }
        ratio[c] = t["fixed:3"] / t["nospec"]
    assert ratio[400] < 0.9 and ratio[4000] > 1.03


def test_a_phase_that_changes_the_prefix_leaves_admitted_requests_theirs():
    # Long prefix-cached prompts, then short ones: the long requests still in flight keep their
    # shared prefix held once. With one prefix for the whole run they counted their whole
    # context against the KV cache after the switch and were preempted without end.
    d = {"prompt_tokens": 400, "prefix_cached_tokens": 304}
    raw = json.loads(GEMMA.read_text())
    raw["workload"].update(concurrency=256, prompt_tokens=16000, prefix_cached_tokens=15904)
    raw["phases"] = [{"at_step": 400, "workload": d}]
    raw["steps"] = 900
    scn = parse_scenario(raw)
    res = run_policy(scn, "fixed:1", seed=0, steps=900, warmup=0, keep_trace=True)
    after = slice(500, 900)
    assert res.trace.preemptions[after].sum() == 0
    assert res.trace.n_dec[after].mean() > 0.9 * 256
