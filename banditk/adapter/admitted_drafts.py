"""What vLLM's adaptive verification admitted: the drafts each request actually had verified.

Under ``enable_adaptive_verification`` the governor's K is the number drafted, and vLLM's
worker then verifies only a budget of them, the slots most likely to survive
(``AdaptiveVerificationManager.reallocate_drafts``). vLLM's scheduler still counts every
scheduled draft that was not accepted as rejected, so a trimmed draft would read as a
rejection and the acceptance posterior would learn acceptance too low.

The worker side records, per step, how many drafts each request had admitted:
- exact on the host where the budget does not bind (all admitted) or is zero (none);
- otherwise from the GPU's admitted counts, copied to a pinned buffer of the step's own behind
  an event that is only queried, never waited on (as :mod:`.event_timing`), and riding on a
  later step's output (:data:`COUNTS_ATTR`). Past :data:`MAX_PENDING` steps in flight the oldest
  is dropped: its acceptance is not observed, never guessed.

The scheduler side (:class:`HeldVerifications`) holds a step's verifications until its counts
come and credits ``min(scheduled, admitted)`` drafts: positions past the admitted ones were never
verified, so they are neither accepted nor rejected.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from banditk.adapter import vllm_compat
from banditk.adapter.attachments import attached

logger = logging.getLogger("vllm.banditk")

#: Attribute set on ``ModelRunnerOutput``: a list of :class:`StepCounts` the worker has read.
COUNTS_ATTR = "banditk_admitted_drafts"
#: Attribute the execute wrapper sets on the verification manager: the step being prepared.
_STEP_ATTR = "_banditk_step"
#: Steps whose copies may be in flight on the worker; older ones are dropped unread.
MAX_PENDING = 64
#: Steps the scheduler holds waiting for counts; older ones are dropped unobserved.
MAX_HELD = 64

_installed = False


@dataclass(frozen=True)
class StepCounts:
    """The drafts adaptive verification admitted for each request of one step (by ledger index)."""

    step: int
    admitted: dict[str, int]


# ---- worker side -----------------------------------------------------------------------------


@dataclass
class _Pending:
    step: int
    req_ids: list[str]
    host: Any  # pinned host tensor, filled once ``event`` completes
    event: Any


class AdmittedLog:
    """One runner's admitted counts: exact ones at once, copied ones once their event completed.

    ``copy_to_host(gpu_counts)`` returns ``(host_tensor, event)`` for an asynchronous copy;
    tests pass fakes.
    """

    def __init__(self, copy_to_host: Callable[[Any], tuple[Any, Any]], max_pending: int = MAX_PENDING) -> None:
        self._copy_to_host = copy_to_host
        self._ready: list[StepCounts] = []
        self._pending: deque[_Pending] = deque()
        self._max_pending = max_pending
        self.dropped = 0

    def record(self, step: int | None, req_ids: list[str], scheduled: list[int], budget: int, gpu_counts) -> None:
        """One ``reallocate_drafts``: ``scheduled`` drafts per request, ``budget`` verified in all."""
        if step is None:
            return
        if budget <= 0:
            self._ready.append(StepCounts(step, dict.fromkeys(req_ids, 0)))
        elif budget >= sum(scheduled):
            self._ready.append(StepCounts(step, dict(zip(req_ids, scheduled, strict=True))))
        else:
            host, event = self._copy_to_host(gpu_counts[: len(req_ids)])
            self._pending.append(_Pending(step, list(req_ids), host, event))
            if len(self._pending) > self._max_pending:
                self._pending.popleft()
                self.dropped += 1

    def finished(self) -> list[StepCounts]:
        """The counts read so far, oldest first; never waits for the GPU."""
        self._collect()
        out, self._ready = self._ready, []
        return out

    def _collect(self) -> None:
        while self._pending and self._pending[0].event.query():
            p = self._pending.popleft()
            counts = [int(n) for n in p.host.tolist()]
            self._ready.append(StepCounts(p.step, dict(zip(p.req_ids, counts, strict=True))))


def read(model_runner_output: Any) -> list[StepCounts]:
    """The counts a worker attached to this output (none without adaptive verification)."""
    return attached(model_runner_output, COUNTS_ATTR, StepCounts)


def install() -> bool:
    """Wrap MRv2's verification manager and runner once per process; return whether it is on."""
    global _installed
    if _installed:
        return True
    if not vllm_compat.platform_has_cuda_graphs():
        return False
    manager = vllm_compat.adaptive_verification_manager_class()
    manager.reallocate_drafts = wrap_reallocate(manager.reallocate_drafts, _cuda_copy)
    runner = vllm_compat.mrv2_runner_class()
    runner.execute_model = wrap_execute(runner.execute_model)
    runner.sample_tokens = wrap_sample(runner.sample_tokens)
    _installed = True
    return True


def _cuda_copy(gpu_counts) -> tuple[Any, Any]:
    import torch

    host = torch.empty(gpu_counts.shape, dtype=gpu_counts.dtype, pin_memory=True)
    host.copy_(gpu_counts, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


def wrap_reallocate(fn, copy_to_host: Callable[[Any], tuple[Any, Any]]):
    """``reallocate_drafts(req_ids, idx_mapping)``: read the budget it consumes, log what it admits."""

    @functools.wraps(fn)
    def reallocate_drafts(self, req_ids, *args, **kwargs):
        try:
            drafts_per_req, _, budget = self._batch_budget
            scheduled = [int(drafts_per_req[r]) for r in req_ids]
        except Exception as e:
            _turn_off(self, e)
            return fn(self, req_ids, *args, **kwargs)
        out = fn(self, req_ids, *args, **kwargs)
        log = _log_of(self, copy_to_host)
        if log is not None:
            try:  # the kernel left each request's admitted count in the capacity buffer
                log.record(
                    getattr(self, _STEP_ATTR, None), list(req_ids), scheduled, int(budget), self._batch_draft_capacity
                )
            except Exception as e:
                _turn_off(self, e)
        return out

    return reallocate_drafts


def wrap_execute(fn):
    """``execute_model``: name the step on the verification manager before it prepares inputs."""

    @functools.wraps(fn)
    def execute_model(self, scheduler_output, *args, **kwargs):
        manager = getattr(self, "adaptive_verification", None)
        if manager is not None:
            step = None if kwargs.get("dummy_run", False) else _stamped_step(scheduler_output)
            setattr(manager, _STEP_ATTR, step)
        return fn(self, scheduler_output, *args, **kwargs)

    return execute_model


def wrap_sample(fn):
    """``sample_tokens``: the counts read so far ride on its output."""

    @functools.wraps(fn)
    def sample_tokens(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        log = getattr(getattr(self, "adaptive_verification", None), "_banditk_admitted", None)
        if log is not None:
            try:
                counts = log.finished()
                target = getattr(out, "model_runner_output", out)  # AsyncOutput carries it
                if counts and target is not None:
                    setattr(target, COUNTS_ATTR, counts)
            except Exception as e:
                _turn_off(self.adaptive_verification, e)
        return out

    return sample_tokens


def _stamped_step(scheduler_output: Any) -> int | None:
    from banditk.adapter.event_timing import stamped_step

    return stamped_step(scheduler_output)


def _log_of(manager: Any, copy_to_host) -> AdmittedLog | None:
    if getattr(manager, "_banditk_admitted_off", False):
        return None
    log = getattr(manager, "_banditk_admitted", None)
    if log is None:
        log = manager._banditk_admitted = AdmittedLog(copy_to_host)
        logger.info("banditk: adaptive verification's admitted drafts are read back; trimmed drafts are not learned.")
    return log


def _turn_off(manager: Any, e: Exception) -> None:
    manager._banditk_admitted = None
    manager._banditk_admitted_off = True
    logger.warning(
        "banditk: adaptive verification's admitted drafts cannot be read (%s: %s); the governor stops learning "
        "acceptance and keeps what it has.",
        type(e).__name__,
        e,
    )


# ---- scheduler side --------------------------------------------------------------------------


class HeldVerifications:
    """Each step's ``(request_id, scheduled, accepted)`` verifications until its admitted counts come."""

    def __init__(self, max_held: int = MAX_HELD) -> None:
        self._held: OrderedDict[int, list[tuple[str, int, int]]] = OrderedDict()
        self._max_held = max_held
        self.dropped = 0

    def hold(self, step: int | None, verified: list[tuple[str, int, int]]) -> None:
        if step is None or not verified:
            return
        self._held[step] = verified
        while len(self._held) > self._max_held:
            self._held.popitem(last=False)
            self.dropped += 1

    def release(self, counts: Iterable[StepCounts]) -> list[tuple[int, list[tuple[str, int, int]]]]:
        """``(step, verifications)`` of the held steps whose counts came, each draft count cut
        to what was admitted.

        A request missing from its step's counts is left out: what it had verified is unknown.
        """
        out = []
        for c in counts:
            held = self._held.pop(c.step, None)
            if held is None:
                continue
            cut = []
            for req_id, scheduled, accepted in held:
                admitted = c.admitted.get(req_id)
                if admitted is not None:
                    verified = min(scheduled, admitted)
                    cut.append((req_id, verified, min(accepted, verified)))
            out.append((c.step, cut))
        return out

    def holds(self, step: int) -> bool:
        """Whether ``step``'s verifications still wait for their counts."""
        return step in self._held

    @property
    def num_held(self) -> int:
        return len(self._held)
