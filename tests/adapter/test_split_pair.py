"""The split test pair (issue 16): requests whose acceptance truly differs, in real vLLM on CPU."""

from __future__ import annotations

import numpy as np
import pytest
from hand_scheduler import answer, async_scheduler

from banditk.testing.engines import greedy_chain, metrics_delta, spec_metrics, tiny_llm
from lab.split_pair import split_cycle_map, split_partial_map

NUM_SPECIAL = 3


def cycle_of(f: np.ndarray, start: int) -> set[int]:
    seen, t = set(), int(start)
    while t not in seen:
        seen.add(t)
        t = int(f[t])
    return seen


def test_the_target_cycles_within_each_half_and_specials_enter_the_high_one():
    f, high, low = split_cycle_map(64, NUM_SPECIAL, seed=5)
    assert cycle_of(f, high[0]) == set(high.tolist()) and cycle_of(f, low[0]) == set(low.tolist())
    assert not set(high.tolist()) & set(low.tolist()) and high.size + low.size == 64 - NUM_SPECIAL
    assert all(int(f[s]) in set(high.tolist()) for s in range(NUM_SPECIAL))


def test_the_draft_agrees_on_the_asked_share_of_each_half_and_stays_in_it():
    f, high, low = split_cycle_map(403, NUM_SPECIAL, seed=1)
    g = split_partial_map(f, high, low, (0.9, 0.3), seed=1)
    for half, share in ((high, 0.9), (low, 0.3)):
        assert (g[half] == f[half]).sum() == half.size - round((1 - share) * half.size)
        assert np.isin(g[half], half).all()


@pytest.mark.parametrize("agreement", [(1.2, 0.3), (0.9, -0.1)])
def test_an_agreement_outside_0_1_names_its_half(agreement):
    f, high, low = split_cycle_map(64, NUM_SPECIAL, seed=0)
    half = "high" if agreement[0] > 1 else "low"
    with pytest.raises(ValueError, match=f"`agreement` \\({half} half\\)"):
        split_partial_map(f, high, low, agreement, seed=0)


def test_prompts_stay_in_their_half(split_pair):
    assert set(split_pair.prompt("low", 50, seed=3)) <= set(split_pair.low.tolist())
    with pytest.raises(ValueError, match="`half`"):
        split_pair.prompt("middle", 5, seed=0)


def test_real_vllm_sees_each_half_accept_at_its_own_rate_with_exact_output(vllm_cpu, split_pair):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    spec = {"method": "draft_model", "model": split_pair.draft, "num_speculative_tokens": 3}
    rates = {}
    with tiny_llm(split_pair.target, spec) as llm:
        for half in ("high", "low"):
            prompts = [split_pair.prompt(half, 12, seed=s) for s in range(4)]
            before = spec_metrics(llm)
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
            delta = metrics_delta(before, spec_metrics(llm))
            for p, o in zip(prompts, outs, strict=True):
                assert list(o.outputs[0].token_ids) == greedy_chain(split_pair.next_token, p[-1], 48)
            rates[half] = delta["num_accepted_tokens"] / delta["num_draft_tokens"]
    # Acceptance over 3 drafts is below the per-position share: a miss ends the run.
    assert rates["high"] > 0.65 and rates["low"] < 0.3, rates  # the maps give (p + p^2 + p^3) / 3: 0.81, 0.14


# ---- per-request allotments delivered by cutting drafts before vLLM schedules them ------------


class FakeRequest:
    def __init__(self, request_id, spec):
        self.request_id, self.spec_token_ids = request_id, spec


def test_trim_cuts_to_the_allotment_with_a_new_list_and_never_adds():
    from banditk.adapter.draft_trim import trim_drafts

    shared = [-1, -1, -1]  # the async scheduler's placeholders, one list for every request
    reqs = [FakeRequest("a", shared), FakeRequest("b", shared), FakeRequest("c", [7, 8])]
    assert trim_drafts(reqs, {"a": 1, "c": 5}) == 2
    assert reqs[0].spec_token_ids == [-1] and reqs[1].spec_token_ids is shared == [-1, -1, -1]
    assert reqs[2].spec_token_ids == [7, 8]  # above what was drafted: kept, nothing added
    with pytest.raises(ValueError, match="request 'b' must be an int >= 0, got -1"):
        trim_drafts(reqs, {"b": -1})


def test_real_vllm_verifies_each_request_its_allotment_with_exact_output(vllm_cpu, split_pair):
    """Low-half requests get one draft verified, high-half ones three; vLLM counts only those."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from banditk.adapter.draft_trim import trim_drafts
    from banditk.testing.engines import scheduler

    low = set(split_pair.low.tolist())
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    spec = {"method": "draft_model", "model": split_pair.draft, "num_speculative_tokens": 3}
    prompts = [split_pair.prompt(half, 10, seed=s) for s, half in enumerate(("high", "low", "high", "low"))]
    with tiny_llm(split_pair.target, spec) as llm:
        sch = scheduler(llm)
        schedule, stats = sch.schedule, sch.make_spec_decoding_stats
        cut, verified, in_low = [0], [], {}

        def trimmed_schedule(*a, **kw):
            in_low.update({r.request_id: r.prompt_token_ids[-1] in low for r in sch.running})
            allot = {r.request_id: 1 if in_low[r.request_id] else 3 for r in sch.running}
            cut[0] += trim_drafts(sch.running, allot)
            return schedule(*a, **kw)

        def recorded_stats(spec_stats, **kw):
            verified.append((kw["request_id"], kw["num_draft_tokens"], kw["num_accepted_tokens"]))
            return stats(spec_stats, **kw)

        sch.schedule, sch.make_spec_decoding_stats = trimmed_schedule, recorded_stats
        before = spec_metrics(llm)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        delta = metrics_delta(before, spec_metrics(llm))
    for p, o in zip(prompts, outs, strict=True):
        assert list(o.outputs[0].token_ids) == greedy_chain(split_pair.next_token, p[-1], 40)
    assert cut[0] > 0
    by_half = {True: [n for r, n, _ in verified if in_low[r]], False: [n for r, n, _ in verified if not in_low[r]]}
    assert max(by_half[True]) == 1 and max(by_half[False]) == 3  # never above the allotment
    # Cut drafts are not verified drafts: vLLM's counters hold exactly what was verified.
    assert delta["num_draft_tokens"] == sum(n for _, n, _ in verified)
    assert delta["num_accepted_tokens"] == sum(a for _, _, a in verified)


def test_async_scheduler_schedules_each_allotment_and_its_placeholders_return_to_zero(vllm_cpu, split_pair):
    """vLLM on CPU forces sync scheduling, so vLLM's own AsyncScheduler is driven by hand.

    Built from a live engine's configs; the model runner is replaced by hand-made outputs, in
    async order (schedule N+1 before update_from_output N).
    """
    from vllm import SamplingParams
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.request import Request

    from banditk.adapter.draft_trim import trim_drafts

    spec = {"method": "draft_model", "model": split_pair.draft, "num_speculative_tokens": 3}
    with tiny_llm(split_pair.target, spec) as llm:
        sch = async_scheduler(llm, AsyncScheduler)
    sp = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    for rid in ("one", "three"):
        sch.add_request(Request(rid, [5, 6, 7, 8], sp, None))
    allotment = {"one": 1, "three": 3}
    verified, stats = [], sch.make_spec_decoding_stats

    def recorded_stats(spec_stats, **kw):
        verified.append((kw["request_id"], kw["num_draft_tokens"]))
        return stats(spec_stats, **kw)

    sch.make_spec_decoding_stats = recorded_stats

    def schedule():
        trim_drafts(sch.running, allotment)
        return sch.schedule()

    drafts = lambda so: {r: len(v) for r, v in so.scheduled_spec_decode_tokens.items()}  # noqa: E731
    s0 = schedule()  # prefill: no drafts yet
    s1 = schedule()  # the prefill's placeholders, cut to each allotment
    answer(sch, s0, 0)
    s2 = schedule()
    answer(sch, s1, 3)  # every scheduled draft accepted
    s3 = schedule()
    answer(sch, s2, 0)  # every scheduled draft rejected: the rollback must match what was scheduled
    answer(sch, s3, 1)
    assert drafts(s0) == {} and drafts(s1) == drafts(s2) == drafts(s3) == allotment
    assert sch._spec_token_placeholders == [-1, -1, -1]  # the shared list was never cut
    assert sorted(verified) == sorted([(r, k) for r, k in allotment.items()] * 3)
    assert all(sch.requests[r].num_output_placeholders == 0 for r in allotment)
    assert [len(sch.requests[r].output_token_ids) for r in ("one", "three")] == [1 + 2 + 1 + 2, 1 + 4 + 1 + 2]
