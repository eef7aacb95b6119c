"""StepContext.context_tokens from the adapter: the decoding requests' prompt plus generated tokens.

Unit tests of :mod:`banditk.adapter.vllm_compat` with fake requests, then real vLLM on CPU
(tiny local models, the fixtures of conftest.py) under chunked prefill and under preemption:
each step's context is checked against what the client saw (prompt lengths plus the tokens
generated so far) of the requests that decode in that step.
"""

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from banditk.adapter import vllm_compat

# ---- the helper, with fake vLLM objects -----------------------------------------------------


@dataclass
class FakeOutput:
    num_scheduled_tokens: dict
    scheduled_spec_decode_tokens: dict = field(default_factory=dict)
    scheduled_new_reqs: list = field(default_factory=list)
    scheduled_cached_reqs: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(resumed_req_ids=set()))


def fake_scheduler(**requests):
    return SimpleNamespace(requests=requests)


def test_context_is_prompt_plus_generated_of_decoders_only():
    # Synchronous layout: a decoder's num_computed_tokens is prompt + generated - 1.
    sch = fake_scheduler(
        a=SimpleNamespace(num_prompt_tokens=100, num_computed_tokens=109, num_output_placeholders=0),  # 10 generated
        b=SimpleNamespace(num_prompt_tokens=50, num_computed_tokens=50),  # 1 generated, no placeholders attribute
        c=SimpleNamespace(num_prompt_tokens=300, num_computed_tokens=128),  # prefill chunk
        d=SimpleNamespace(num_prompt_tokens=20, num_computed_tokens=0),  # new request
        e=SimpleNamespace(num_prompt_tokens=40, num_computed_tokens=0),  # recomputed after preemption
    )
    out = FakeOutput({"a": 4, "b": 1, "c": 64, "d": 20, "e": 60}, {"a": [7, 7, 7]})
    ids, ctx, tokens, prompts_left = vllm_compat.decoding_requests(sch, out)
    assert ids == ["a", "b"] and ctx == 110 + 51 and tokens == 4 + 1
    assert prompts_left == 300 - 128 - 64  # c's rest of its prompt; d and e finish theirs
    assert vllm_compat.decoding_request_ids(sch, out) == ids
    assert vllm_compat.decoding_requests(sch, FakeOutput({"c": 64, "d": 20})) == ([], 0, 0, 108)


def test_async_placeholders_are_not_counted():
    # Async layout: num_computed_tokens also counts the previous step's token and its 2 drafts,
    # in flight (unverified), which num_output_placeholders counts too.
    req = SimpleNamespace(num_prompt_tokens=100, num_computed_tokens=109 + 3, num_output_placeholders=3)
    ids, ctx, *_ = vllm_compat.decoding_requests(fake_scheduler(a=req), FakeOutput({"a": 3}, {"a": [-1, -1]}))
    assert ids == ["a"] and ctx == 110
    assert vllm_compat.request_context_tokens(req) == 110


def test_missing_or_broken_attributes_give_zero_not_an_error():
    assert vllm_compat.request_context_tokens(SimpleNamespace()) == 0  # no num_computed_tokens
    assert vllm_compat.request_context_tokens(SimpleNamespace(num_computed_tokens=9)) == 10  # no placeholders
    broken = SimpleNamespace(num_prompt_tokens=5, num_computed_tokens=9, num_output_placeholders="x")
    assert vllm_compat.request_context_tokens(broken) == 0
    ok = SimpleNamespace(num_prompt_tokens=5, num_computed_tokens=9)
    # One request whose context is unknown makes the sum unknown (0), the decoders are still found.
    ids, ctx, *_ = vllm_compat.decoding_requests(fake_scheduler(a=ok, b=broken), FakeOutput({"a": 1, "b": 1}))
    assert ids == ["a", "b"] and ctx == 0
    assert vllm_compat.decoding_requests(fake_scheduler(a=ok), FakeOutput({"a": 1})) == (["a"], 10, 1, 0)


def test_runtime_puts_the_context_in_the_step_context():
    from banditk.adapter.runtime import GovernorRuntime
    from banditk.adapter.settings import parse_settings
    from banditk.core.types import Decision

    class Recording:
        name = "recording"

        def __init__(self):
            self.contexts = []

        def select(self, ctx):
            self.contexts.append(ctx)
            return Decision(k=2, bucket=0, num_decoding=ctx.num_decoding, step_id=len(self.contexts))

        def observe(self, decision, outcome):
            pass

    class Out(FakeOutput):
        num_spec_tokens_to_schedule = 3

        @property
        def total_num_scheduled_tokens(self):
            return sum(self.num_scheduled_tokens.values())

    pol = Recording()
    s = parse_settings("bandit", {}).resolve(method="draft_model", k_max=3)
    rt = GovernorRuntime(s, pol, clock=iter(np.arange(0.0, 100.0, 0.5)).__next__)
    sch = fake_scheduler(
        a=SimpleNamespace(num_prompt_tokens=100, num_computed_tokens=109),
        c=SimpleNamespace(num_prompt_tokens=300, num_computed_tokens=0),
    )
    sch.waiting, sch.kv_cache_manager = [], SimpleNamespace(usage=0.1)
    rt.on_schedule(sch, Out({"a": 3, "c": 64}, {"a": [1, 2]}))
    assert [(c.num_decoding, c.context_tokens) for c in pol.contexts] == [(1, 110)]
    assert rt.telemetry.errors == {}


# ---- real vLLM on CPU -----------------------------------------------------------------------

K_MAX = 3


def spec(tiny_pair):
    cfg = {
        "seed": 0,
        "fallback_k": 2,
        "state_log_interval_s": 0,
        "slow_call_ms": 5000,
    }  # the slow-call breaker (tested in test_runtime.py) must not trip on a loaded machine
    return {
        "method": "draft_model",
        "model": tiny_pair.draft,
        "num_speculative_tokens": K_MAX,
        "governor": "bandit",
        "governor_config": cfg,
    }


class Spy:
    """Wraps the governor; records every context it is asked with."""

    def __init__(self, inner):
        self.inner, self.name, self.contexts = inner, "spy", []

    def select(self, ctx):
        self.contexts.append(ctx)
        return self.inner.select(ctx)

    def observe(self, decision, outcome):
        self.inner.observe(decision, outcome)


def run_and_check(llm, prompts, max_tokens):
    """Run ``prompts`` (id -> token ids) to completion, one engine step at a time.

    At each schedule the truth is computed from what the client has seen: a request decodes
    when it has generated tokens and is scheduled for one token plus its drafts; its context
    is its prompt length plus the tokens generated so far. Returns the steps
    ``(scheduled, decoders, truth, ctx)`` and the preempted requests with the step of preemption.
    """
    from vllm import SamplingParams

    from banditk.testing.engines import scheduler

    sch = scheduler(llm)
    rt = sch.banditk
    spy = Spy(rt.policy)
    rt.policy = spy
    generated = dict.fromkeys(prompts, 0)
    steps, preempted = [], []

    def key(internal_id):  # the engine core may suffix the client's request id
        return next(k for k in prompts if internal_id == k or internal_id.startswith(k + "-"))

    orig_schedule, orig_preempt = sch.schedule, sch._preempt_request

    def schedule(*a, **kw):
        n0 = len(spy.contexts)
        out = orig_schedule(*a, **kw)
        if out.total_num_scheduled_tokens > 0:
            spec_tokens = out.scheduled_spec_decode_tokens
            scheduled = {key(r): n for r, n in out.num_scheduled_tokens.items()}
            decoders = {
                key(r)
                for r, n in out.num_scheduled_tokens.items()
                if generated[key(r)] > 0 and n <= 1 + len(spec_tokens.get(r, ()))
            }
            truth = sum(len(prompts[r]) + generated[r] for r in decoders)
            # None: the governor was not asked (its breaker open on a loaded machine).
            ctx = spy.contexts[-1] if len(spy.contexts) > n0 else None
            steps.append((scheduled, decoders, truth, ctx))
        return out

    def preempt(req, *a, **kw):
        preempted.append((key(req.request_id), len(steps)))
        return orig_preempt(req, *a, **kw)

    sch.schedule, sch._preempt_request = schedule, preempt
    engine = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    try:
        for rid, ids in prompts.items():
            engine.add_request(rid, {"prompt_token_ids": list(ids)}, sp)
        n = 0
        while engine.has_unfinished_requests() and n < 5000:
            for o in engine.step():
                generated[o.request_id] = len(o.outputs[0].token_ids)
            n += 1
    finally:
        del sch.schedule, sch._preempt_request
        rt.policy = spy.inner
    assert all(g == max_tokens for g in generated.values()), generated
    asked = [s for s in steps if s[3] is not None]
    assert len(asked) > 0.8 * len(steps)
    for scheduled, decoders, truth, ctx in asked:
        assert (ctx.num_decoding, ctx.context_tokens) == (len(decoders), truth), (scheduled, decoders)
    assert set(rt.telemetry.errors) <= {"slow"}, rt.telemetry.errors
    return steps, preempted


def token_prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return {f"r{i}": rng.integers(3, 500, size=n).tolist() for i, n in enumerate(lengths)}


@pytest.mark.vllm
def test_context_tokens_under_chunked_prefill(vllm_cpu, tiny_pair):
    from banditk.testing.engines import tiny_llm

    budget = 48
    prompts = token_prompts([150, 230, 100, 300, 170])
    with tiny_llm(
        tiny_pair.target, spec(tiny_pair), max_num_batched_tokens=budget, enable_chunked_prefill=True, max_num_seqs=8
    ) as llm:
        steps, _ = run_and_check(llm, prompts, max_tokens=30)
    # Every prompt was split, and prefill chunks ran beside decoding requests, not counted.
    first_token = {r: min(i for i, s in enumerate(steps) if r in s[1]) for r in prompts}
    for r, ids in prompts.items():
        chunks = [s[0][r] for s in steps[: first_token[r]] if r in s[0]]
        assert len(chunks) >= 2 and sum(chunks) == len(ids), (r, chunks)
    mixed = [s for s in steps if s[1] and set(s[0]) - s[1]]
    assert len(mixed) >= 10 and all(s[2] > 0 for s in mixed)
    assert max(s[2] for s in steps) > 2 * budget


@pytest.mark.vllm
def test_context_tokens_under_preemption(vllm_cpu, tiny_pair):
    from banditk.testing.engines import tiny_llm

    # Five requests that grow past two 128-token CPU blocks, in six blocks: vLLM preempts the
    # newest running request and recomputes it (prompt and generated tokens) when it resumes.
    prompts = token_prompts([90, 60, 120, 75, 100], seed=1)
    with tiny_llm(tiny_pair.target, spec(tiny_pair), num_gpu_blocks_override=6, max_num_seqs=8) as llm:
        steps, preempted = run_and_check(llm, prompts, max_tokens=200)
    assert preempted, "the KV cache was meant to be too small for the batch"
    resumed = 0
    for r, at in preempted:
        later = steps[at:]
        back = next((i for i, s in enumerate(later) if r in s[1]), None)
        if back is None:
            continue
        # While preempted (waiting, then recomputing) it was not decoding, and others were:
        # their context, checked above, did not include it.
        out = later[:back]
        assert out and all(r not in s[1] for s in out)
        assert any(s[1] and s[2] > 0 for s in out)
        # Decoding again, its context is its prompt and everything generated before and since.
        resumed += 1
    assert resumed > 0
