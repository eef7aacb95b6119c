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
    return min(carried_row(table, num_scheduled, lo=0)[-1], k_max)


def carried_row(rows: list[tuple[int, ...]], x: int, lo: int) -> tuple[int, ...]:
    """The last of ``rows`` (sorted by their lower edge ``row[lo]``) whose lower edge is <= ``x``,
    the first where none is: a range's row serves the gap after it and everything past the
    last range, as vLLM's dense lookup carries K forward.

    >>> carried_row([(1, 4, 2), (8, 16, 1)], 6, lo=0), carried_row([(5, 9, 0)], 2, lo=0)
    ((1, 4, 2), (5, 9, 0))
    """
    out = rows[0]
    for row in rows:
        if x < row[lo]:
            break
        out = row
    return out


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


CTX_UNBOUNDED = 2**63 - 1
"""``ctx_hi`` of a 3-item row ``[bs_lo, bs_hi, K]``: the row covers every context length."""

_CTX_FIELDS = ("bs_lo", "bs_hi", "ctx_lo", "ctx_hi", "K")


def parse_ctx_table(spec: object, k_max: int) -> list[tuple[int, int, int, int, int]]:
    """Parse a batch-size x context table: ``[[bs_lo, bs_hi, ctx_lo, ctx_hi, K], ...]``.

    A 3-item row ``[bs_lo, bs_hi, K]`` covers every context (``ctx_lo=0``,
    ``ctx_hi=CTX_UNBOUNDED``). Ranges are inclusive. Rows sharing one ``[bs_lo, bs_hi]``
    form a batch range; batch ranges follow the batch-size table's rules (sorted,
    non-overlapping, the first starting at 1) and the context ranges inside one batch
    range are sorted and non-overlapping.

    >>> parse_ctx_table("[[1,64,0,768,3],[1,64,769,32768,1],[65,512,0]]", k_max=4)
    [(1, 64, 0, 768, 3), (1, 64, 769, 32768, 1), (65, 512, 0, 9223372036854775807, 0)]
    """
    text = spec
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"table-ctx spec must be JSON like [[1,64,0,32768,3],[65,512,0,32768,0]], got {text!r}: {e.msg}."
            ) from None
    if not isinstance(spec, list) or not spec:
        raise ConfigError(
            f"table-ctx spec must be a non-empty list of [bs_lo, bs_hi, ctx_lo, ctx_hi, K], got {text!r}."
        )
    out: list[tuple[int, int, int, int, int]] = []
    for entry in spec:
        if not isinstance(entry, (list, tuple)) or len(entry) not in (3, 5):
            raise ConfigError(
                f"table-ctx row must be [bs_lo, bs_hi, ctx_lo, ctx_hi, K] (5 items) or [bs_lo, bs_hi, K] "
                f"(3 items, every context), got {entry!r} in {text!r}."
            )
        fields = _CTX_FIELDS if len(entry) == 5 else ("bs_lo", "bs_hi", "K")
        for name, value in zip(fields, entry):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"table-ctx `{name}` must be an integer, got {value!r} in row {entry!r}.")
            if value < 0:
                raise ConfigError(f"table-ctx `{name}` must be >= 0, got {value!r} in row {entry!r}.")
        row = tuple(entry) if len(entry) == 5 else (entry[0], entry[1], 0, CTX_UNBOUNDED, entry[2])
        bs_lo, bs_hi, ctx_lo, ctx_hi, k = row
        if bs_lo < 1:
            raise ConfigError(f"table-ctx `bs_lo` must be >= 1, got {bs_lo!r} in row {entry!r}.")
        if bs_hi < bs_lo:
            raise ConfigError(f"table-ctx `bs_lo` must be <= `bs_hi`, got {bs_lo!r} > {bs_hi!r} in row {entry!r}.")
        if ctx_hi < ctx_lo:
            raise ConfigError(f"table-ctx `ctx_lo` must be <= `ctx_hi`, got {ctx_lo!r} > {ctx_hi!r} in row {entry!r}.")
        if not k <= k_max:
            raise ConfigError(f"table-ctx `K` must be in [0, k_max={k_max}], got {k!r} in row {entry!r}.")
        if out:
            p_bs_lo, p_bs_hi, _p_ctx_lo, p_ctx_hi, _p_k = out[-1]
            if (bs_lo, bs_hi) == (p_bs_lo, p_bs_hi):
                if ctx_lo <= p_ctx_hi:
                    raise ConfigError(
                        f"table-ctx context ranges of batch range [{bs_lo}, {bs_hi}] must be sorted and "
                        f"non-overlapping, got {entry!r} in {text!r}."
                    )
            elif bs_lo <= p_bs_hi:
                raise ConfigError(
                    f"table-ctx batch ranges must be sorted and non-overlapping (rows of one batch range "
                    f"repeat the same [bs_lo, bs_hi]), got {entry!r} in {text!r}."
                )
        out.append(row)  # type: ignore[arg-type]
    if out[0][0] != 1:
        raise ConfigError(f"table-ctx must start at batch size 1, got {text!r}.")
    return out


def ctx_table_k(table: list[tuple[int, int, int, int, int]], num_scheduled: int, ctx: int, k_max: int) -> int:
    """K of a batch-size x context table, looked up as :func:`table_k` on both axes.

    The batch range is the last one with ``bs_lo <= num_scheduled`` (gaps carry the
    previous range forward, batches past the last range use the last); inside it the
    context row is the last one with ``ctx_lo <= ctx``, and a context below the first
    row uses the first row. A K is therefore always defined. K is capped at ``k_max``.

    >>> t = [(1, 64, 0, 768, 3), (1, 64, 769, 32768, 1), (65, 512, 0, 32768, 0)]
    >>> [ctx_table_k(t, 8, c, k_max=4) for c in (768, 769, 99999)], ctx_table_k(t, 600, 10, k_max=4)
    ([3, 1, 1], 0)
    """
    bs_lo = carried_row(table, num_scheduled, lo=0)[0]
    return min(carried_row([r for r in table if r[0] == bs_lo], ctx, lo=2)[-1], k_max)


class ContextTablePolicy(_Static):
    """vLLM's proposed batch-size x context table (RFC #48627, PRs #48944 and #54801).

    Rows are ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]``, inclusive, as in PR #48944 (which
    extends ``num_speculative_tokens_per_batch_size``, renamed there to
    ``speculative_token_schedule``); a 3-item row ``[bs_lo, bs_hi, K]`` means every
    context, as the RFC has it. Overlaps are refused, so at most one row matches. No
    match cannot happen: both axes carry forward as vLLM's batch table does (gaps keep
    the previous K, past the last range the last K; below the first context range the
    first K). PR #54801's separate ``num_speculative_tokens_per_seq_len`` was flagged in
    review for lacking that fallback.

    Context: PR #48944 keys on the per-request context length (prompt + generated)
    aggregated over the batch by ``ctx_agg``, default ``mean``. StepContext gives only
    the sum, so the lookup uses the floored batch mean ``context_tokens // num_decoding``
    (0 when nothing decodes or the context is unknown). The batch size is every scheduled
    request, as in :class:`TablePolicy`; with one row per batch range the policy is
    exactly that table.

    >>> from banditk.core.types import StepContext
    >>> p = ContextTablePolicy("[[1,64,0,768,3],[1,64,769,32768,1],[65,512,0]]", k_max=4)
    >>> [p.select(StepContext(4, 4, "mtp", context_tokens=4 * c)).k for c in (768, 769)]
    [3, 1]
    """

    def __init__(self, spec: object, *, k_max: int) -> None:
        super().__init__()
        self.table = parse_ctx_table(spec, k_max)
        self.k_max = k_max
        rows = [list(r) if r[2:4] != (0, CTX_UNBOUNDED) else [r[0], r[1], r[4]] for r in self.table]
        self.name = "table-ctx:" + json.dumps(rows, separators=(",", ":"))

    def k_for(self, num_scheduled: int, ctx: int) -> int:
        return ctx_table_k(self.table, num_scheduled, ctx, self.k_max)

    @staticmethod
    def mean_context(context: StepContext) -> int:
        """The batch's mean context length per decoding request, floored (0 if none decode)."""
        return context.context_tokens // context.num_decoding if context.num_decoding else 0

    def select(self, context: StepContext) -> Decision:
        if context.k_max != self.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but the table was built for k_max={self.k_max}.")
        return self._decide(context, self.k_for(max(context.num_scheduled, 1), self.mean_context(context)))
