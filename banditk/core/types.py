"""The values that cross the governor's two calls.

``select(StepContext) -> Decision`` once per scheduler step, then
``observe(Decision, StepOutcome)`` when that step's verification result arrives
(possibly one step later). These are small frozen values, validated on
construction so that a bad value is caught where it is made.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from banditk.core.drafters import DRAFTER_CLASSES, check_drafter_class
from banditk.core.errors import InvalidContextError, InvalidOutcomeError
from banditk.posterior.acceptance import position_count_lists, position_count_pairs


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

    The verifications come per request (``drafted``/``accepted`` arrays, in the requests'
    order) or as counts (``pairs``, from :meth:`counted`): the adapter's every-step form,
    which costs no array. Readers that need only acceptance per position, the number of
    requests or the tokens accepted use :meth:`position_counts`, :attr:`num_requests` and
    :attr:`accepted_total`, which read either form.

    Attributes:
        drafted: per request, the number of draft tokens verified (int array); None for
            a counted outcome.
        accepted: per request, the number of those accepted (int array); None for a
            counted outcome.
        step_duration_s: wall time of the step, seconds.
        draft_duration_s: time in drafter forwards, seconds, when measured.
        target_duration_s: time in the target's verify forward, seconds, when measured.
        prefill_tokens: prompt tokens (chunked prefill) computed in the same step. They
            cost time that has nothing to do with K; the governor learns their price and
            takes it out before crediting the step time to K.
        pairs: requests per (drafted, accepted) pair, flat: entry ``d * (k_max + 1) + a``
            counts the requests that verified ``d`` drafts and accepted ``a`` of them (so
            ``(k_max + 1) ** 2`` entries, zero where ``a > d``); None for per-request arrays.
    """

    drafted: np.ndarray | None
    accepted: np.ndarray | None
    step_duration_s: float
    draft_duration_s: float | None = None
    target_duration_s: float | None = None
    prefill_tokens: int = 0
    pairs: tuple[int, ...] | None = None

    @classmethod
    def counted(
        cls,
        pairs: tuple[int, ...],
        step_duration_s: float,
        draft_duration_s: float | None = None,
        target_duration_s: float | None = None,
        prefill_tokens: int = 0,
    ) -> StepOutcome:
        """An outcome whose verifications are counts per (drafted, accepted) pair."""
        return cls(None, None, step_duration_s, draft_duration_s, target_duration_s, prefill_tokens, pairs)

    def __post_init__(self) -> None:
        p = self.pairs
        if p is None and self.drafted is not None and self.accepted is not None:
            self._check_arrays()
        # The adapter's every step: a tuple of int counts >= 0, none above the diagonal, in
        # C-level builtins (a bool or numpy count falls through to the check that names it).
        elif not (
            type(p) is tuple
            and (upper := _above_diagonal(len(p))) is not None
            and type(sum(p)) is int
            and min(p) >= 0
            and not any(upper(p))
            and self.drafted is None
            and self.accepted is None
        ):
            _check_pairs(p, self.drafted, self.accepted)
        t = self.step_duration_s
        if type(t) is not float or not 0.0 <= t < math.inf:
            object.__setattr__(self, "step_duration_s", _check_duration(t, "step_duration_s"))
        if type(self.prefill_tokens) is not int or self.prefill_tokens < 0:
            _check_int(self.prefill_tokens, "prefill_tokens", 0, None, InvalidOutcomeError)
        for name in ("draft_duration_s", "target_duration_s"):
            v = getattr(self, name)
            if v is not None and (type(v) is not float or not 0.0 <= v < math.inf):
                object.__setattr__(self, name, _check_duration(v, name))

    # ---- either form ----------------------------------------------------------------

    @property
    def num_requests(self) -> int:
        """Requests whose verification is counted (those that verified no draft included)."""
        return sum(self.pairs) if self.pairs is not None else int(self.drafted.size)

    @property
    def accepted_total(self) -> int:
        """Draft tokens accepted, over every request."""
        if self.pairs is None:
            return int(self.accepted.sum())
        w = _width(self.pairs)
        return sum(n * (i % w) for i, n in enumerate(self.pairs) if n)

    @property
    def max_drafted(self) -> int:
        """The most drafts one request verified (0 without requests)."""
        if self.pairs is None:
            d = self.drafted
            return 0 if not d.size else max(d.tolist()) if d.size <= 32 else int(d.max())
        w, p = _width(self.pairs), self.pairs
        return next((d for d in range(w - 1, -1, -1) if any(p[d * w : d * w + w])), 0)

    def per_request(self) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, accepted) per request: the arrays given, or a counted outcome's requests
        in (drafted, accepted) order."""
        if self.pairs is None:
            return self.drafted, self.accepted
        w, n = _width(self.pairs), np.array(self.pairs, dtype=np.int64)
        idx = np.arange(w * w)
        return np.repeat(idx // w, n), np.repeat(idx % w, n)

    def position_counts(self, k_max: int) -> tuple[list[int], list[int]]:
        """Successes and failures per draft position 1..``k_max``, as lists of ints."""
        if self.pairs is None:
            return position_count_lists(self.drafted, self.accepted, k_max)
        return position_count_pairs(self.pairs, k_max)

    def _check_arrays(self) -> None:
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


def _width(pairs: tuple[int, ...]) -> int:
    return math.isqrt(len(pairs))


@functools.cache
def _above_diagonal(size: int):
    """For pairs of ``size`` counts: a function giving the entries where accepted > drafted,
    as a tuple (None when ``size`` is not a square)."""
    w = math.isqrt(size)
    if w < 1 or w * w != size:
        return None
    upper = [d * w + a for d in range(w) for a in range(d + 1, w)]
    return operator.itemgetter(*upper, upper[0]) if upper else lambda p: ()


def _check_pairs(pairs: object, drafted: object, accepted: object) -> None:
    """A counted outcome's pairs: a tuple of (k_max + 1) ** 2 counts >= 0, none where a > d,
    and no per-request arrays beside them."""
    if drafted is not None or accepted is not None:
        raise InvalidOutcomeError(
            "give the verifications per request (`drafted` and `accepted`) or as `pairs`, not both"
            if pairs is not None
            else "`drafted` and `accepted` must both be given (or `pairs` instead)."
        )
    if type(pairs) is not tuple:
        raise InvalidOutcomeError(f"`pairs` must be a tuple of counts, got {type(pairs).__name__}.")
    w = _width(pairs)
    if w < 1 or w * w != len(pairs):
        raise InvalidOutcomeError(f"`pairs` must hold (k_max + 1) ** 2 counts, got {len(pairs)}.")
    if not all(type(n) is int and n >= 0 for n in pairs):
        bad = next(n for n in pairs if type(n) is not int or n < 0)
        raise InvalidOutcomeError(f"`pairs` must hold integer counts >= 0, got {bad!r}.")
    for d in range(w - 1):
        row = pairs[d * w + d + 1 : d * w + w]  # accepted above drafted
        if any(row):
            a = d + 1 + next(i for i, n in enumerate(row) if n)
            raise InvalidOutcomeError(
                f"`pairs` counts requests that accepted more than they drafted: (drafted={d}, accepted={a})."
            )
