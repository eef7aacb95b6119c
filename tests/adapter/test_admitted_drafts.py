"""Adaptive verification's admitted drafts: read back on the worker without waiting, and only
what was verified reaches the acceptance posterior (fakes stand in for MRv2 and CUDA)."""

from types import SimpleNamespace

import numpy as np
import pytest

from banditk.adapter import admitted_drafts
from banditk.adapter.admitted_drafts import AdmittedLog, HeldVerifications, StepCounts
from banditk.adapter.runtime import GovernorRuntime
from banditk.adapter.settings import parse_settings
from tests.adapter.test_runtime import FakeOutput, FakeScheduler, RecordingPolicy


class FakeEvent:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done


class FakeCopies:
    """``copy_to_host``: hands back the counts as a list, behind an event the test completes."""

    def __init__(self):
        self.events = []

    def __call__(self, gpu_counts):
        self.events.append(FakeEvent())
        return np.asarray(gpu_counts), self.events[-1]


def test_counts_are_exact_at_once_where_the_budget_does_not_bind():
    log = AdmittedLog(FakeCopies())
    log.record(1, ["a", "b"], [3, 2], budget=5, gpu_counts=None)  # every draft verified
    log.record(2, ["a", "b"], [3, 2], budget=0, gpu_counts=None)  # none
    assert log.finished() == [StepCounts(1, {"a": 3, "b": 2}), StepCounts(2, {"a": 0, "b": 0})]
    assert log.finished() == []


def test_a_binding_budget_waits_for_its_copy_and_never_blocks():
    copies = FakeCopies()
    log = AdmittedLog(copies)
    log.record(7, ["a", "b"], [3, 3], budget=4, gpu_counts=np.array([3, 1, 9]))
    assert log.finished() == []  # the copy has not landed: nothing, and no wait
    copies.events[0].done = True
    assert log.finished() == [StepCounts(7, {"a": 3, "b": 1})]


def test_copies_in_flight_are_bounded_and_a_dropped_step_is_never_guessed():
    copies = FakeCopies()
    log = AdmittedLog(copies, max_pending=2)
    for step in (1, 2, 3):
        log.record(step, ["a"], [3], budget=1, gpu_counts=np.array([step % 2]))
    assert log.dropped == 1
    for e in copies.events:
        e.done = True
    assert [c.step for c in log.finished()] == [2, 3]


def test_a_step_without_a_ledger_index_is_not_recorded():
    log = AdmittedLog(FakeCopies())
    log.record(None, ["a"], [3], budget=3, gpu_counts=None)
    assert log.finished() == []


class FakeManager:
    """The manager's shape (vllm_compat assumption 16): the budget it consumes, the admitted
    counts it leaves in ``_batch_draft_capacity``."""

    def __init__(self, admitted):
        self._admitted = admitted
        self._batch_draft_capacity = np.zeros(8, dtype=np.int32)

    def reallocate_drafts(self, req_ids, idx_mapping):
        self._batch_budget = None
        self._batch_draft_capacity[: len(req_ids)] = self._admitted
        return "inputs"


def test_the_wrapped_manager_logs_what_it_admitted_for_the_named_step():
    copies = FakeCopies()
    wrapped = admitted_drafts.wrap_reallocate(FakeManager.reallocate_drafts, copies)
    m = FakeManager([2, 0])
    m._batch_budget = ({"a": 3, "b": 3}, {"a": 1, "b": 1}, 2)
    m._banditk_step = 5
    assert wrapped(m, ["a", "b"], None) == "inputs"
    copies.events[0].done = True
    assert m._banditk_admitted.finished() == [StepCounts(5, {"a": 2, "b": 0})]


def test_a_manager_of_another_shape_turns_the_counts_off_and_still_runs(caplog):
    calls = []

    def reallocate_drafts(self, req_ids, idx_mapping):
        calls.append(req_ids)
        return "inputs"

    wrapped = admitted_drafts.wrap_reallocate(reallocate_drafts, FakeCopies())
    m = SimpleNamespace(_batch_budget=None)  # not a (drafts, tokens, budget) triple
    assert wrapped(m, ["a"], None) == "inputs"
    assert calls == [["a"]] and m._banditk_admitted_off
    assert "admitted drafts cannot be read" in caplog.text


def test_the_runner_names_the_step_and_its_output_carries_the_counts():
    log = AdmittedLog(FakeCopies())
    manager = SimpleNamespace(_banditk_admitted=log)
    runner = SimpleNamespace(adaptive_verification=manager)
    execute = admitted_drafts.wrap_execute(lambda self, out, **kw: "executed")
    sample = admitted_drafts.wrap_sample(lambda self: SimpleNamespace(model_runner_output=SimpleNamespace()))
    out = SimpleNamespace(banditk_step=9)
    assert execute(runner, out) == "executed" and manager._banditk_step == 9
    execute(runner, out, dummy_run=True)
    assert manager._banditk_step is None  # a dummy run is no step of the ledger
    log.record(9, ["a"], [2], budget=2, gpu_counts=None)
    async_out = sample(runner)
    assert admitted_drafts.read(async_out.model_runner_output) == [StepCounts(9, {"a": 2})]


def test_held_verifications_are_cut_to_what_was_admitted():
    held = HeldVerifications()
    held.hold(3, [("a", 4, 2), ("b", 4, 1), ("c", 4, 0)])
    held.hold(4, [("a", 4, 4)])
    assert held.release([StepCounts(3, {"a": 2, "b": 4})]) == [(3, [("a", 2, 2), ("b", 4, 1)])]  # c: unknown
    assert held.num_held == 1 and held.holds(4) and not held.holds(3)
    assert held.release([StepCounts(3, {"a": 1})]) == []  # released once


def test_held_steps_are_bounded():
    held = HeldVerifications(max_held=2)
    for s in range(4):
        held.hold(s, [("a", 3, 1)])
    assert held.dropped == 2 and held.num_held == 2
    assert held.release([StepCounts(0, {"a": 3})]) == []


def _runtime(held, steps=8):
    s = parse_settings("bandit", {}).resolve(method="draft_model", k_max=4)
    rt = GovernorRuntime(s, RecordingPolicy([4] * steps), clock=iter(np.arange(0.0, 100.0, 0.5)).__next__)
    rt.held = held
    return rt


def _verify_step(rt, sched, counts):
    """One step of request "a" that verifies 4 drafts and accepts 2, its output carrying ``counts``."""
    out = FakeOutput({"a": 5}, {"a": [7] * 4})
    rt.on_schedule_start()
    rt.on_schedule(sched, out)
    rt.on_output_start(out)
    rt.on_verified("a", 4, 2, None)
    runner_output = SimpleNamespace()
    if counts is not None:
        setattr(runner_output, admitted_drafts.COUNTS_ATTR, counts(out.banditk_step))
    rt.on_output(sched, out, runner_output)


@pytest.mark.parametrize(
    ("admitted", "reached_third"),
    [
        (None, 1),  # no adaptive verification: the third draft was verified and rejected
        (2, 0),  # trimmed after two: the third was never verified, so not a rejection
        (4, 1),  # all four admitted: rejected, as without trimming
    ],
)
def test_the_acceptance_posterior_learns_only_what_was_verified(admitted, reached_third):
    sched = FakeScheduler()
    sched.add("a", prompt=4, computed=4)
    rt = _runtime(None if admitted is None else HeldVerifications())
    counts = None if admitted is None else (lambda step: [StepCounts(step, {"a": admitted})])
    _verify_step(rt, sched, counts)
    assert rt.telemetry.accepted_per_position.tolist()[:2] == [1, 1]
    assert rt.telemetry.reached_per_position.tolist()[2] == reached_third


def test_counts_that_come_a_step_late_are_matched_to_their_step():
    sched = FakeScheduler()
    sched.add("a", prompt=4, computed=4)
    rt = _runtime(HeldVerifications())
    first = []
    _verify_step(rt, sched, lambda step: first.append(step) or [])
    assert rt.telemetry.num_drafts == 0  # held: its counts have not come
    _verify_step(rt, sched, lambda step: [StepCounts(first[0], {"a": 3}), StepCounts(step, {"a": 4})])
    assert rt.telemetry.num_drafts == 2
    assert rt.telemetry.num_draft_tokens == 3 + 4


def _decision_steps(counts_at):
    """Steps of request "a" (4 drafts verified, 2 accepted each) under adaptive verification;
    ``counts_at(i, steps)`` gives the admitted counts the i-th output carries. Returns the
    runtime and what its policy observed."""
    sched = FakeScheduler()
    sched.add("a", prompt=4, computed=4)
    rt = _runtime(HeldVerifications(), steps=len(counts_at.plan))
    steps = []
    for i in range(len(counts_at.plan)):
        out = FakeOutput({"a": 5}, {"a": [7] * 4})
        rt.on_schedule_start()
        rt.on_schedule(sched, out)
        steps.append(out.banditk_step)
        rt.on_output_start(out)
        if i:
            rt.on_verified("a", 4, 2, None)
        runner_output = SimpleNamespace()
        setattr(runner_output, admitted_drafts.COUNTS_ATTR, counts_at(i, steps))
        rt.on_output(sched, out, runner_output)
    return rt, rt.policy.observed


class _Plan:
    def __init__(self, plan):
        self.plan = plan  # per output: [(index of the step counted, admitted)]

    def __call__(self, i, steps):
        return [StepCounts(steps[j], {"a": n}) for j, n in self.plan[i]]


def test_the_governor_is_credited_what_was_admitted_not_what_was_scheduled():
    rt, observed = _decision_steps(_Plan([[], [(1, 2)], [(2, 3)]]))
    assert [o.position_counts(4) for _, o in observed] == [([1, 1, 0, 0], [0, 0, 0, 0]), ([1, 1, 0, 0], [0, 0, 1, 0])]


def test_a_credit_waits_for_counts_that_come_late():
    rt, observed = _decision_steps(_Plan([[], [], [(1, 2)], [(2, 4), (3, 4)]]))
    assert [o.position_counts(4) for _, o in observed] == [
        ([1, 1, 0, 0], [0, 0, 0, 0]),  # step 1's came with output 2
        ([1, 1, 0, 0], [0, 0, 1, 0]),
        ([1, 1, 0, 0], [0, 0, 1, 0]),
    ]


def test_a_credit_whose_counts_never_come_teaches_time_not_acceptance():
    plan = [[]] * (admitted_drafts.MAX_HELD + 4)
    rt, observed = _decision_steps(_Plan(plan))
    assert observed, "credits whose counts never came are not lost"
    assert all(o.position_counts(4) == ([0] * 4, [0] * 4) and o.step_duration_s > 0 for _, o in observed)
    rt.close()  # the rest, flushed
    assert len(rt.policy.observed) == len(plan) - 1 and not rt._awaiting
