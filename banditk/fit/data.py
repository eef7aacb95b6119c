"""Traces in, sufficient statistics out: what the fit sees of the data.

Under the model every step of the same (B, K) has the same mean and noise, so the
steps of a (B, K) pair enter the likelihood only through their count, mean and sum of
squared deviations. Aggregating first makes the fit cost depend on the number of
distinct (B, K) pairs (at most a few thousand), not on the number of steps.

Steps that also computed a prompt chunk are outside the latency model; they are kept
as the governor keeps them, in cells of their own per (bucket, K): step time and chunk
size (:class:`MixedCells`).

With context buckets (``banditk fit --context-edges``) each step also has the context
bucket of its decoding requests' mean context (the trace's ``ctx`` over B), and the
decode-only steps are aggregated per context bucket as well (:attr:`FitData.by_context`):
the prior's cells are then per (batch bucket, context bucket), as the governor's are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from banditk.core.buckets import DEFAULT_BUCKET_EDGES, NO_CONTEXT_EDGES, replay_buckets
from banditk.core.config import GovernorConfig
from banditk.fit.errors import FitInputError
from banditk.io.trace import Trace, read_trace
from banditk.posterior.stats import MIXED_FIELDS

_DEFAULT_DWELL = GovernorConfig(drafter_class="mtp", k_max=1).bucket_dwell


@dataclass(frozen=True)
class StepGroups:
    """Step times aggregated per distinct (B, K).

    Attributes:
        batch: B of each group.
        k: K of each group.
        n: number of steps.
        mean: mean step time (s).
        m2: sum of squared deviations from the group mean (s^2).
    """

    batch: np.ndarray
    k: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    def __len__(self) -> int:
        return int(self.batch.size)

    @property
    def steps(self) -> int:
        return int(self.n.sum())


@dataclass(frozen=True)
class MixedCells:
    """Per (bucket, K), the steps that also computed a prompt chunk, as the governor's
    ``mix_*`` statistics hold them: count and sums of step time t (s), chunk size P
    (tokens), t^2, P^2 and t P. Each step is in its load's bucket: most such steps have
    one request fewer decoding than the load's other steps (one finished, its successor
    prefills), and the governor's dwell keeps such a dip in the load's bucket
    (:func:`banditk.core.buckets.replay_buckets` without hysteresis). Hysteresis is left out
    as it is for the decode-only cells (bucket of B): it depends on the path by which the
    trace's load reached B, and a deployment's path is its own.
    """

    mix_n: np.ndarray
    mix_sum: np.ndarray
    mix_sumsq: np.ndarray
    mix_p: np.ndarray
    mix_pp: np.ndarray
    mix_tp: np.ndarray

    @classmethod
    def zeros(cls, num_buckets: int, k_max: int) -> MixedCells:
        return cls(*(np.zeros((num_buckets, k_max + 1)) for _ in MIXED_FIELDS))

    def add(self, bucket: np.ndarray, k: np.ndarray, step_s: np.ndarray, prefill: np.ndarray) -> None:
        """Add steps (bucket, K, step time, chunk size), all with a prompt chunk."""
        t, p = np.asarray(step_s, dtype=float), np.asarray(prefill, dtype=float)
        for f, v in zip(MIXED_FIELDS, (np.ones_like(t), t, t * t, p, p * p, t * p)):
            np.add.at(getattr(self, f), (bucket, k), v)

    @property
    def steps(self) -> int:
        return int(round(float(self.mix_n.sum())))


@dataclass(frozen=True)
class FitData:
    """Everything the fit uses from one or more traces of one drafter class.

    Attributes:
        drafter_class: the traces' drafter class.
        k_max: largest K kept (steps with a larger K are dropped).
        groups: step times per (B, K).
        acc_successes: per position 1..k_max, accepted drafts over all steps.
        acc_failures: per position 1..k_max, first rejections over all steps.
        mixed: the steps next to a prompt chunk, per (cell, K); a cell is a batch bucket,
            or ``b * len(context_edges) + c`` with context buckets.
        headers: each trace's header line.
        inputs: per trace, its path, steps used, lines skipped and source.
        context_edges: the context buckets' edges; ``(0,)``: one context bucket.
        by_context: with context buckets, ``groups`` split by context bucket (one
            :class:`StepGroups` per bucket, empty where the traces never were); else ().
    """

    drafter_class: str
    k_max: int
    groups: StepGroups
    acc_successes: np.ndarray
    acc_failures: np.ndarray
    mixed: MixedCells
    headers: list[dict] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    context_edges: tuple[int, ...] = NO_CONTEXT_EDGES
    by_context: tuple[StepGroups, ...] = ()

    @property
    def steps(self) -> int:
        return self.groups.steps


def aggregate(batch: np.ndarray, k: np.ndarray, step_s: np.ndarray) -> StepGroups:
    """Group steps by (B, K): count, mean and sum of squared deviations (two-pass, so it is exact).

    >>> g = aggregate(np.array([4, 4, 8]), np.array([1, 1, 0]), np.array([1.0, 3.0, 5.0]))
    >>> g.batch.tolist(), g.k.tolist(), g.n.tolist(), g.mean.tolist(), g.m2.tolist()
    ([4, 8], [1, 0], [2.0, 1.0], [2.0, 5.0], [2.0, 0.0])
    """
    batch = np.asarray(batch, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    t = np.asarray(step_s, dtype=float)
    pairs, inv = np.unique(np.stack([batch, k], axis=1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    n = np.bincount(inv).astype(float)
    mean = np.bincount(inv, weights=t) / n
    m2 = np.bincount(inv, weights=(t - mean[inv]) ** 2)
    return StepGroups(pairs[:, 0].copy(), pairs[:, 1].copy(), n, mean, m2)


#: A step next to a chunk more than this many times its bucket's median chunk is left out
#: of the prior's cells (see :func:`typical_chunks`).
CHUNK_OUTLIER_FACTOR = 4.0


def typical_chunks(bucket: np.ndarray, k: np.ndarray, step_s: np.ndarray, prefill: np.ndarray):
    """The steps next to a chunk whose chunk is at most ``CHUNK_OUTLIER_FACTOR`` times the
    median of their bucket's.

    The governor reads each K's cell at a chunk size along a slope in P shared by the
    bucket, so a rare giant chunk (several whole prompts in one step) weighs on that slope
    like hundreds of ordinary steps: one step of 7,952 tokens among 480 of 512-2,048 doubled
    it on Qwen3.6/Strix Halo at concurrency 48 and moved K=4's cell 1.2% off.

    >>> typical_chunks(np.zeros(4, int), np.ones(4, int), np.ones(4), np.array([512, 512, 1024, 8000]))[3].tolist()
    [512, 512, 1024]
    """
    keep = np.ones(bucket.size, dtype=bool)
    for b in np.unique(bucket):
        in_b = bucket == b
        keep[in_b] = prefill[in_b] <= CHUNK_OUTLIER_FACTOR * np.median(prefill[in_b])
    return bucket[keep], k[keep], step_s[keep], prefill[keep]


def load(
    paths: list[str | os.PathLike],
    *,
    k_max: int | None = None,
    drafter_class: str | None = None,
    max_steps: int | None = None,
    bucket_edges: tuple[int, ...] = DEFAULT_BUCKET_EDGES,
    bucket_dwell: int = _DEFAULT_DWELL,
    context_edges: tuple[int, ...] = NO_CONTEXT_EDGES,
) -> FitData:
    """Read traces (each with its rotated parts) and aggregate them.

    Args:
        paths: trace files, all of one drafter class.
        k_max: keep K up to this (default: the largest ``k_max`` of the traces).
        drafter_class: if given, every trace must be of this class.
        max_steps: read at most this many steps per trace.
        bucket_edges, bucket_dwell: the governor's bucketing, by which the steps next to
            a prompt chunk are put in cells (see :class:`MixedCells`).
        context_edges: the governor's context buckets (validated edges); with more than one,
            every step that decoded must carry its ``ctx``.

    Raises:
        FitInputError: no paths, traces of another or of mixed classes, no step within
            ``k_max``, or context buckets asked of a trace without ``ctx``.
        banditk.core.errors.PriorFormatError: a trace has no usable header or steps (from :func:`banditk.io.trace.read_trace`).
    """
    if not paths:
        raise FitInputError("`traces` is empty: give at least one trace file.")
    traces: list[tuple[str, Trace]] = [(str(p), read_trace(p, max_steps=max_steps)) for p in paths]
    classes = {t.drafter_class for _, t in traces}
    if drafter_class is not None:
        for name, t in traces:
            if t.drafter_class != drafter_class:
                from banditk.core.errors import DrafterClassMismatchError

                raise DrafterClassMismatchError(
                    f"{name!r} is a trace of drafter class {t.drafter_class!r}, not --drafter-class={drafter_class!r}: "
                    "parameters never transfer across drafter classes."
                )
    if len(classes) > 1:
        from banditk.core.errors import DrafterClassMismatchError

        found = ", ".join(f"{name!r}: {t.drafter_class!r}" for name, t in traces)
        raise DrafterClassMismatchError(
            f"traces of several drafter classes cannot be fitted together ({found}): "
            "parameters never transfer across drafter classes."
        )
    if k_max is None:
        k_max = max(t.k_max for _, t in traces)
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= 64:
        raise FitInputError(f"`k_max` must be an integer in [1, 64], got {k_max!r}.")
    nc = len(context_edges)
    cols: list[tuple[np.ndarray, ...]] = []
    acc_s = np.zeros(k_max)
    acc_f = np.zeros(k_max)
    inputs = []
    chunked: list[tuple[np.ndarray, ...]] = []
    for name, t in traces:
        keep = t.k <= k_max
        m = min(k_max, t.k_max)
        acc_s[:m] += t.acc_s[keep, :m].sum(axis=0)
        acc_f[:m] += t.acc_f[keep, :m].sum(axis=0)
        # Steps that also computed prompt tokens (chunked prefill) cost time the decode-only
        # latency model does not describe: they inform acceptance, not latency.
        decode_only = keep & (t.prefill == 0)
        ctx = context_buckets(name, t, context_edges, keep)
        cols.append((t.batch[decode_only], t.k[decode_only], t.step_s[decode_only], ctx[decode_only]))
        # Each trace replayed from its own start: a governor starts with no bucket.
        buckets = np.array(replay_buckets(bucket_edges, t.batch, 0.0, bucket_dwell), dtype=np.int64)
        buckets = np.where(buckets >= 0, buckets * nc + ctx, -1)  # the governor's flat cell
        next_to_chunk = keep & (t.prefill > 0) & (buckets >= 0)
        chunked.append((buckets[next_to_chunk], t.k[next_to_chunk], t.step_s[next_to_chunk], t.prefill[next_to_chunk]))
        inputs.append(
            {
                "path": name,
                "steps": int(keep.sum()),
                "dropped_k_above_k_max": int((~keep).sum()),
                "latency_steps_without_prefill": int(decode_only.sum()),
                "steps_next_to_a_prompt_chunk": int(next_to_chunk.sum()),
                "skipped_lines": int(t.skipped),
                "source": str(t.header.get("source", "")),
            }
        )
    batch, k, step_s, ctx = (np.concatenate(c) for c in zip(*cols))
    if batch.size == 0:
        raise FitInputError(f"no step of {[n for n, _ in traces]} has K <= k_max={k_max} and no prefill in it.")
    mixed = MixedCells.zeros(len(bucket_edges) * nc, k_max)
    mixed.add(*typical_chunks(*(np.concatenate(c) for c in zip(*chunked))))
    by_context = tuple(aggregate(batch[ctx == c], k[ctx == c], step_s[ctx == c]) for c in range(nc)) if nc > 1 else ()
    return FitData(
        classes.pop(),
        k_max,
        aggregate(batch, k, step_s),
        acc_s,
        acc_f,
        mixed,
        [t.header for _, t in traces],
        inputs,
        tuple(context_edges),
        by_context,
    )


def context_buckets(name: str, trace: Trace, edges: tuple[int, ...], keep: np.ndarray) -> np.ndarray:
    """Each step's context bucket: that of its decoding requests' mean context, ``ctx // B``,
    as the governor buckets it (without hysteresis, as batch buckets are replayed here).
    All 0 with one context bucket.

    Raises:
        FitInputError: context buckets, and a kept step that decoded has no ``ctx``.
    """
    if len(edges) == 1:
        return np.zeros(trace.batch.size, dtype=np.int64)
    unknown = keep & (trace.batch > 0) & (trace.context < 0)
    if unknown.any():
        raise FitInputError(
            f"{name!r}: {int(unknown.sum())} of its steps have no `ctx` (logged before traces carried the "
            f"context), so they cannot be put in context buckets {list(edges)}: fit it without "
            "--context-edges, or record the trace again."
        )
    mean = np.where(trace.batch > 0, trace.context // np.maximum(trace.batch, 1), 0)
    return np.maximum(np.searchsorted(np.asarray(edges), mean, side="right") - 1, 0)
