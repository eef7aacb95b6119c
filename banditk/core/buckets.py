"""Batch-size and context buckets with hysteresis.

Bucket ``i`` holds batch sizes ``edges[i] <= B < edges[i + 1]``; the last bucket is
open-ended. Near an edge the previous bucket is kept (hysteresis), so a batch that
wobbles by a request across an edge does not flip the posterior the governor consults.

Context buckets split each batch bucket by the decoding requests' mean context L (tokens
in the KV cache per request). A governor's cell ``(batch bucket b, context bucket c)`` has
the flat index ``b * n_context + c``: with one context bucket (the default) cells are the
batch buckets.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from banditk.core.errors import ConfigError

DEFAULT_BUCKET_EDGES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
#: One context bucket: K follows batch size alone.
NO_CONTEXT_EDGES: tuple[int, ...] = (0,)
#: Context edges for a governor that follows context (short / medium / long), in tokens per request.
DEFAULT_CONTEXT_EDGES: tuple[int, ...] = (0, 2048, 8192)


def check_bucket_edges(edges: object, field: str = "bucket_edges") -> tuple[int, ...]:
    """Validate bucket edges: strictly increasing positive integers starting at 1.

    >>> check_bucket_edges([1, 4, 16])
    (1, 4, 16)
    """
    return _check_edges(edges, field, first=1, covers="batch size", most=256)


def check_context_edges(edges: object, field: str = "context_edges") -> tuple[int, ...]:
    """Validate context edges: strictly increasing integers from 0, at most 8 of them (each
    multiplies the cells).

    >>> check_context_edges([0, 2048])
    (0, 2048)
    """
    return _check_edges(edges, field, first=0, covers="context", most=8)


def _check_edges(edges: object, field: str, *, first: int, covers: str, most: int) -> tuple[int, ...]:
    """Strictly increasing integers >= ``first``, starting at it, at most ``most`` of them."""
    if not isinstance(edges, Sequence) or isinstance(edges, (str, bytes)) or len(edges) == 0:
        raise ConfigError(f"`{field}` must be a non-empty list of integers, got {edges!r}.")
    kind = "positive integers" if first == 1 else f"integers >= {first}"
    for e in edges:
        if isinstance(e, bool) or not isinstance(e, int) or e < first:
            raise ConfigError(f"`{field}` must hold {kind}, got {e!r} in {list(edges)!r}.")
    out = tuple(edges)
    if out[0] != first:
        raise ConfigError(f"`{field}` must start at {first} so every {covers} has a bucket, got {list(edges)!r}.")
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ConfigError(f"`{field}` must be strictly increasing, got {list(edges)!r}.")
    if len(out) > most:
        raise ConfigError(f"`{field}` may hold at most {most} edges, got {len(out)}.")
    return out


def cell_label(bucket_edges: Sequence[int], context_edges: Sequence[int], cell: int) -> str:
    """A cell's name in logs and reports: its batch bucket, and its context bucket if there are several.

    >>> cell_label((1, 4), (0,), 1), cell_label((1, 4), (0, 2048), 3)
    ('B>=4', 'B>=4,L>=2048')
    """
    nc = len(context_edges)
    b, c = divmod(cell, nc)
    return f"B>={bucket_edges[b]}" + (f",L>={context_edges[c]}" if nc > 1 else "")


def bucket_of(edges: Sequence[int], batch_size: int) -> int:
    """Index of the bucket holding ``batch_size`` (>= 1).

    >>> bucket_of((1, 2, 4, 8), 5)
    2
    """
    return bisect.bisect_right(edges, batch_size) - 1


def bucket_with_hysteresis(edges: Sequence[int], batch_size: int, previous: int, margin: float) -> int:
    """Bucket for ``batch_size``, keeping ``previous`` while B is within ``margin`` of its range.

    The previous bucket ``[lo, hi)`` is kept for ``lo - floor(margin * lo) <= B < hi + floor(margin * hi)``:
    whole requests, so the one-value buckets at small B have no hysteresis.

    >>> bucket_with_hysteresis((1, 8, 16), 16, previous=1, margin=0.1)
    1
    >>> bucket_with_hysteresis((1, 8, 16), 17, previous=1, margin=0.1)
    2
    >>> bucket_with_hysteresis((1, 2, 3), 2, previous=0, margin=0.1)
    1
    """
    if 0 <= previous < len(edges):
        lo = edges[previous]
        hi = edges[previous + 1] if previous + 1 < len(edges) else math.inf
        if lo - math.floor(margin * lo) <= batch_size < hi + (math.floor(margin * hi) if hi != math.inf else 0):
            return previous
    return bucket_of(edges, batch_size)


def debounced(bucket: int, previous: int, candidate: int, candidate_steps: int, dwell: int) -> tuple[int, int, int]:
    """Move from ``previous`` to ``bucket`` only after ``dwell`` steps in a row there.

    Returns (bucket to use, candidate bucket, steps it has been seen in a row). A one-step
    dip (a request finishing while its successor prefills) would otherwise consult a rarely
    visited bucket, whose wide posterior explores: a switch and a switch back for one step.

    >>> debounced(2, 3, -1, 0, dwell=2), debounced(2, 3, 2, 1, dwell=2)
    ((3, 2, 1), (2, -1, 0))
    """
    if previous < 0 or bucket == previous:
        return bucket, -1, 0
    steps = candidate_steps + 1 if bucket == candidate else 1
    if steps >= dwell:
        return bucket, -1, 0
    return previous, bucket, steps


def replay_buckets(edges: Sequence[int], batches, margin: float, dwell: int) -> list[int]:
    """The bucket a governor consults at each step of a sequence of batch sizes
    (hysteresis, then dwell), as :class:`banditk.governor.BanditGovernor` picks it;
    -1 where nothing decodes (B = 0), which leaves the state as it was.

    >>> replay_buckets((1, 2, 4, 8), [8, 8, 7, 8, 7, 7], margin=0.0, dwell=2)
    [3, 3, 3, 3, 3, 2]
    """
    out, previous, candidate, steps = [], -1, -1, 0
    for b in batches:
        b = int(b)
        if b <= 0:
            out.append(-1)
            continue
        previous, candidate, steps = debounced(
            bucket_with_hysteresis(edges, b, previous, margin), previous, candidate, steps, dwell
        )
        out.append(previous)
    return out


def representative_batch(edges: Sequence[int], bucket: int) -> float:
    """A batch size that stands for the bucket: the geometric middle of its range.

    >>> representative_batch((1, 2, 4), 1)
    2.449489742783178
    """
    lo = edges[bucket]
    hi = edges[bucket + 1] - 1 if bucket + 1 < len(edges) else lo * 1.5
    return math.sqrt(lo * max(hi, lo))
