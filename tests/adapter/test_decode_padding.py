"""New decode requests are padded to the step's 1 + K rows under the governed K, as vLLM pads
them at a static K, and their placeholder drafts are credited to no decision (issue 15).

A request whose prompt is a prefix-cache hit up to its last token takes its first step as one
decode token. vLLM pads it with -1 drafts only without a dynamic table, so that the step stays a
uniform decode batch (a full CUDA graph); the plugin always sets a table. The hand-driven tests
build the governed schedulers from a live engine's configs and answer their steps by hand.
"""

from __future__ import annotations

import pytest
from hand_scheduler import answer_sampled as answer
from hand_scheduler import async_scheduler, built_scheduler

from banditk.adapter import event_timing

pytestmark = pytest.mark.vllm

K_MAX = 3


class Scripted:
    """Plays the Ks given and records what each decision is credited."""

    name = "scripted"

    def __init__(self, k: int):
        self.k, self.observed = k, []

    def select(self, ctx):
        from banditk.core.types import Decision

        return Decision(k=self.k, bucket=0, num_decoding=ctx.num_decoding, step_id=0)

    def observe(self, d, o):
        self.observed.append((d.k, *(x.tolist() for x in o.per_request())))


@pytest.fixture(scope="module")
def engine(vllm_cpu, tiny_pair):
    from banditk.testing.engines import tiny_llm

    spec = {
        "method": "draft_model",
        "model": tiny_pair.draft,
        "num_speculative_tokens": K_MAX,
        "governor": "bandit",
        "governor_config": {
            "state_log_interval_s": 0,
            "seed": 0,
            "slow_call_ms": 5000,
        },  # the slow-call breaker (tested in test_runtime.py) must not trip on a loaded machine
    }
    with tiny_llm(tiny_pair.target, spec, enable_prefix_caching=True) as llm:
        yield llm


def shared_prompt(sch) -> list[int]:
    """Two full blocks and one token: a second request with it hits the cache up to its last token."""
    return [5 + i % 200 for i in range(2 * sch.block_size + 1)]


def add(engine, sch, rid: str, prompt: list[int]) -> None:
    """A request with its blocks hashed, as the engine core makes it (prefix caching needs them)."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    from banditk.testing.engines import engine_core

    sp = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    sch.add_request(Request(rid, prompt, sp, None, block_hasher=engine_core(engine).request_block_hasher))


def test_the_plugin_runs_vllm_with_a_table_so_vllm_alone_would_not_pad(engine):
    from banditk.testing.engines import scheduler

    sch = scheduler(engine)
    assert sch.dynamic_sd_lookup is not None  # vLLM's padding condition is false in the governed mode
    assert sch.num_spec_tokens == K_MAX


@pytest.mark.parametrize("k", [2, 0])
def test_a_prefix_hit_is_padded_to_the_governed_k_and_its_drafts_are_not_credited(engine, k):
    from vllm.v1.outputs import DraftTokenIds

    from banditk.adapter.scheduler import GovernedScheduler

    sch = built_scheduler(engine, GovernedScheduler)
    pol = sch.banditk.policy = Scripted(k)
    prompt = shared_prompt(sch)
    drafts = [list(range(1, k + 1))] if k else [[]]
    add(engine, sch, "r1", prompt)
    s0 = sch.schedule()  # r1's prefill
    assert s0.num_scheduled_tokens["r1"] == len(prompt)
    answer(sch, s0, {"r1": 1})
    sch.update_draft_token_ids(DraftTokenIds(["r1"], drafts))
    s1 = sch.schedule()  # r1 decodes: the decision credited below
    answer(sch, s1, {"r1": 1 + min(k, 1)})
    sch.update_draft_token_ids(DraftTokenIds(["r1"], drafts))
    add(engine, sch, "r2", prompt)
    s2 = sch.schedule()
    # The scheduler is left as it was: dynamic, with vLLM's K_max.
    assert sch.dynamic_sd_lookup is not None and sch.num_spec_tokens == K_MAX
    if k:
        assert s2.scheduled_spec_decode_tokens["r1"] == drafts[0]
        assert s2.num_scheduled_tokens["r2"] == 1 + k  # padded to the K of the drafts verified
        assert s2.scheduled_spec_decode_tokens["r2"] == [-1] * k
        # The placeholder row is not a prompt token: this step prefilled r2's last token only.
        assert sch.banditk.ledger.entry(event_timing.stamped_step(s2)).prefill == 1
    else:
        assert s2.num_scheduled_tokens["r2"] == 1  # nothing to pad to
        assert "r2" not in s2.scheduled_spec_decode_tokens
    drafted_before = sch.banditk.telemetry.num_draft_tokens
    answer(sch, s2, {"r1": 1 + min(k, 1), "r2": 1})  # r2's placeholders are all rejected
    # s2 verified s1's decision: r1 alone decoded at s1, so r2's placeholders are not in its outcome.
    assert pol.observed[-1] == (k, [k], [min(k, 1)])
    assert sch.banditk.telemetry.num_draft_tokens - drafted_before == k
    assert sch.banditk.telemetry.padded_requests == (1 if k else 0)
    assert sch.banditk.telemetry.errors == {}


def test_async_scheduler_pads_to_its_placeholders_k_and_keeps_its_counts(engine):
    """Async order: schedule(N+1) runs before update_from_output(N); the padded request's
    placeholders roll back like any rejected draft."""
    from banditk.adapter.scheduler import GovernedAsyncScheduler

    sch = async_scheduler(engine, GovernedAsyncScheduler)
    pol = sch.banditk.policy = Scripted(2)
    prompt = shared_prompt(sch)
    add(engine, sch, "r1", prompt)
    s0 = sch.schedule()
    answer(sch, s0, {"r1": 1})
    s1 = sch.schedule()  # r1 decodes with K=2 placeholders
    add(engine, sch, "r2", prompt)
    s2 = sch.schedule()
    assert s2.num_scheduled_tokens["r2"] == 3 and s2.scheduled_spec_decode_tokens["r2"] == [-1, -1]
    answer(sch, s1, {"r1": 2})
    answer(sch, s2, {"r1": 2, "r2": 1})
    assert pol.observed[-1] == (2, [2], [1])
    assert all(sch.requests[r].num_output_placeholders == 0 for r in ("r1", "r2"))
    assert sch.banditk.telemetry.errors == {}


def test_a_padded_request_generates_exactly_in_real_vllm(engine, tiny_pair):
    """The second of two identical prompts is padded at its first step: its greedy output is the
    model's chain, vLLM counts its placeholders as drafted and rejected, banditk does not."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from banditk.policies import make_policy
    from banditk.testing.engines import greedy_chain, metrics_delta, scheduler, spec_metrics

    sch = scheduler(engine)
    rt = sch.banditk
    prompt = shared_prompt(sch)
    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    old, rt.policy = rt.policy, make_policy(f"fixed:{K_MAX}", drafter_class=rt.drafter_class, k_max=K_MAX)
    try:
        first = engine.generate([TokensPrompt(prompt_token_ids=prompt)], sp, use_tqdm=False)
        padded, drafted, m0 = rt.telemetry.padded_requests, rt.telemetry.num_draft_tokens, spec_metrics(engine)
        second = engine.generate([TokensPrompt(prompt_token_ids=prompt)], sp, use_tqdm=False)
        vllm_drafted = metrics_delta(m0, spec_metrics(engine))["num_draft_tokens"]
    finally:
        rt.policy = old
    want = greedy_chain(tiny_pair.next_token, prompt[-1], 24)
    assert list(first[0].outputs[0].token_ids) == want
    assert list(second[0].outputs[0].token_ids) == want
    assert rt.telemetry.padded_requests - padded == 1
    assert vllm_drafted - (rt.telemetry.num_draft_tokens - drafted) == K_MAX
    assert rt.telemetry.errors == {}


# ---- the pieces, without an engine ---------------------------------------------------------------


class FakeScheduler:
    def __init__(self):
        self.dynamic_sd_lookup, self.num_spec_tokens = [0, 3, 3], 3


def test_the_swap_lasts_one_call_and_is_undone_when_schedule_raises():
    from banditk.adapter.vllm_compat import static_decode_padding

    sch = FakeScheduler()
    with static_decode_padding(sch, 2):
        assert (sch.dynamic_sd_lookup, sch.num_spec_tokens) == (None, 2)
    assert (sch.dynamic_sd_lookup, sch.num_spec_tokens) == ([0, 3, 3], 3)
    with pytest.raises(RuntimeError), static_decode_padding(sch, 1):
        raise RuntimeError("schedule failed")
    assert (sch.dynamic_sd_lookup, sch.num_spec_tokens) == ([0, 3, 3], 3)
    with static_decode_padding(sch, 0):  # nothing to pad to: vLLM's dynamic mode as it is
        assert (sch.dynamic_sd_lookup, sch.num_spec_tokens) == ([0, 3, 3], 3)
    sch.dynamic_sd_lookup = None
    with static_decode_padding(sch, 2):  # static already: vLLM pads to its own K
        assert (sch.dynamic_sd_lookup, sch.num_spec_tokens) == (None, 3)


def test_padded_requests_are_the_waiting_queues_requests_that_carry_drafts():
    from types import SimpleNamespace

    from banditk.adapter.vllm_compat import padded_request_ids

    out = SimpleNamespace(
        scheduled_spec_decode_tokens={"run": [4, 5], "new": [-1, -1], "back": [-1, -1], "async": [-1, -1]},
        scheduled_new_reqs=[SimpleNamespace(req_id="new"), SimpleNamespace(req_id="prefill")],
        scheduled_cached_reqs=SimpleNamespace(resumed_req_ids={"back", "resumed-prefill"}),
    )
    # "async" carries placeholders too, but it was running: its drafts are its own.
    assert padded_request_ids(out) == {"new", "back"}
    out.scheduled_spec_decode_tokens = {}
    assert padded_request_ids(out) == frozenset()


def test_the_shape_check_refuses_a_schedule_that_reads_num_spec_tokens_elsewhere():
    import inspect

    from vllm.v1.core.sched.scheduler import Scheduler

    from banditk.adapter.vllm_compat import _pads_like_0_32

    src = inspect.getsource(Scheduler.schedule)
    assert _pads_like_0_32(src)
    assert not _pads_like_0_32(src + "\n        budget = self.num_spec_tokens\n")
    assert not _pads_like_0_32(src.replace("and self.dynamic_sd_lookup is None", "and True"))
