"""CUDA-event timing on Model Runner V2, with fake events and a fake runner (no GPU here).

A fake event is recorded at the fake GPU clock and completes once the GPU has passed it, so
the tests can hold the GPU behind the host the way async scheduling does.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from banditk.adapter import event_timing
from banditk.adapter.event_timing import EventTimer, Sample


class Gpu:
    """A GPU clock: work enqueued at ``t``; ``done_until`` is how far the GPU has finished."""

    def __init__(self):
        self.t, self.done_until = 0.0, 0.0

    def event(self):
        gpu, t = self, self.t

        class Event:
            time = t

            def query(self):
                return gpu.done_until >= t

            def elapsed_time(self, other):
                return (other.time - t) * 1e3  # milliseconds, as torch's

        return Event()


def test_finished_steps_come_out_in_order_once_the_gpu_passes_their_end():
    gpu = Gpu()
    timer = EventTimer(gpu.event)
    for k, (target, draft) in enumerate([(0.010, 0.002), (0.012, 0.003)], start=1):
        timer.begin(k, num_reqs=4 * k)
        gpu.t += target
        timer.draft_begin()
        gpu.t += draft
        timer.draft_end()
        timer.end()
    assert timer.finished() == []  # the GPU has done nothing yet: nothing is read, nothing waits
    gpu.done_until = 0.013  # the first step's end (t = 0.012), not the second's
    assert timer.finished() == [Sample(1, 4, pytest.approx(0.010), pytest.approx(0.002))]
    gpu.done_until = 1.0
    assert timer.finished() == [Sample(2, 8, pytest.approx(0.012), pytest.approx(0.003))]
    assert timer.finished() == []


def test_a_step_without_drafter_is_all_target_and_pending_steps_are_bounded():
    gpu = Gpu()
    timer = EventTimer(gpu.event, max_pending=2)
    for _ in range(3):
        timer.begin(0, num_reqs=1)
        gpu.t += 0.005
        timer.end()
    gpu.done_until = 1.0
    assert timer.finished() == [Sample(0, 1, pytest.approx(0.005), 0.0)] * 2  # the oldest was dropped


# ---- the wrapped runner ------------------------------------------------------------------------


class FakeSpeculator:
    def __init__(self, gpu, cost_per_k):
        self.gpu, self.cost_per_k, self.calls = gpu, cost_per_k, []

    def propose(self, *args, num_speculative_tokens=None, dummy_run=False, **kwargs):
        self.calls.append(dummy_run)
        self.gpu.t += self.cost_per_k * max(num_speculative_tokens or 0, 1)


class FakeRunner:
    """MRv2's shape: execute_model enqueues the forward; sample_tokens runs the drafter inside."""

    def __init__(self, gpu, speculator):
        self.gpu, self.speculator, self._k = gpu, speculator, 0

    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False):
        self._k = scheduler_output.num_spec_tokens_to_schedule
        self.gpu.t += 0.010 * len(scheduler_output.num_scheduled_tokens)

    def sample_tokens(self, grammar_output):
        if self.speculator is not None:
            self.speculator.propose(num_speculative_tokens=self._k)
        return SimpleNamespace(model_runner_output=SimpleNamespace())


def wrapped_runner(gpu, speculator):
    cls = type(
        "Runner",
        (FakeRunner,),
        {
            "execute_model": event_timing.wrap_execute(FakeRunner.execute_model, gpu.event),
            "sample_tokens": event_timing.wrap_sample(FakeRunner.sample_tokens),
        },
    )
    return cls(gpu, speculator)


def sched_out(k, reqs):
    return SimpleNamespace(
        num_spec_tokens_to_schedule=k,
        num_scheduled_tokens={f"r{i}": 1 + k for i in range(reqs)},
        total_num_scheduled_tokens=reqs * (1 + k),
    )


def test_each_real_step_rides_on_a_later_output_with_its_k_and_batch():
    gpu = Gpu()
    runner = wrapped_runner(gpu, FakeSpeculator(gpu, cost_per_k=0.001))
    outs, ends = [], [0.0]
    for k, reqs in [(3, 2), (1, 2), (0, 3), (2, 1)]:
        runner.execute_model(sched_out(k, reqs))
        gpu.done_until = ends[-1]  # the GPU runs a step behind the host
        outs.append(runner.sample_tokens(None))
        ends.append(gpu.t)
    got = [event_timing.read(o.model_runner_output) for o in outs]
    assert got[0] == []  # nothing finished when the first step returned
    assert got[1] == [Sample(3, 2, pytest.approx(0.020), pytest.approx(0.003))]  # step 1, a step late
    assert got[2] == [Sample(1, 2, pytest.approx(0.020), pytest.approx(0.001))]
    assert got[3] == [Sample(0, 3, pytest.approx(0.030), pytest.approx(0.001))]  # K = 0: the cache sync


def test_dummy_runs_and_empty_steps_are_not_timed():
    gpu = Gpu()
    spec = FakeSpeculator(gpu, cost_per_k=0.001)
    runner = wrapped_runner(gpu, spec)
    runner.execute_model(sched_out(2, 2), dummy_run=True)
    spec.propose(num_speculative_tokens=2, dummy_run=True)  # the capture's drafter run
    runner.sample_tokens(None)
    empty = SimpleNamespace(num_spec_tokens_to_schedule=2, num_scheduled_tokens={}, total_num_scheduled_tokens=0)
    runner.execute_model(empty)
    runner.sample_tokens(None)
    gpu.done_until = gpu.t  # all of that is done; the real step below is still running
    runner.execute_model(sched_out(1, 1))
    out = runner.sample_tokens(None)
    assert event_timing.read(out.model_runner_output) == []  # only the real step is pending, and unread
    runner.execute_model(sched_out(1, 1))
    gpu.done_until = 2.0
    out = runner.sample_tokens(None)
    assert [s.k for s in event_timing.read(out.model_runner_output)] == [1, 1]


def test_a_runner_without_drafter_is_left_alone_and_a_broken_step_turns_timing_off(caplog):
    gpu = Gpu()
    plain = wrapped_runner(gpu, None)
    plain.execute_model(sched_out(0, 1))
    assert not hasattr(plain.sample_tokens(None).model_runner_output, event_timing.SAMPLES_ATTR)
    assert plain._banditk_timer_off and getattr(plain, "_banditk_timer", None) is None

    runner = wrapped_runner(gpu, FakeSpeculator(gpu, cost_per_k=0.001))
    broken = SimpleNamespace(total_num_scheduled_tokens=2, num_scheduled_tokens={"a": 2})  # no K field
    with pytest.raises(AttributeError):
        runner.execute_model(broken)  # the runner's own failure, not the timer's
    assert runner._banditk_timer is None and "CUDA-event timing is off" in caplog.text
    runner.execute_model(sched_out(1, 1))  # the engine goes on, untimed
    gpu.done_until = 9.0
    assert event_timing.read(runner.sample_tokens(None).model_runner_output) == []


def test_read_ignores_what_is_not_a_sample_list():
    assert event_timing.read(SimpleNamespace()) == []
    assert event_timing.read(SimpleNamespace(**{event_timing.SAMPLES_ATTR: "x"})) == []
    s = Sample(1, 1, 0.1, 0.01)
    assert event_timing.read(SimpleNamespace(**{event_timing.SAMPLES_ATTR: [s, 3]})) == [s]


def test_a_sample_names_the_step_stamped_on_its_scheduler_output():
    gpu = Gpu()
    runner = wrapped_runner(gpu, FakeSpeculator(gpu, cost_per_k=0.001))
    for step, k in [(7, 2), (8, 1)]:
        out = sched_out(k, 2)
        event_timing.stamp(out, step)
        runner.execute_model(out)
        runner.sample_tokens(None)
    unstamped = sched_out(1, 2)
    runner.execute_model(unstamped)
    gpu.done_until = 1.0
    out = runner.sample_tokens(None)
    assert [(s.step, s.k) for s in event_timing.read(out.model_runner_output)] == [(7, 2), (8, 1), (None, 1)]
