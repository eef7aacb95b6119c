"""Matching each step's verification result to the decision that produced it.

The K chosen at scheduler step N sets how many drafts are proposed *after*
step N; they are verified at step N+1. So the outcome observed in
``update_from_output`` of step N+1 belongs to the decision of step N. Under
async scheduling step N+1 is scheduled before step N's output is processed;
steps are still executed and updated in schedule order, so "the previous
executed step" is well defined in both modes. Steps that schedule no tokens
never run the model and get no index.

A step's cycle runs the target over the previous decision's drafts and then the
drafter for its own decision, so its wall time mixes two decisions' costs;
:func:`decision_cost` swaps the drafter part back where the worker timed it.

This module is pure bookkeeping (no vLLM import) so it can be tested alone.

Examples:
    >>> led = DecisionLedger()
    >>> a = led.open_step(k=2, decision="d0", decoding=("r1",), t_schedule=0.0)
    >>> b = led.open_step(k=3, decision="d1", decoding=("r1",), t_schedule=1.0)
    >>> led.close_step(a, t_end=0.5) is None      # step 0 verifies drafts nobody decided on
    True
    >>> entry, dur = led.close_step(b, t_end=1.75)
    >>> entry.decision, entry.k, dur              # step 1 verifies step 0's drafts
    ('d0', 2, 0.75)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class StepEntry:
    """Everything the adapter knows of one executed step, from its ``schedule()`` to its credit.

    Attributes:
        step: index among steps that ran the model.
        k: K written into the step's scheduler output.
        decision: the policy's decision, or None (prefill-only step, governor error).
        decoding: ids of requests that decoded at that step (B = len).
        t_schedule: clock at the start of its ``schedule()``.
        draft_s: the drafter time of that step (it proposed this decision's drafts).
        num_reqs: requests scheduled at that step (the drafter ran for them).
        ctx: context tokens of its decoding requests (the trace's ``ctx``; 0: unknown).
        prefill: prompt tokens it computed (chunked prefill), whose time is not K's.
        padded: requests it padded with placeholder drafts (their verification is no decision's).
        fallback: why it ran the fallback K, or None.
    """

    step: int
    k: int
    decision: Any
    decoding: tuple[str, ...]
    t_schedule: float
    draft_s: float | None = None
    num_reqs: int = 0
    ctx: int = 0
    prefill: int = 0
    padded: frozenset = frozenset()
    fallback: str | None = None


def decision_cost(cycle_s: float, next_draft_s: float | None, own_draft_s: float | None) -> float:
    """The step time a decision is credited with: the cycle that verified its drafts, with that
    cycle's drafter time (spent on the next decision's drafts) swapped for the drafter time that
    proposed this decision's drafts.

    Unswapped, a K tried for one step between steps of an incumbent pays the incumbent's drafter
    time: a K below the incumbent looks slower than it is and a K above it faster, so the
    governor stays where it started. Without both drafter times the cycle is credited as it is.

    Examples:
        >>> round(decision_cost(0.10, next_draft_s=0.03, own_draft_s=0.01), 6)  # K=1 tried under K=3
        0.08
        >>> decision_cost(0.10, next_draft_s=None, own_draft_s=0.01)
        0.1
    """
    if next_draft_s is None or own_draft_s is None:
        return cycle_s
    cost = cycle_s - next_draft_s + own_draft_s
    return cost if cost > 0.0 else cycle_s


class DecisionLedger:
    """Open steps, in schedule order; closes them as their outputs arrive."""

    def __init__(self, max_open: int = 64) -> None:
        self._open: OrderedDict[int, StepEntry] = OrderedDict()
        self._next = 0
        self._max_open = max_open
        self._last_closed: StepEntry | None = None
        self._t_last_end: float | None = None

    def open_step(self, *, k: int, decision: Any, decoding: tuple[str, ...], t_schedule: float, **facts) -> int:
        """Record a scheduled step that runs the model (``facts``: the other fields of its
        :class:`StepEntry`); return its index."""
        step = self._next
        self._next += 1
        self._open[step] = StepEntry(step, k, decision, tuple(decoding), t_schedule, **facts)
        if len(self._open) > self._max_open:  # outputs never came (engine reset): forget
            self._open.popitem(last=False)
        return step

    def entry(self, step: int) -> StepEntry | None:
        """The open entry of ``step`` (None: closed, or never opened)."""
        return self._open.get(step)

    def close_step(self, step: int, *, t_end: float, draft_s: float | None = None) -> tuple[StepEntry, float] | None:
        """Close ``step`` and return (the previous executed step's entry, credited duration).

        The duration is the wall time of this step's cycle: from the later of the
        previous step's end and this step's ``schedule()`` start, to ``t_end``
        (this excludes idle time in the synchronous layout and gives the cycle
        time under async scheduling). Returns None when there is nothing to credit.
        """
        entry = self._open.pop(step, None)
        if entry is None:
            return None
        entry.draft_s = draft_s
        while self._open:  # outputs lost: drop (steps open in schedule order)
            first = next(iter(self._open))
            if first >= step:
                break
            del self._open[first]
        prev, t_prev_end = self._last_closed, self._t_last_end
        self._last_closed, self._t_last_end = entry, t_end
        if prev is None or prev.step != step - 1:
            return None
        start = entry.t_schedule if t_prev_end is None else max(t_prev_end, entry.t_schedule)
        return prev, max(t_end - start, 0.0)

    def reset(self) -> None:
        """Forget open steps (e.g. after the engine resets its scheduler)."""
        self._open.clear()
        self._last_closed = None
        self._t_last_end = None

    @property
    def num_open(self) -> int:
        return len(self._open)

    @property
    def last_closed(self) -> StepEntry | None:
        """The entry :meth:`close_step` closed last."""
        return self._last_closed
