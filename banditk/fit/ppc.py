"""Posterior predictive check: observed versus predicted mean step time per (bucket, K).

The check is on the parametric model alone (``delta`` left out): it asks whether the
interpretable latency model describes the trace, which is what a prior's estimates for
untried cells rest on. A cell's prediction averages the model over the batch sizes the
trace had in that cell, so observed and predicted compare like for like. With context
buckets a cell is (context bucket, bucket, K) and its prediction is the model's times that
context bucket's scale (:func:`banditk.fit.build.context_scale`), as the prior's cells are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from banditk.core.buckets import bucket_of
from banditk.fit.data import StepGroups
from banditk.fit.model import Posterior

#: Cells with fewer steps are shown but left out of the summary: their observed mean
#: is itself uncertain by more than the threshold (cv / sqrt(n): 0.1 / sqrt(20) = 2.2%).
MIN_CELL_STEPS = 20
#: Default refusal threshold on the median relative error (see :func:`check`).
MAX_MEDIAN_REL_ERROR = 0.05


@dataclass(frozen=True)
class PpcRow:
    """One (bucket, K) cell of the check.

    Attributes:
        bucket: bucket index; ``lo``/``hi``: its batch sizes (``hi`` None = open-ended).
        k: depth.
        steps: steps observed.
        observed: observed mean step time (s).
        predicted: posterior-mean predicted mean step time (s).
        lo90, hi90: central 90% posterior predictive interval of the cell's mean step time.
        rel_error: |observed - predicted| / observed.
        context_from: the context bucket's lower edge (tokens per request); None without
            context buckets.
    """

    bucket: int
    lo: int
    hi: int | None
    k: int
    steps: int
    observed: float
    predicted: float
    lo90: float
    hi90: float
    rel_error: float
    context_from: int | None = None

    @property
    def covered(self) -> bool:
        return self.lo90 <= self.observed <= self.hi90


@dataclass(frozen=True)
class PpcResult:
    rows: list[PpcRow]
    median_rel_error: float
    max_rel_error: float
    coverage90: float
    cells_used: int

    def to_dict(self) -> dict:
        return {
            "median_rel_error": round(self.median_rel_error, 6),
            "max_rel_error": round(self.max_rel_error, 6),
            "coverage90": round(self.coverage90, 4),
            "cells": len(self.rows),
            "cells_used": self.cells_used,
            "min_cell_steps": MIN_CELL_STEPS,
        }


def posterior_predictive(
    groups: StepGroups,
    posterior: Posterior,
    edges: tuple[int, ...],
    seed: int = 0,
    *,
    context: tuple[tuple[int, StepGroups, float], ...] = (),
) -> PpcResult:
    """Compare each (bucket, K) cell's observed mean step time with the model's prediction.

    ``context``: per context bucket, its lower edge, its step groups and its scale; the
    cells are then those of each context bucket (``groups`` is not used).
    """
    rng = np.random.default_rng(seed)
    parts = context or ((None, groups, 1.0),)
    rows = [row for c, g, scale in parts if len(g) for row in _cells(g, posterior, edges, rng, scale, c)]
    used = [r for r in rows if r.steps >= MIN_CELL_STEPS] or rows
    err = np.array([r.rel_error for r in used])
    return PpcResult(
        rows, float(np.median(err)), float(err.max()), float(np.mean([r.covered for r in used])), len(used)
    )


def _cells(
    groups: StepGroups, posterior: Posterior, edges: tuple[int, ...], rng, scale: float, context_from: int | None
) -> list[PpcRow]:
    buckets = np.array([bucket_of(edges, int(b)) for b in groups.batch])
    mu = scale * posterior.predict(groups.batch, groups.k)  # (draws, groups)
    rows = []
    for b, k in sorted(set(zip(buckets.tolist(), groups.k.tolist()))):
        sel = (buckets == b) & (groups.k == k)
        n = groups.n[sel]
        steps = float(n.sum())
        observed = float(n @ groups.mean[sel] / steps)
        pred = mu[:, sel] @ n / steps  # (draws,)
        # Replicated cell means: the model's mean plus the noise of a mean of `steps` steps.
        rep = pred + posterior.cv * pred / np.sqrt(steps) * rng.standard_normal(pred.shape)
        lo90, hi90 = np.quantile(rep, [0.05, 0.95])
        p = float(pred.mean())
        hi = edges[b + 1] - 1 if b + 1 < len(edges) else None
        rows.append(
            PpcRow(
                b,
                edges[b],
                hi,
                int(k),
                int(steps),
                observed,
                p,
                float(lo90),
                float(hi90),
                abs(observed - p) / observed,
                context_from,
            )
        )
    return rows


def format_table(result: PpcResult) -> str:
    """The check as a text table, one line per (bucket, K)."""
    by_context = any(r.context_from is not None for r in result.rows)
    lines = [
        ("context  " if by_context else "")
        + f"{'bucket':>9} {'K':>2} {'steps':>7} {'observed ms':>12} {'predicted ms':>13} {'90% interval ms':>19} {'rel err':>8}"
    ]
    for r in result.rows:
        rng_ = f"{r.lo}-{r.hi}" if r.hi is not None else f"{r.lo}+"
        flag = "" if r.steps >= MIN_CELL_STEPS else "  (few steps)"
        ctx = f"L>={r.context_from:<5} " if by_context else ""
        lines.append(
            f"{ctx}{rng_:>9} {r.k:>2} {r.steps:>7} {r.observed * 1e3:>12.3f} {r.predicted * 1e3:>13.3f} "
            f"{r.lo90 * 1e3:>9.3f}-{r.hi90 * 1e3:<9.3f} {r.rel_error * 100:>7.2f}%{flag}"
        )
    lines.append(
        f"median relative error {result.median_rel_error * 100:.2f}% (max {result.max_rel_error * 100:.2f}%) "
        f"over {result.cells_used} cells with >= {MIN_CELL_STEPS} steps; "
        f"observed mean inside the 90% predictive interval in {result.coverage90 * 100:.0f}% of them"
    )
    return "\n".join(lines)
