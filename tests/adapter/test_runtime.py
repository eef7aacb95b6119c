"""The governed scheduler's per-step logic, driven with fake vLLM objects (no vLLM needed).

The fakes carry exactly the attributes :mod:`banditk.adapter.vllm_compat` reads.
"""

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from banditk.adapter import event_timing, worker_timing
from banditk.adapter.event_timing import Sample
from banditk.adapter.runtime import GovernorRuntime
from banditk.adapter.settings import parse_settings
from banditk.core.types import Decision


class RecordingPolicy:
    name = "recording"

    def __init__(self, ks):
        self.ks = list(ks)
        self.contexts, self.observed = [], []

    def select(self, ctx):
        self.contexts.append(ctx)
        return Decision(k=self.ks.pop(0), bucket=0, num_decoding=ctx.num_decoding, step_id=len(self.contexts))

    def observe(self, decision, outcome):
        self.observed.append((decision, outcome))


@dataclass
class FakeOutput:
    num_scheduled_tokens: dict
    scheduled_spec_decode_tokens: dict = field(default_factory=dict)
    num_spec_tokens_to_schedule: int = 3
    scheduled_new_reqs: list = field(default_factory=list)
    scheduled_cached_reqs: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(resumed_req_ids=set()))

    @property
    def total_num_scheduled_tokens(self):
        return sum(self.num_scheduled_tokens.values())


class FakeScheduler:
    def __init__(self):
        self.requests = {}
        self.waiting = []
        self.kv_cache_manager = SimpleNamespace(usage=0.25)
        self.max_num_scheduled_tokens = 2048

    def has_unfinished_requests(self):
        return bool(self.requests)

    def add(self, rid, prompt, computed):
        self.requests[rid] = SimpleNamespace(num_prompt_tokens=prompt, num_computed_tokens=computed)


def make_runtime(policy, k_max=3, **cfg):
    s = parse_settings("bandit", cfg).resolve(method="draft_model", k_max=k_max)
    clock = iter(np.arange(0.0, 1000.0, 0.5)).__next__
    return GovernorRuntime(s, policy, clock=clock)


def step(rt, sched, out, verified=()):
    rt.on_schedule_start()
    rt.on_schedule(sched, out)
    rt.on_output_start()
    for rid, d, a in verified:
        rt.on_verified(rid, d, a, None)
    rt.on_output(sched, out, SimpleNamespace())


def decode_steps(rt, sched, n):
    """``n`` steps of one decoding request ("a"); returns their scheduler outputs."""
    outs = [FakeOutput({"a": 1}) for _ in range(n)]
    for out in outs:
        step(rt, sched, out)
    return outs


def test_one_call_per_decoding_step_and_credit_one_step_later():
    pol = RecordingPolicy([3, 2, 1, 0])
    rt = make_runtime(pol)
    sch = FakeScheduler()
    sch.add("p", prompt=10, computed=0)  # prefill only: the policy is asked with B = 0
    out0 = FakeOutput({"p": 10})
    step(rt, sch, out0)
    assert len(pol.contexts) == 1 and pol.contexts[0].num_decoding == 0 and pol.contexts[0].num_scheduled == 1
    assert out0.num_spec_tokens_to_schedule == 3
    sch.add("p", prompt=10, computed=10)
    sch.add("q", prompt=4, computed=0)
    out1 = FakeOutput({"p": 1, "q": 4}, {"p": []})
    step(rt, sch, out1)
    assert len(pol.contexts) == 2 and pol.contexts[1].num_decoding == 1 and pol.contexts[1].num_scheduled == 2
    assert pol.contexts[1].kv_usage == 0.25 and out1.num_spec_tokens_to_schedule == 2
    assert pol.observed == []  # step 1 verifies step 0's drafts, and nothing decoded at step 0
    sch.add("q", prompt=4, computed=4)
    out2 = FakeOutput({"p": 3, "q": 1}, {"p": [7, 8]})
    step(rt, sch, out2, verified=[("p", 2, 1)])
    assert out2.num_spec_tokens_to_schedule == 1
    ((d, o),) = pol.observed
    assert d.k == 2 and [x.tolist() for x in o.per_request()] == [[2], [1]]
    assert o.step_duration_s > 0
    # q decoded at step 2 with K=1 but its output comes with 0 drafts (truncated): credited as 0 drafted
    sch.requests["p"].num_computed_tokens = 13
    sch.requests["q"].num_computed_tokens = 5
    out3 = FakeOutput({"p": 2, "q": 1}, {"p": [1]})
    step(rt, sch, out3, verified=[("p", 1, 1)])
    d, o = pol.observed[-1]
    assert d.k == 1 and o.per_request()[0].tolist() == [0, 1] and rt.telemetry.num_draft_tokens == 3


def test_finished_requests_are_not_credited():
    pol = RecordingPolicy([2, 2, 2])
    pol.wants_prefill_hint = True  # a policy that reads the prediction
    rt = make_runtime(pol)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    sch.add("b", 4, 4)
    step(rt, sch, FakeOutput({"a": 1, "b": 1}))
    del sch.requests["b"]  # finished/aborted/preempted between decision and outcome
    step(rt, sch, FakeOutput({"a": 3}, {"a": [1, 2]}), verified=[("a", 2, 2)])
    _, o = pol.observed[-1]
    assert [x.tolist() for x in o.per_request()] == [[2], [2]]


@pytest.mark.parametrize("rows", [False, True])
def test_a_step_reaches_the_policy_as_counts_or_as_rows_in_order(rows):
    """Counts per (drafted, accepted) pair, clamped to K_max, the silent decoder drafting
    nothing; rows, in the order heard then the silent ones, for a policy that reads them."""
    pol = RecordingPolicy([3, 3, 3])
    pol.wants_rows = rows
    rt = make_runtime(pol)
    sch = FakeScheduler()
    for r in "abc":
        sch.add(r, 4, 4)
    step(rt, sch, FakeOutput({"a": 1, "b": 1, "c": 1}))
    spec = {"a": [1, 2, 3], "b": [1, 2, 3]}
    step(rt, sch, FakeOutput({"a": 4, "b": 4, "c": 1}, spec), verified=[("b", 3, 1), ("a", 9, 9)])
    _, o = pol.observed[-1]
    if rows:
        assert o.pairs is None and o.drafted.tolist() == [3, 3, 0] and o.accepted.tolist() == [1, 3, 0]
    else:
        assert o.drafted is None and o.pairs == (1,) + (0,) * 12 + (1, 0, 1)  # (0, 0), (3, 1), (3, 3)
        assert o.position_counts(3) == ([2, 1, 1], [0, 1, 0])


class Raising:
    name = "raising"

    def select(self, ctx):
        raise RuntimeError("boom")

    def observe(self, d, o):
        raise RuntimeError("never")


class OutOfRange(RecordingPolicy):
    def select(self, ctx):
        return Decision(k=9, bucket=0, num_decoding=ctx.num_decoding, step_id=0)


@pytest.mark.parametrize("policy, kind", [(Raising(), "select"), (OutOfRange([]), "invalid_k")])
def test_policy_errors_use_fallback_and_are_counted(policy, kind, caplog):
    rt = make_runtime(policy, fallback_k=1)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    with caplog.at_level("ERROR", logger="vllm.banditk"):
        outs = decode_steps(rt, sch, 5)
    assert all(o.num_spec_tokens_to_schedule == 1 for o in outs)
    assert rt.telemetry.errors == {kind: 5}
    assert sum(kind in r.getMessage() for r in caplog.records) == 1  # logged once


def test_observe_error_is_counted_not_raised():
    class BadObserve(RecordingPolicy):
        def observe(self, d, o):
            raise ValueError("bad")

    rt = make_runtime(BadObserve([1, 1, 1]))
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    for _ in range(3):
        step(rt, sch, FakeOutput({"a": 2}, {"a": [5]}), verified=[("a", 1, 0)])
    assert rt.telemetry.errors == {"observe": 2}


def test_telemetry_log_and_snapshot(tmp_path):
    from banditk.core.config import GovernorConfig
    from banditk.governor import BanditGovernor

    gov = BanditGovernor(GovernorConfig(drafter_class="draft_model", k_max=3))
    log, snap = tmp_path / "t.jsonl", tmp_path / "snap.json"
    rt = make_runtime(gov, telemetry_log=str(log), snapshot_path=str(snap), snapshot_interval_s=0)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    for _ in range(6):
        step(rt, sch, FakeOutput({"a": 2}, {"a": [5]}), verified=[("a", 1, 1)])
    assert not snap.exists()
    rt.close()
    rt.close()  # idempotent
    assert snap.exists() and rt.snapshots.writes == 1
    lines = log.read_text().splitlines()
    assert len(lines) == 1 + 5  # the trace header, then the 5 credited steps
    from banditk.io.trace import read_trace

    assert len(read_trace(log)) == 5
    from banditk.governor.snapshot import load_prior

    assert load_prior(snap, drafter_class="draft_model", k_max=3).k_max == 3


def test_each_trace_line_carries_the_context_its_decision_was_made_with(tmp_path):
    # `banditk fit --context-edges` splits cells by the traced `ctx`: it must be the
    # decision's own context (the step that drafted), not the crediting step's.
    pol = RecordingPolicy([1, 2, 1, 2, 1])
    log = tmp_path / "t.jsonl"
    rt = make_runtime(pol, telemetry_log=str(log))
    sch = FakeScheduler()
    sch.add("a", prompt=30, computed=30)
    sch.add("b", prompt=500, computed=500)
    for i in range(5):
        sch.requests["a"].num_computed_tokens = 30 + i
        sch.requests["b"].num_computed_tokens = 500 + 7 * i
        step(rt, sch, FakeOutput({"a": 1, "b": 1}), verified=[("a", 1, 1), ("b", 1, 0)])
    rt.close()
    from banditk.io.trace import read_trace

    tr = read_trace(log)
    seen = [c.context_tokens for c in pol.contexts]
    assert len(set(seen)) == 5 and tr.context.tolist() == seen[: len(tr)] and len(tr) == 4


def test_idle_engine_flushes_snapshot_and_evicts_histories(tmp_path):
    from banditk.core.config import GovernorConfig
    from banditk.governor import BanditGovernor

    gov = BanditGovernor(GovernorConfig(drafter_class="draft_model", k_max=3))
    snap = tmp_path / "snap.json"
    rt = make_runtime(gov, snapshot_path=str(snap), snapshot_interval_s=0, request_history=4)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    for _ in range(3):
        step(rt, sch, FakeOutput({"a": 2}, {"a": [5]}), verified=[("a", 1, 1)])
    assert rt.telemetry.num_tracked_requests == 1 and not snap.exists()
    del sch.requests["a"]  # the last request finished in this step
    step(rt, sch, FakeOutput({"a": 2}, {"a": [5]}), verified=[("a", 1, 0)])
    assert snap.exists() and rt.snapshots.writes == 1 and rt.telemetry.num_tracked_requests == 0
    step(rt, sch, FakeOutput({}))  # an empty step while idle: nothing new, no rewrite
    assert rt.snapshots.writes == 1


class Sleepy(RecordingPolicy):
    """Selects K=3, taking ``delay_s`` of wall time per call."""

    def __init__(self, delay_s):
        super().__init__([])
        self.delay_s, self.calls = delay_s, 0

    def select(self, ctx):
        import time

        self.calls += 1
        time.sleep(self.delay_s)
        return Decision(k=3, bucket=0, num_decoding=ctx.num_decoding, step_id=self.calls)


def test_slow_governor_is_bypassed_with_fallback_k_and_logged_once(caplog):
    # 50 ms calls against a 10 ms budget: far apart, so a loaded machine does not blur them.
    rt = make_runtime(Sleepy(0.05), fallback_k=1, slow_call_ms=10)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    with caplog.at_level("ERROR", logger="vllm.banditk"):
        outs = decode_steps(rt, sch, 300)
    ks = [o.num_spec_tokens_to_schedule for o in outs]
    strikes = rt.breaker.strikes
    # The first slow calls are counted but their (valid) K is used; then the breaker opens.
    assert ks[: strikes - 1] == [3] * (strikes - 1) and ks[strikes - 1] == 1
    # Bypasses of 64, 128, ... steps: a policy slow on every call is called a handful of times.
    assert rt.policy.calls <= strikes + 3 and ks.count(1) >= 290
    assert rt.telemetry.errors["slow"] == rt.policy.calls
    assert sum("slow" in r.getMessage() for r in caplog.records) == 1


def test_governor_that_recovers_is_called_again_after_the_bypass():
    pol = Sleepy(0.05)
    # A recovered call (no sleep) is ~0.1 ms: a 10 ms budget holds it on a loaded machine,
    # where 1 ms did not (a scheduler preemption is longer).
    rt = make_runtime(pol, fallback_k=1, slow_call_ms=10)
    sch = FakeScheduler()
    sch.add("a", 4, 4)
    decode_steps(rt, sch, rt.breaker.strikes)
    assert rt.breaker.is_open
    pol.delay_s = 0.0
    outs = decode_steps(rt, sch, rt.breaker.base_cooldown + 20)
    assert [o.num_spec_tokens_to_schedule for o in outs[-10:]] == [3] * 10
    assert rt.breaker.cooldown == rt.breaker.base_cooldown and pol.calls > rt.breaker.strikes + 10


def test_slow_call_budget_must_be_positive():
    from banditk.core.errors import ConfigError

    with pytest.raises(ConfigError, match="slow_call_ms"):
        parse_settings("bandit", {"slow_call_ms": 0})


def test_the_governor_is_told_the_prompt_tokens_its_drafts_will_be_verified_next_to():
    # Step 1: "a" decodes while "p" computes the first 256 of its 600 prompt tokens and
    # "w" (100 tokens) waits: the next step, which verifies this step's drafts, computes
    # about 344 + 100 prompt tokens. Step 2: nothing is left to prefill.
    pol = RecordingPolicy([2, 2, 2])
    pol.wants_prefill_hint = True  # a policy that reads the prediction
    rt = make_runtime(pol)
    sched = FakeScheduler()
    sched.add("a", prompt=8, computed=20)
    sched.add("p", prompt=600, computed=0)
    sched.waiting = [SimpleNamespace(num_tokens=100, num_computed_tokens=0)]
    step(rt, sched, FakeOutput({"a": 1, "p": 256}))
    sched.max_num_scheduled_tokens = 400
    step(rt, sched, FakeOutput({"a": 1, "p": 256}))  # the same, within a smaller budget
    sched.waiting = []
    sched.requests["p"].num_computed_tokens = 256
    step(rt, sched, FakeOutput({"a": 1, "p": 344}))
    assert [c.prefill_tokens for c in pol.contexts] == [444, 400, 0]


OVERHEAD, TARGET, PER_DRAFT = 0.050, 0.020, 0.010


def credited_cycles(ks, runner_output, outcomes=False, idle_at_end=False):
    """Run one decoding request through steps of K ``ks``; return (K, credited s, draft s) per credit.

    A cycle verifies the last decision's drafts and then drafts for the current one (K = 0
    still runs the cache-sync forward). ``runner_output(i, drafter, out)`` is step i's runner
    output (``out``: its scheduler output, as the runtime stamped it). ``outcomes``: return the
    (decision, outcome) pairs instead; ``idle_at_end``: the request finishes after the last step.
    """
    pol = RecordingPolicy(ks)
    s = parse_settings("bandit", {}).resolve(method="draft_model", k_max=3)
    drafter = [PER_DRAFT * max(k, 1) for k in ks]
    now = [0.0]
    rt = GovernorRuntime(s, pol, clock=lambda: now[0])
    sch = FakeScheduler()
    sch.add("a", prompt=4, computed=4)
    for i in range(len(ks)):
        drafts = [7] * (ks[i - 1] if i else 0)  # the drafts of the last decision, verified now
        out = FakeOutput({"a": 1 + len(drafts)}, {"a": drafts})
        rt.on_schedule_start()
        now[0] += OVERHEAD + TARGET + drafter[i]
        rt.on_schedule(sch, out)
        rt.on_output_start()
        if i:
            rt.on_verified("a", ks[i - 1], 0, None)
        if idle_at_end and i == len(ks) - 1:
            sch.requests.clear()
        rt.on_output(sch, out, runner_output(i, drafter, out))
    if outcomes:
        return pol.observed
    return [(d.k, round(o.step_duration_s, 9), o.draft_duration_s) for d, o in pol.observed]


def own_cost(k):
    return round(OVERHEAD + TARGET + PER_DRAFT * max(k, 1), 9)


def test_a_decision_is_credited_its_own_drafter_time_not_the_next_decisions():
    """On CPU the worker times each cycle's forwards: the drafter part is swapped exactly."""
    ks = [3, 1, 3, 0, 3, 3]
    got = credited_cycles(
        ks, lambda i, drafter, out: SimpleNamespace(**{worker_timing.TIMING_ATTR: (TARGET, drafter[i])})
    )
    # Unswapped, K = 1 would be credited 0.10 s (K = 3's drafts), not 0.08 s.
    assert got == [(k, own_cost(k), PER_DRAFT * max(k, 1)) for k in ks[:-1]]


def test_on_mrv2_unstamped_late_samples_give_the_drafter_times_to_swap():
    """Samples that name no step (a worker without the stamp) arrive two steps late: a K's
    first try is credited its cycle as is, later tries the cycle with the drafter times
    swapped by the learnt estimates."""
    ks = [3, 1, 3, 3, 1, 3, 3]

    def runner_output(i, drafter, out):
        done = [Sample(ks[j], 1, TARGET, drafter[j]) for j in [i - 2] if j >= 0]
        return SimpleNamespace(**{event_timing.SAMPLES_ATTR: done})

    got = credited_cycles(ks, runner_output)
    assert [(k, t) for k, t, _ in got] == [
        (3, own_cost(1)),  # K = 1 not timed yet: cycles are credited as they are, with the
        (1, own_cost(3)),  # next decision's drafter time in them
        (3, own_cost(3)),
        (3, own_cost(3)),  # swapped: K = 1's drafter time is known by now
        (1, own_cost(1)),
        (3, own_cost(3)),
    ]
    assert all(draft is None for _, _, draft in got)  # the trace's draft_s stays what was measured


def stamped_samples(ks, late):
    """Each step's CUDA-event sample, named by the step index the runtime stamped on its
    scheduler output, riding on the output ``late`` steps later (as MRv2 delivers them)."""
    stamps = {}

    def runner_output(i, drafter, out):
        stamps[i] = event_timing.stamped_step(out)
        done = [Sample(ks[j], 1, TARGET + 0.001 * j, drafter[j], stamps[j]) for j in [i - late] if j >= 0]
        return SimpleNamespace(**{event_timing.SAMPLES_ATTR: done})

    return runner_output


@pytest.mark.parametrize("late", [1, 2])
def test_on_mrv2_each_credit_waits_for_its_steps_times_and_carries_them(late):
    """With stamped samples every decision, its first try included, is credited its own
    drafter time, and its outcome carries the measured target and drafter times (as on CPU)."""
    ks = [3, 1, 3, 3, 1, 0, 3]
    got = credited_cycles(ks, stamped_samples(ks, late), outcomes=True, idle_at_end=True)
    assert [d.k for d, _ in got] == ks[:-1]  # all credited, in order; the last ones at idle
    # Credits before the first sample came are observed at once (a runtime cannot tell MRv2
    # from a runner that never times); the last steps' samples would ride on outputs that never come.
    first, timed = late - 1, len(ks) - 1 - late
    assert all(o.target_duration_s is None for _, o in got[:first])
    for j, (_, o) in list(enumerate(got))[first:timed]:
        assert round(o.step_duration_s, 9) == own_cost(ks[j])
        assert o.draft_duration_s == PER_DRAFT * max(ks[j], 1)  # the step that drafted them
        assert o.target_duration_s == pytest.approx(TARGET + 0.001 * (j + 1))  # the step that verified them
    assert all(o.target_duration_s is None for _, o in got[timed:])


def test_on_mrv2_a_credit_whose_times_never_come_is_released_with_estimates():
    """After a first stamped sample, credits wait; a step whose sample is lost is released
    after MAX_WAIT outputs, its drafter time swapped by the estimate and no times in it."""
    from banditk.adapter.timed_credits import MAX_WAIT

    ks = [3, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    inner = stamped_samples(ks, 1)

    def runner_output(i, drafter, out):  # step 2's sample is lost
        r = inner(i, drafter, out)
        setattr(r, event_timing.SAMPLES_ATTR, [s for s in getattr(r, event_timing.SAMPLES_ATTR) if s.step != 2])
        return r

    seen = []
    pol_outcomes = credited_cycles(ks, runner_output, outcomes=True)
    for d, o in pol_outcomes:
        seen.append((d.k, o.target_duration_s is None, o.draft_duration_s is None))
    # decision 1 was verified by step 2, decision 2 drafted at step 2: neither has all its times
    assert seen[1] == (1, True, False) and seen[2] == (3, False, True)
    assert all(not t and not d for i, (_, t, d) in enumerate(seen) if i not in (1, 2))
    # released in order, and none waits longer than MAX_WAIT outputs
    assert [k for k, _, _ in seen] == ks[: len(seen)] and len(seen) >= len(ks) - 1 - MAX_WAIT
