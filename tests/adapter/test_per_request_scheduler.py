"""Per-request verification inside real vLLM on CPU (issue 16): exact output, allotments within
the drafts, vLLM's counters equal to what was verified, and the async scheduler's placeholders.

Each engine selects them as a user does, with ``"per_request": true`` in ``governor_config``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hand_scheduler import answer, async_scheduler

from banditk.testing.engines import greedy_chain, metrics_delta, spec_metrics, tiny_llm

pytestmark = pytest.mark.vllm


def prime(gov, k: int) -> None:
    """Make verification dear (10 ms a verified token against 1 ms fixed) and give the book 40
    finished requests, half accepting 90% of drafts and half 30%, so n0 is learnt from the start."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        b, kk = int(rng.integers(1, 9)), int(rng.integers(0, k + 1))
        v = int(rng.integers(0, b * kk + 1))
        gov.price.observe(b, v, kk, 0.001 + 0.01 * (b + v) + 0.001 * max(kk, 1))
    gov.price.refresh(np.zeros(4))
    for i in range(40):
        p = 0.9 if i % 2 else 0.3
        for _ in range(10):
            ok = rng.random(k) < p
            gov.on_verified(f"old{i}", k, int(np.cumprod(ok).sum()))
        gov.book.finish(f"old{i}")


def recorded(sch, is_low=lambda request: False):
    """Wrap ``sch``: per step, each drafting request's (is_low, drafts before the cut, after it),
    and what vLLM verified."""
    steps, verified = [], []
    allot, stats = sch._banditk_allot, sch.make_spec_decoding_stats

    def allot_recorded():
        drafting = [r for r in sch.running if r.spec_token_ids]
        before = [len(r.spec_token_ids) for r in drafting]
        allot()
        steps.append([(is_low(r), n, len(r.spec_token_ids)) for r, n in zip(drafting, before, strict=True)])

    def stats_recorded(spec_stats, **kw):
        verified.append((kw["request_id"], kw["num_draft_tokens"], kw["num_accepted_tokens"]))
        return stats(spec_stats, **kw)

    sch._banditk_allot, sch.make_spec_decoding_stats = allot_recorded, stats_recorded
    return steps, verified


@pytest.fixture(scope="module")
def split_engine(vllm_cpu, split_pair):
    """The bandit through the per-request scheduler, on the split pair."""
    spec = {
        "method": "draft_model",
        "model": split_pair.draft,
        "num_speculative_tokens": 3,
        "governor": "bandit",
        # A budget a loaded machine cannot exhaust: these tests check verification, not the breaker.
        "governor_config": {"state_log_interval_s": 0, "seed": 0, "per_request": True, "slow_call_ms": 5000},
    }
    with tiny_llm(split_pair.target, spec) as llm:
        yield llm


def split_prompts(split_pair):
    return [split_pair.prompt(h, 10, seed=s) for s, h in enumerate(("high", "low") * 3)]


def generate_ids(llm, prompts, n=40):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def test_real_vllm_verifies_per_request_with_exact_output(split_engine, split_pair):
    """The bandit, wrapped, on a batch of requests that accept 90% and 30% of drafts."""
    from banditk.adapter.per_request import PerRequestScheduler
    from banditk.governor.per_request import PerRequestGovernor
    from banditk.testing.engines import scheduler

    llm, low, prompts = split_engine, set(split_pair.low.tolist()), split_prompts(split_pair)
    sch = scheduler(llm)
    assert isinstance(sch, PerRequestScheduler) and isinstance(sch.banditk.policy, PerRequestGovernor)
    prime(sch.banditk.policy, 3)
    steps, verified = recorded(sch, lambda r: r.prompt_token_ids[-1] in low)
    before, errors0 = spec_metrics(llm), dict(sch.banditk.telemetry.errors)  # another test injects faults
    outs = generate_ids(llm, prompts)
    delta = metrics_delta(before, spec_metrics(llm))
    errors = {k: n - errors0.get(k, 0) for k, n in sch.banditk.telemetry.errors.items() if n > errors0.get(k, 0)}
    steps, verified = list(steps), list(verified)
    left = sch.banditk.policy.book.running_ids()
    generate_ids(llm, prompts[:1])
    left_after = sch.banditk.policy.book.running_ids()
    assert errors == {}
    for p, o in zip(prompts, outs, strict=True):
        assert o == greedy_chain(split_pair.next_token, p[-1], 40)
    rows = [row for step in steps for row in step]
    assert rows and all(0 <= kept <= n for _, n, kept in rows)  # never above what was drafted
    share = {h: sum(k for lo, _, k in rows if lo == h) / sum(n for lo, n, _ in rows if lo == h) for h in (0, 1)}
    assert share[1] < 0.5 * share[0], share  # the requests that reject get far fewer drafts verified
    # Cut drafts are not verified drafts: vLLM's counters hold exactly what was verified.
    assert delta["num_draft_tokens"] == sum(n for _, n, _ in verified)
    assert delta["num_accepted_tokens"] == sum(a for _, _, a in verified)
    # Finished requests leave the running book at the next step.
    assert len(left) <= len(prompts) and not set(left) & set(left_after)


def test_a_failing_allotment_verifies_every_draft_and_is_counted(split_engine, split_pair):
    from banditk.testing.engines import scheduler

    llm, prompts = split_engine, split_prompts(split_pair)[:2]
    sch = scheduler(llm)
    policy = sch.banditk.policy
    before = sch.banditk.telemetry.errors.get("allot", 0)

    def broken(ids, drafted):
        raise RuntimeError("allotment lost")

    policy.allot = broken
    try:
        outs = generate_ids(llm, prompts)
    finally:
        del policy.allot
    assert sch.banditk.telemetry.errors["allot"] > before
    for p, o in zip(prompts, outs, strict=True):
        assert o == greedy_chain(split_pair.next_token, p[-1], 40)


def test_async_scheduler_keeps_its_placeholders_consistent_under_allotments(split_engine):
    """vLLM on CPU forces sync scheduling, so the async per-request scheduler is driven by hand."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    from banditk.adapter.per_request import PerRequestAsyncScheduler
    from banditk.governor.per_request import PerRequestGovernor

    sch = async_scheduler(split_engine, PerRequestAsyncScheduler)
    policy = sch.banditk.policy
    assert isinstance(policy, PerRequestGovernor)
    policy.allot = lambda ids, drafted: np.minimum(drafted, [{"one": 1, "three": 3}[r] for r in ids])
    sp = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    for rid in ("one", "three"):
        sch.add_request(Request(rid, [5, 6, 7, 8], sp, None))
    drafts = lambda so: {r: len(v) for r, v in so.scheduled_spec_decode_tokens.items()}  # noqa: E731
    s0 = sch.schedule()  # prefill: no drafts yet
    s1 = sch.schedule()
    answer(sch, s0, 0)
    s2 = sch.schedule()
    answer(sch, s1, 3)
    s3 = sch.schedule()
    answer(sch, s2, 0)  # every scheduled draft rejected: the rollback must match what was scheduled
    answer(sch, s3, 1)
    for so in (s1, s2, s3):  # within each allotment, and within the K the governor chose
        assert all(n <= {"one": 1, "three": 3}[r] for r, n in drafts(so).items())
    assert drafts(s0) == {}
    assert all(-1 == t for t in sch._spec_token_placeholders)  # the shared list was never cut
    assert all(sch.requests[r].num_output_placeholders == 0 for r in ("one", "three"))
    assert sch.banditk.telemetry.errors == {}
    # The book heard every verified step of both requests.
    succ, fail = policy.book.counts(["one", "three"])
    assert (succ + fail).sum() > 0


def test_mtp_output_is_exact_under_per_request_verification(vllm_cpu, tiny_pair):
    from transformers import AutoTokenizer

    from banditk.testing.engines import scheduler
    from banditk.testing.tiny_models import build_mtp_target

    path, f = build_mtp_target(os.path.dirname(tiny_pair.target))
    tok = AutoTokenizer.from_pretrained(path)
    prompts = ["def main(argv):", "class Foo(object):", "return None"]
    spec = {
        "method": "mtp",
        "num_speculative_tokens": 2,
        "governor": "bandit",
        "governor_config": {"seed": 0, "per_request": True},
    }
    with tiny_llm(path, spec) as llm:
        sch = scheduler(llm)
        prime(sch.banditk.policy, 2)
        steps, _ = recorded(sch)
        from vllm import SamplingParams

        sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
        outs = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, sp, use_tqdm=False)]
        errors, name = dict(sch.banditk.telemetry.errors), sch.banditk.policy.name
    assert name == "bandit-per-request" and errors == {}
    rows = [row for step in steps for row in step]
    assert rows and all(0 <= kept <= n for _, n, kept in rows)
    for p, o in zip(prompts, outs, strict=True):
        assert o == greedy_chain(f, tok(p)["input_ids"][-1], 24)


NGRAM = r"""
import json, sys
from banditk.testing.engines import cpu_env, scheduler, tiny_llm
cpu_env(in_process=True, cache_root=sys.argv[2])
from vllm import SamplingParams
from vllm.inputs import TokensPrompt
spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1,
        "governor": "bandit", "governor_config": {"state_log_interval_s": 0, "seed": 0, "per_request": True}}
with tiny_llm(sys.argv[1], spec) as llm:
    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    out = [list(o.outputs[0].token_ids) for o in llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in json.loads(sys.argv[3])], sp, use_tqdm=False)]
    rt = scheduler(llm).banditk
    print("RESULT " + json.dumps({"out": out, "policy": rt.policy.name, "errors": rt.telemetry.errors,
                                  "proposed": rt.policy.proposed_drafts, "drafted": int(rt.telemetry.num_draft_tokens)}))
"""


def test_ngram_output_is_exact_under_per_request_verification(vllm_cpu, tiny_pair, tmp_path):
    # Its own process: in vLLM 0.32 the ngram proposer imports numba, after which a later engine
    # start in the same process trips in the triton dispatcher (see test_vllm_engine.py).
    # Each prompt is a stretch of the target's cycle and then its first ten tokens again: the
    # target continues the stretch, so the proposer finds every continuation in the prompt.
    stretches = [[s, *greedy_chain(tiny_pair.next_token, s, 99)] for s in (10, 200)]
    prompts = [seg + seg[:10] for seg in stretches]
    run = subprocess.run(
        [sys.executable, "-c", NGRAM, tiny_pair.target, str(tmp_path / "cache"), json.dumps(prompts)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert (
        result["policy"] == "bandit-per-request"
        and result["errors"] == {}
        and result["drafted"] > 0
        and result["proposed"] > 0
    )
    for p, o in zip(prompts, result["out"], strict=True):
        assert o == greedy_chain(tiny_pair.next_token, p[-1], 24)
