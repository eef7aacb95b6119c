"""The values that cross the governor's two calls.

``select(StepContext) -> Decision`` once per scheduler step, then
``observe(Decision, StepOutcome)`` when that step's verification result arrives
(possibly one step later). These are small frozen values, validated on
construction so that a bad value is caught where it is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from banditk.core.drafters import DRAFTER_CLASSES, check_drafter_class
from banditk.core.errors import InvalidContextError, InvalidOutcomeError


def _check_int(value: object, name: str, lo: int, hi: int | None, exc: type[Exception]) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise exc(f"`{name}` must be an integer, got {value!r}.")
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise exc(f"`{name}` must be {bound}, got {value!r}.")
    return int(value)


def _check_duration(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidOutcomeError(f"`{name}` must be a number of seconds, got {value!r}.")
    v = float(value)
    if not math.isfinite(v) or v < 0.0:
        raise InvalidOutcomeError(f"`{name}` must be finite and >= 0 seconds, got {value!r}.")
    return v


@dataclass(frozen=True, slots=True)
class StepContext:
    """What the governor sees before a scheduler step.

    Attributes:
        num_decoding: requests that decode this step (B). Prefill-only requests
            are excluded: counting them is what makes vLLM's table thrash.
        k_max: the largest K the server allows (``num_speculative_tokens``).
        drafter_class: the drafter class, one of :data:`banditk.core.drafters.DRAFTER_CLASSES`.
        kv_usage: fraction of the KV cache in use, in [0, 1].
        queue_len: requests waiting to be scheduled.
        num_scheduled: every request scheduled this step, prefills included
            (only vLLM's table baseline uses it). Defaults to ``num_decoding``.
        prefill_tokens: prompt tokens expected in the step that verifies this
            decision's drafts (0: a decode-only step). vLLM verifies a step later and
            the adapter predicts it from the prefills already under way or waiting; a
            prompt that arrives in between is not in it. The simulator predicts the same way.
        context_tokens: tokens in the KV cache of the decoding requests, summed (prompt
            and generated so far). Attention reads them every step whatever K is, so a
            long context makes verification relatively cheaper. 0: not known.
        running_prefill_tokens: prompt tokens computed in the step before the one that
            verifies this decision's drafts, whose K the previous decision fixed. vLLM's
            adapter knows them for sure where the prediction for that step could not (a
            prompt that arrived since), so a run of chunks keeps the K it began with.
            0: none, or not known.
    """

    num_decoding: int
    k_max: int
    drafter_class: str
    kv_usage: float = 0.0
    queue_len: int = 0
    num_scheduled: int = -1
    prefill_tokens: int = 0
    context_tokens: int = 0
    running_prefill_tokens: int = 0

    def __post_init__(self) -> None:
        # The adapter's every step: plain non-negative ints and a float fraction, checked inline.
        if (
            type(self.num_decoding) is int
            and self.num_decoding >= 0
            and type(self.prefill_tokens) is int
            and self.prefill_tokens >= 0
            and type(self.context_tokens) is int
            and self.context_tokens >= 0
            and type(self.running_prefill_tokens) is int
            and self.running_prefill_tokens >= 0
            and type(self.queue_len) is int
            and self.queue_len >= 0
            and type(self.k_max) is int
            and 0 <= self.k_max <= 64
            and type(self.kv_usage) is float
            and 0.0 <= self.kv_usage <= 1.0
            and type(self.drafter_class) is str
            and self.drafter_class in DRAFTER_CLASSES
        ):
            if self.num_scheduled == -1:
                object.__setattr__(self, "num_scheduled", self.num_decoding)
            elif type(self.num_scheduled) is not int or self.num_scheduled < 0:
                _check_int(self.num_scheduled, "num_scheduled", 0, None, InvalidContextError)
            return
        _check_int(self.num_decoding, "num_decoding", 0, None, InvalidContextError)
        _check_int(self.prefill_tokens, "prefill_tokens", 0, None, InvalidContextError)
        _check_int(self.context_tokens, "context_tokens", 0, None, InvalidContextError)
        _check_int(self.running_prefill_tokens, "running_prefill_tokens", 0, None, InvalidContextError)
        _check_int(self.k_max, "k_max", 0, 64, InvalidContextError)
        _check_int(self.queue_len, "queue_len", 0, None, InvalidContextError)
        check_drafter_class(self.drafter_class)
        kv = self.kv_usage
        if isinstance(kv, bool) or not isinstance(kv, (int, float, np.floating)) or not (0.0 <= float(kv) <= 1.0):
            raise InvalidContextError(f"`kv_usage` must be a fraction in [0, 1], got {kv!r}.")
        if self.num_scheduled == -1:
            object.__setattr__(self, "num_scheduled", int(self.num_decoding))
        _check_int(self.num_scheduled, "num_scheduled", 0, None, InvalidContextError)


@dataclass(frozen=True, slots=True)
class Decision:
    """The governor's choice for one step, and what is needed to credit it.

    Attributes:
        k: draft tokens to propose per request, 0..k_max.
        bucket: index of the batch-size bucket the step was assigned to (-1
            for policies without buckets).
        num_decoding: B at decision time.
        step_id: the governor's step counter when it decided.
        sampled_goodput: the Thompson-sampled goodput per K (tokens/s), empty
            for policies that do not sample.
    """

    k: int
    bucket: int
    num_decoding: int
    step_id: int
    sampled_goodput: tuple[float, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What happened when a decision's drafts were verified.

    Attributes:
        drafted: per request, the number of draft tokens verified (int array).
        accepted: per request, the number of those accepted (int array).
        step_duration_s: wall time of the step, seconds.
        draft_duration_s: time in drafter forwards, seconds, when measured.
        target_duration_s: time in the target's verify forward, seconds, when measured.
        prefill_tokens: prompt tokens (chunked prefill) computed in the same step. They
            cost time that has nothing to do with K; the governor learns their price and
            takes it out before crediting the step time to K.
    """

    drafted: np.ndarray
    accepted: np.ndarray
    step_duration_s: float
    draft_duration_s: float | None = None
    target_duration_s: float | None = None
    prefill_tokens: int = 0

    def __post_init__(self) -> None:
        drafted = np.asarray(self.drafted)
        accepted = np.asarray(self.accepted)
        for name, arr in (("drafted", drafted), ("accepted", accepted)):
            if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
                raise InvalidOutcomeError(
                    f"`{name}` must be a 1-D array of integers, got shape {arr.shape} dtype {arr.dtype}."
                )
        if drafted.shape != accepted.shape:
            raise InvalidOutcomeError(
                f"`drafted` and `accepted` must have one entry per request, got {drafted.size} and {accepted.size}."
            )
        # 0 <= accepted <= drafted covers drafted >= 0; a few requests are checked in Python,
        # where numpy's per-call cost is most of the step's.
        if drafted.size <= 32:
            bad = any(not 0 <= a <= d for d, a in zip(drafted.tolist(), accepted.tolist()))
        else:
            bad = bool(accepted.min() < 0 or (accepted > drafted).any())
        if bad:
            if drafted.min() < 0:
                raise InvalidOutcomeError(f"`drafted` must be >= 0, got {drafted.min()}.")
            if accepted.min() < 0:
                raise InvalidOutcomeError(f"`accepted` must be >= 0, got {accepted.min()}.")
            i = int(np.flatnonzero(accepted > drafted)[0])
            raise InvalidOutcomeError(
                f"`accepted` exceeds `drafted` for request {i}: accepted={int(accepted[i])} > drafted={int(drafted[i])}."
            )
        if drafted.dtype != np.int64 or drafted is not self.drafted:
            object.__setattr__(self, "drafted", drafted.astype(np.int64, copy=False))
        if accepted.dtype != np.int64 or accepted is not self.accepted:
            object.__setattr__(self, "accepted", accepted.astype(np.int64, copy=False))
        t = self.step_duration_s
        if type(t) is not float or not 0.0 <= t < math.inf:
            object.__setattr__(self, "step_duration_s", _check_duration(t, "step_duration_s"))
        if type(self.prefill_tokens) is not int or self.prefill_tokens < 0:
            _check_int(self.prefill_tokens, "prefill_tokens", 0, None, InvalidOutcomeError)
        for name in ("draft_duration_s", "target_duration_s"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _check_duration(value, name))
