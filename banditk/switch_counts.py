"""The protocol's two switch counts, and the causes of every K change.

docs/evaluation.md counts, per 1,000 decided steps:

- **K changes**: every step whose K differs from the decided step before it;
- **oscillations**: K changes within one state, a state being the batch bucket the policy
  consulted and the kind of step (decode-only, or next to a prompt chunk). A K that
  follows the bucket or the chunk is not an oscillation; a K that flips while both stay is.

Each K change has one cause, checked in this order: a ``fallback`` (either step ran the
fallback K), a ``bucket`` change, a ``chunk`` change (one step next to a prompt chunk, the
other not), else a flip within one state: ``chunk_flip`` (both next to a chunk) or
``decode_flip`` (both decode-only). Oscillations are the two flips.
"""

from __future__ import annotations

import numpy as np

from banditk.core.buckets import DEFAULT_BUCKET_EDGES

CAUSES = ("fallback", "bucket", "chunk", "chunk_flip", "decode_flip")


def protocol_bucket(batch: np.ndarray, edges: tuple[int, ...] = DEFAULT_BUCKET_EDGES) -> np.ndarray:
    """The bucket of each B under ``edges``, for policies that keep no bucket of their own.

    >>> protocol_bucket(np.array([1, 5, 8, 300])).tolist()
    [0, 3, 5, 15]
    """
    return np.searchsorted(np.asarray(edges), np.asarray(batch), side="right") - 1


def _cause_masks(k, bucket, chunk, fallback=None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The bucket of each decided step after the first, and per cause a mask over those steps
    of the K changes it explains (steps with K = -1 dropped first)."""
    k = np.asarray(k)
    keep = k >= 0
    k = k[keep]
    bucket = np.asarray(bucket)[keep]
    chunk = np.asarray(chunk, dtype=bool)[keep]
    fb = np.zeros(k.size, dtype=bool) if fallback is None else np.asarray(fallback, dtype=bool)[keep]
    if k.size < 2:
        return bucket[:0], {c: np.zeros(0, dtype=bool) for c in CAUSES}
    changed = k[1:] != k[:-1]
    by_fallback = changed & (fb[1:] | fb[:-1])
    by_bucket = changed & ~by_fallback & (bucket[1:] != bucket[:-1])
    rest = changed & ~by_fallback & ~by_bucket
    by_chunk = rest & (chunk[1:] != chunk[:-1])
    flips = rest & ~by_chunk
    masks = {
        "fallback": by_fallback,
        "bucket": by_bucket,
        "chunk": by_chunk,
        "chunk_flip": flips & chunk[1:],
        "decode_flip": flips & ~chunk[1:],
    }
    return bucket[1:], masks


def change_causes(k, bucket, chunk, fallback=None) -> dict[str, int]:
    """Count the K changes between consecutive decided steps (K >= 0) by cause.

    Args:
        k: K per step; -1 marks a step nothing was decided for (skipped).
        bucket: the batch bucket each step's decision consulted.
        chunk: True where the step was next to a prompt chunk.
        fallback: True where the step ran the fallback K (optional).

    >>> change_causes([2, 2, 3, 3, 0, 2, 2], [1, 1, 2, 2, 2, 2, 2], [0, 0, 0, 0, 1, 0, 0])
    {'fallback': 0, 'bucket': 1, 'chunk': 2, 'chunk_flip': 0, 'decode_flip': 0}
    >>> change_causes([2, 3, 2, -1, 2], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0])
    {'fallback': 0, 'bucket': 0, 'chunk': 0, 'chunk_flip': 0, 'decode_flip': 2}
    """
    return {c: int(m.sum()) for c, m in _cause_masks(k, bucket, chunk, fallback)[1].items()}


def decode_flips_by_bucket(k, bucket, chunk, fallback=None) -> dict[str, int]:
    """Decode-only flips within one state, counted by the bucket they happened in.

    >>> decode_flips_by_bucket([2, 3, 3, 2, 1], [1, 1, 4, 4, 4], [0, 0, 0, 0, 0])
    {'1': 1, '4': 2}
    """
    after, masks = _cause_masks(k, bucket, chunk, fallback)
    flipped = after[masks["decode_flip"]]
    return {str(b): int(n) for b, n in zip(*np.unique(flipped, return_counts=True))}


def switch_counts(k, bucket, chunk, fallback=None) -> dict:
    """K changes and oscillations per 1,000 decided steps, and the cause split.

    >>> s = switch_counts([2, 3, 2, 2], [1, 1, 1, 2], [0, 0, 0, 0])
    >>> s["k_switches_per_1000"], s["oscillations_per_1000"], s["decided_steps"]
    (500.0, 500.0, 4)
    """
    k = np.asarray(k)
    decided = int((k >= 0).sum())
    causes = change_causes(k, bucket, chunk, fallback)
    per = 1000.0 / decided if decided else 0.0
    changes = sum(causes.values())
    return {
        "k_switches_per_1000": changes * per,
        "oscillations_per_1000": (causes["chunk_flip"] + causes["decode_flip"]) * per,
        "decided_steps": decided,
        "change_causes": causes,
    }


def log_switches(path, t0: float = float("-inf"), t1: float = float("inf")) -> dict | None:
    """:func:`switch_counts` of a telemetry log's steps with ``t0 <= t <= t1``, in log order.

    Step lines give K, their bucket (the protocol bucket of B where the line has none, as
    in logs written before lines carried it) and their kind (``prefill`` > 0); fallback
    event lines (:func:`banditk.io.trace.fallback_record`) give the fallback K. Rotated
    parts are not read; unreadable lines are skipped. None if fewer than two steps remain.
    Adds ``decode_flips_by_bucket`` and ``k_hist`` (steps per K).
    """
    import json

    ks, buckets, chunks, fallbacks = [], [], [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if not isinstance(rec, dict) or "k" not in rec or not t0 <= _num(rec.get("t")) <= t1:
                continue
            k, b = rec.get("k"), rec.get("B")
            if not isinstance(k, int) or not isinstance(b, int) or k < 0 or b < 1:
                continue
            fb = rec.get("event") == "fallback"
            bucket = rec.get("bucket", -1)
            ks.append(k)
            buckets.append(bucket if isinstance(bucket, int) and bucket >= 0 else int(protocol_bucket(b)))
            chunks.append(not fb and isinstance(rec.get("prefill"), int) and rec["prefill"] > 0)
            fallbacks.append(fb)
    if len(ks) < 2:
        return None
    out = switch_counts(ks, buckets, chunks, fallbacks)
    out["decode_flips_by_bucket"] = decode_flips_by_bucket(ks, buckets, chunks, fallbacks)
    out["k_hist"] = {str(k): ks.count(k) for k in sorted(set(ks))}
    return out


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")
