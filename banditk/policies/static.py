"""Baselines that do not learn: no speculation, a fixed K, and vLLM's batch-size table."""

from __future__ import annotations

import json

from banditk.core.errors import ConfigError, InvalidContextError
from banditk.core.types import Decision, StepContext, StepOutcome


class _Static:
    """Shared plumbing: a step counter and a no-op observe."""

    name = "static"
    disables_speculation = False

    def __init__(self) -> None:
        self.steps = 0

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        return None

    def _decide(self, context: StepContext, k: int) -> Decision:
        self.steps += 1
        return Decision(k=k, bucket=-1, num_decoding=context.num_decoding, step_id=self.steps)


class NoSpecPolicy(_Static):
    """Speculative decoding disabled entirely: no drafter, no cache-sync forward.

    It returns K = 0; the simulator and the adapter read ``disables_speculation``
    to skip the drafter as well (unlike ``fixed:0``, which still runs the sync forward).
    """

    name = "nospec"
    disables_speculation = True

    def select(self, context: StepContext) -> Decision:
        return self._decide(context, 0)


class FixedPolicy(_Static):
    """A static K for every step (vLLM's default behaviour).

    >>> from banditk.core.types import StepContext
    >>> FixedPolicy(2, k_max=4).select(StepContext(8, 4, "mtp")).k
    2
    """

    def __init__(self, k: int, *, k_max: int) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= k_max:
            raise ConfigError(f"fixed K must be an integer in [0, k_max={k_max}], got {k!r}.")
        self.k = k
        self.name = f"fixed:{k}"

    def select(self, context: StepContext) -> Decision:
        return self._decide(context, self.k)


def parse_table(spec: object, k_max: int) -> list[tuple[int, int, int]]:
    """Parse vLLM's ``num_speculative_tokens_per_batch_size``: ``[[lo, hi, K], ...]``.

    Ranges are inclusive, sorted, non-overlapping and start at 1 (vLLM's own rules).

    >>> parse_table("[[1,4,2],[5,512,0]]", k_max=4)
    [(1, 4, 2), (5, 512, 0)]
    """
    text = spec
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ConfigError(f"table spec must be JSON like [[1,4,2],[5,512,0]], got {text!r}: {e.msg}.") from None
    if not isinstance(spec, list) or not spec:
        raise ConfigError(f"table spec must be a non-empty list of [lo, hi, K], got {text!r}.")
    out: list[tuple[int, int, int]] = []
    previous_end = 0
    for entry in spec:
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 3
            or any(isinstance(v, bool) or not isinstance(v, int) for v in entry)
        ):
            raise ConfigError(f"table entry must be [lo, hi, K] integers, got {entry!r} in {text!r}.")
        lo, hi, k = entry
        if lo < 1 or hi < lo:
            raise ConfigError(f"table range must have 1 <= lo <= hi, got {entry!r} in {text!r}.")
        if not 0 <= k <= k_max:
            raise ConfigError(f"table K must be in [0, k_max={k_max}], got {entry!r} in {text!r}.")
        if lo <= previous_end:
            raise ConfigError(f"table ranges must be sorted and non-overlapping, got {entry!r} in {text!r}.")
        previous_end = hi
        out.append((lo, hi, k))
    if out[0][0] != 1:
        raise ConfigError(f"table must start at batch size 1, got {text!r}.")
    return out


def table_k(table: list[tuple[int, int, int]], num_scheduled: int, k_max: int) -> int:
    """K of a batch-size table for ``num_scheduled`` requests, as vLLM's dense lookup gives it.

    Gaps between ranges carry the previous K forward, batches past the last range use the
    last K, and K is capped at ``k_max``.

    >>> table_k([(1, 4, 2), (8, 16, 1)], 6, k_max=4)
    2
    """
    k = table[0][2]
    for lo, _hi, kk in table:
        if num_scheduled < lo:
            break
        k = kk
    return min(k, k_max)


class TablePolicy(_Static):
    """vLLM's batch-size table, applied as vLLM applies it.

    The batch size looked up is every scheduled request (prefills included), as in
    ``Scheduler.schedule``; gaps between ranges carry the previous K forward and
    batches past the last range use the last K; K is capped at K_max.

    >>> from banditk.core.types import StepContext
    >>> p = TablePolicy("[[1,4,2],[5,512,0]]", k_max=4)
    >>> [p.select(StepContext(4, 4, "mtp", num_scheduled=n)).k for n in (4, 5)]
    [2, 0]
    """

    def __init__(self, spec: object, *, k_max: int) -> None:
        super().__init__()
        self.table = parse_table(spec, k_max)
        self.k_max = k_max
        self.name = "table:" + json.dumps([list(e) for e in self.table], separators=(",", ":"))

    def k_for(self, num_scheduled: int) -> int:
        return table_k(self.table, num_scheduled, self.k_max)

    def select(self, context: StepContext) -> Decision:
        if context.k_max != self.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but the table was built for k_max={self.k_max}.")
        return self._decide(context, self.k_for(max(context.num_scheduled, 1)))
