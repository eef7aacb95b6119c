"""Credits that wait for their steps' GPU times (Model Runner V2).

On MRv2 a step's CUDA-event times reach the scheduler one or two outputs after the step's own
output (:mod:`.event_timing`). A decision credited at once would carry no target or drafter
time, and its cycle could only have the drafter part swapped by an estimate. So a credit
waits here until the samples of both its steps came: the step that drafted its tokens (its
own drafter time) and the step whose cycle verified them (the target time, and the next
decision's drafter time to swap out). A credit whose samples do not come within
:data:`MAX_WAIT` outputs is released with what is known; credits leave in the order they came.

Pure bookkeeping (no vLLM import), tested alone.

Examples:
    >>> from banditk.adapter.event_timing import Sample
    >>> c = TimedCredits()
    >>> c.push(own_step=4, verify_step=5, payload="d4")
    >>> c.release()                           # step 5's times have not come yet
    []
    >>> c.add([Sample(1, 8, 0.020, 0.004, step=4), Sample(3, 8, 0.021, 0.009, step=5)])
    >>> [(r.payload, r.target_s, r.own_draft_s, r.next_draft_s) for r in c.release()]
    [('d4', 0.021, 0.004, 0.009)]
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Outputs a credit waits for its samples. They come one or two outputs late; the engine's
#: next idle moment releases whatever still waits.
MAX_WAIT = 4
#: Samples kept for credits still to come (a step's sample may arrive before its credit).
KEEP_SAMPLES = 64


@dataclass(frozen=True)
class Released:
    """A credit ready to be observed, with the GPU times found for it (None: never came)."""

    payload: Any
    target_s: float | None
    own_draft_s: float | None
    next_draft_s: float | None


@dataclass
class _Waiting:
    own_step: int
    verify_step: int
    payload: Any
    since: int


class TimedCredits:
    """Samples by step index, and the credits waiting for them, oldest first."""

    def __init__(self, max_wait: int = MAX_WAIT, keep: int = KEEP_SAMPLES) -> None:
        self._max_wait = max_wait
        self._keep = keep
        self._samples: OrderedDict[int, Any] = OrderedDict()
        self._waiting: deque[_Waiting] = deque()
        self._outputs = 0
        self.active = False  # True once a sample named its step: from then on credits wait

    def add(self, samples: Iterable[Any]) -> None:
        """Keep the samples that name their step; called once per output, so it also ages credits."""
        self._outputs += 1
        for s in samples:
            if s.step is None:
                continue
            self.active = True
            self._samples[s.step] = s
            while len(self._samples) > self._keep:
                self._samples.popitem(last=False)

    def push(self, *, own_step: int, verify_step: int, payload: Any) -> None:
        self._waiting.append(_Waiting(own_step, verify_step, payload, self._outputs))

    def release(self, *, flush: bool = False) -> list[Released]:
        """Credits whose samples came, or that waited long enough (all of them with ``flush``)."""
        out = []
        while self._waiting:
            w = self._waiting[0]
            own, verify = self._samples.get(w.own_step), self._samples.get(w.verify_step)
            if own is None or verify is None:
                if not flush and self._outputs - w.since < self._max_wait:
                    break
            self._waiting.popleft()
            out.append(
                Released(
                    w.payload,
                    None if verify is None else verify.target_s,
                    None if own is None else own.draft_s,
                    None if verify is None else verify.draft_s,
                )
            )
        return out

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)
