"""Target and drafter durations on Model Runner V2, from CUDA events nobody waits on.

MRv2 runs a step asynchronously: ``execute_model`` and ``sample_tokens`` enqueue kernels and
return, and the drafter's ``speculator.propose`` runs inside ``sample_tokens``. Events recorded
at those points time the GPU's work once it gets there. A step's events are read only after
``query()`` says its last one completed, so timing never makes the host wait; each step's
durations ride on the output of a later step, as a sample that names its own K and batch
(:data:`SAMPLES_ATTR`) and the scheduler's index of the step (:data:`STEP_ATTR`, stamped on the
scheduler output). The scheduler side holds each credit until both of its steps' samples came
(:mod:`.timed_credits`), and learns the drafter's time per K for the credits that cannot wait
(:mod:`.draft_times`).

MRv2's own ``StepTimingCollector`` cannot serve: its record calls do nothing outside
``collect()``, which syncs on exit, and only the start-up cost profile runs inside it.

Nothing here may stop the engine: the first error turns the timer off and is logged once.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from banditk.adapter import vllm_compat
from banditk.adapter.attachments import attached

logger = logging.getLogger("vllm.banditk")

#: Attribute set on ``ModelRunnerOutput``: a list of :class:`Sample` of steps the GPU finished.
SAMPLES_ATTR = "banditk_gpu_timings"
#: Attribute set on ``SchedulerOutput`` by the scheduler side: the step's ledger index. The
#: output is a plain dataclass, pickled to the workers, so the attribute travels with it.
STEP_ATTR = "banditk_step"
#: Steps whose events may wait for the GPU; older ones are dropped (never read, never waited on).
MAX_PENDING = 64

_installed = False


@dataclass(frozen=True)
class Sample:
    """One finished step: its K, the requests it ran, its target and drafter GPU time, and its
    ledger index (None where the scheduler output carried none)."""

    k: int
    num_reqs: int
    target_s: float
    draft_s: float
    step: int | None = None


@dataclass
class _Step:
    k: int
    num_reqs: int
    start: Any
    step: int | None = None
    draft_start: Any = None
    draft_end: Any = None
    end: Any = None


class EventTimer:
    """The step being recorded and the steps waiting for the GPU, for one model runner.

    ``new_event`` makes a recorded timing event (``torch.cuda.Event(enable_timing=True)``
    then ``.record()``); tests pass fakes.
    """

    def __init__(self, new_event: Callable[[], Any], max_pending: int = MAX_PENDING) -> None:
        self._new_event = new_event
        self._current: _Step | None = None
        self._pending: deque[_Step] = deque(maxlen=max_pending)

    def begin(self, k: int, num_reqs: int, step: int | None = None) -> None:
        self._current = _Step(int(k), int(num_reqs), self._new_event(), step)

    @property
    def recording(self) -> bool:
        return self._current is not None

    def draft_begin(self) -> None:
        if self._current is not None:
            self._current.draft_start = self._new_event()

    def draft_end(self) -> None:
        if self._current is not None and self._current.draft_start is not None:
            self._current.draft_end = self._new_event()

    def end(self) -> None:
        """Close the step being recorded; it waits for the GPU from here."""
        step, self._current = self._current, None
        if step is not None:
            step.end = self._new_event()
            self._pending.append(step)

    def finished(self) -> list[Sample]:
        """The samples of the oldest steps whose last event completed; never waits."""
        out = []
        while self._pending and self._pending[0].end.query():
            s = self._pending.popleft()
            drafted = s.draft_start is not None and s.draft_end is not None
            target_ms = s.start.elapsed_time(s.draft_start if drafted else s.end)
            draft_ms = s.draft_start.elapsed_time(s.draft_end) if drafted else 0.0
            out.append(Sample(s.k, s.num_reqs, target_ms / 1e3, draft_ms / 1e3, s.step))
        return out


def stamp(scheduler_output: Any, step: int) -> None:
    """Name the step on its scheduler output, for the worker's sample of it."""
    setattr(scheduler_output, STEP_ATTR, int(step))


def stamped_step(scheduler_output: Any) -> int | None:
    step = getattr(scheduler_output, STEP_ATTR, None)
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def read(model_runner_output: Any) -> list[Sample]:
    """The samples a worker attached to this output (none where MRv2 timing is off)."""
    return attached(model_runner_output, SAMPLES_ATTR, Sample)


# ---- the runner's methods, wrapped ------------------------------------------------------------


def install() -> bool:
    """Wrap MRv2's model runner once per process, where it can run; return whether timing is on."""
    global _installed
    if _installed:
        return True
    if not vllm_compat.platform_has_cuda_graphs():
        return False
    runner = vllm_compat.mrv2_runner_class()
    runner.execute_model = wrap_execute(runner.execute_model, _cuda_event)
    runner.sample_tokens = wrap_sample(runner.sample_tokens)
    _installed = True
    return True


def _cuda_event() -> Any:
    import torch

    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def wrap_execute(fn, new_event: Callable[[], Any]):
    """``execute_model``: a real step (not a dummy run, tokens scheduled) starts its timing."""

    @functools.wraps(fn)
    def execute_model(self, scheduler_output, *args, **kwargs):
        timer = getattr(self, "_banditk_timer", None)
        if timer is None and not getattr(self, "_banditk_timer_off", False):
            timer = _attach_timer(self, new_event)
        if timer is not None and not kwargs.get("dummy_run", False):
            try:
                if scheduler_output.total_num_scheduled_tokens > 0:
                    timer.begin(
                        vllm_compat.num_spec_tokens(scheduler_output),
                        len(scheduler_output.num_scheduled_tokens),
                        stamped_step(scheduler_output),
                    )
            except Exception as e:
                _turn_off(self, e)
        return fn(self, scheduler_output, *args, **kwargs)

    return execute_model


def wrap_sample(fn):
    """``sample_tokens``: the step ends when it returns; finished steps ride on its output."""

    @functools.wraps(fn)
    def sample_tokens(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        timer = getattr(self, "_banditk_timer", None)
        if timer is None:
            return out
        try:
            timer.end()
            samples = timer.finished()
            target = getattr(out, "model_runner_output", out)  # AsyncOutput carries it
            if samples and target is not None:
                setattr(target, SAMPLES_ATTR, samples)
        except Exception as e:
            _turn_off(self, e)
        return out

    return sample_tokens


def _attach_timer(runner: Any, new_event: Callable[[], Any]) -> EventTimer | None:
    """A timer for this runner, with its drafter's ``propose`` wrapped; None without a drafter."""
    speculator = getattr(runner, "speculator", None)
    if speculator is None:
        runner._banditk_timer_off = True  # no drafts, no K to learn
        return None
    timer = EventTimer(new_event)
    propose = speculator.propose

    @functools.wraps(propose)
    def timed_propose(*args, **kwargs):
        timed = timer.recording and not kwargs.get("dummy_run", False)
        if timed:
            timer.draft_begin()
        try:
            return propose(*args, **kwargs)
        finally:
            if timed:
                timer.draft_end()

    speculator.propose = timed_propose
    runner._banditk_timer = timer
    logger.info("banditk: target and drafter durations come from CUDA events on Model Runner V2.")
    return timer


def _turn_off(runner: Any, e: Exception) -> None:
    runner._banditk_timer = None
    runner._banditk_timer_off = True
    logger.warning(
        "banditk: CUDA-event timing is off (%s: %s); the governor credits measured step time.", type(e).__name__, e
    )
