"""Optional terms of the offline latency model, and their choice per trace.

The governor's online model (:mod:`banditk.posterior.latency_model`) is linear in four features
whose form is fixed. The offline fit can afford more. Three terms with a physical reason
are added where a trace shows them, with ``n = B (K + 1)`` the tokens verified:

- ``per_request_s * B``: work per request that does not grow with K (each request's KV
  cache or recurrent state read once, its sampling).
- ``expert_s * f(n)``, ``f(n) = 1 - exp(-n**gamma / s)``: the routed MoE experts the step
  reads. Each of n tokens picks top_k of E experts, so a fraction
  ``1 - (1 - top_k/E)**n`` is touched, which is ``f`` with ``s = -1 / ln(1 - top_k/E)``;
  ``gamma < 1`` because the tokens of one sequence route alike. Concave in n: verifying
  more tokens costs less per token once most experts are read anyway.
- ``compute_s * max(0, n - n0)``: past the roofline's ridge ``n0`` a verified token costs
  compute, not bandwidth (dense models on bandwidth-limited boxes).

The shapes (``gamma``, ``s``, ``n0``) enter non-linearly, so they are chosen on a grid by
BIC of a weighted non-negative least-squares fit (the model's likelihood at delta = 0);
the weights are then inferred with the shape fixed. A term that does not lower BIC is
left out, so a trace the four features describe keeps the four features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from banditk.posterior.latency_model import FEATURES, features_rows

#: Grids of the non-linear shape parameters.
GAMMA_GRID = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
SCALE_GRID = tuple(float(2 ** (i / 2)) for i in range(0, 23))  # 1 .. 2048 tokens
KNEE_STEP = 2**0.5


@dataclass(frozen=True)
class LatencyShape:
    """Which optional terms the fit uses, and their shape parameters.

    Attributes:
        per_request: include ``per_request_s * B``.
        moe: ``(gamma, s)`` of the expert term, or None.
        knee_tokens: the ridge ``n0`` of the compute term, or None.
    """

    per_request: bool = False
    moe: tuple[float, float] | None = None
    knee_tokens: float | None = None

    @property
    def names(self) -> tuple[str, ...]:
        extra = (
            (("per_request_s",) if self.per_request else ())
            + (("expert_s",) if self.moe else ())
            + (("compute_s",) if self.knee_tokens is not None else ())
        )
        return FEATURES + extra

    @property
    def num_shape_params(self) -> int:
        return (2 if self.moe else 0) + (1 if self.knee_tokens is not None else 0)

    def rows(self, batch: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Feature rows for paired arrays of B and K (:func:`banditk.posterior.latency_model.features_rows` first).

        >>> LatencyShape(per_request=True, knee_tokens=8.0).rows(np.array([4.0]), np.array([2])).tolist()
        [[1.0, 12.0, 2.0, 8.0, 4.0, 4.0]]
        """
        b = np.asarray(batch, dtype=np.float64)
        k = np.asarray(k, dtype=np.float64)
        cols = [features_rows(b, k)]
        tokens = b * (k + 1.0)
        if self.per_request:
            cols.append(b[:, None])
        if self.moe:
            gamma, s = self.moe
            cols.append(-np.expm1(-(tokens**gamma) / s)[:, None])
        if self.knee_tokens is not None:
            cols.append(np.maximum(tokens - self.knee_tokens, 0.0)[:, None])
        return np.concatenate(cols, axis=1)

    def to_dict(self) -> dict:
        return {
            "features": list(self.names),
            "per_request": self.per_request,
            "moe": None if self.moe is None else {"gamma": self.moe[0], "scale_tokens": self.moe[1]},
            "knee_tokens": self.knee_tokens,
        }

    def summary(self) -> str:
        extra = ["B"] if self.per_request else []
        if self.moe:
            extra.append(f"1-exp(-n^{self.moe[0]:g}/{self.moe[1]:.3g})")
        if self.knee_tokens is not None:
            extra.append(f"max(0, n-{self.knee_tokens:.4g})")
        return "t(B,K) = w . [1, B(K+1), max(K,1), B max(K,1)" + "".join(", " + p for p in extra) + "], n = B(K+1)"


def relative_nnls(x: np.ndarray, n: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative weights minimising the squared relative errors of the group means, each
    group weighted by its step count (the likelihood's mean term when noise sd = cv x mean and
    delta = 0), and that sum of squares."""
    r = np.sqrt(n) / mean
    u, res = nnls(x * r[:, None], mean * r)
    return u, float(res**2)


def weighted_sse(x: np.ndarray, n: np.ndarray, mean: np.ndarray) -> float:
    """:func:`relative_nnls`'s sum of squares, columns scaled to 1 first (for conditioning)."""
    return relative_nnls(x / np.maximum(np.abs(x).max(axis=0), 1e-300), n, mean)[1]


def bic(sse: float, groups: int, params: int) -> float:
    """Gaussian BIC of a least-squares fit with ``params`` parameters (noise variance profiled out)."""
    return groups * np.log(max(sse, 1e-300) / groups) + params * np.log(groups)


def candidates(tokens_max: float) -> list[LatencyShape]:
    """Every shape on the grids: with or without each term."""
    moes = [None] + [(g, s) for g in GAMMA_GRID for s in SCALE_GRID]
    knees = [None]
    n0 = 2.0
    while n0 < tokens_max:
        knees.append(float(round(n0, 3)))
        n0 *= KNEE_STEP
    return [LatencyShape(pr, m, kn) for pr in (False, True) for m in moes for kn in knees]


def choose_shape(batch: np.ndarray, k: np.ndarray, n: np.ndarray, mean: np.ndarray) -> tuple[LatencyShape, dict]:
    """The shape with the lowest BIC over :func:`candidates`, and a summary of the choice.

    Shapes with as many parameters as groups are skipped (nothing left to check them on).
    """
    g = int(n.size)
    tokens_max = float(np.max(np.asarray(batch, dtype=float) * (np.asarray(k, dtype=float) + 1.0)))
    base = LatencyShape()
    base_sse = weighted_sse(base.rows(batch, k), n, mean)
    best, best_bic, best_sse = base, bic(base_sse, g, len(FEATURES)), base_sse
    for shape in candidates(tokens_max):
        p = len(shape.names) + shape.num_shape_params
        if shape == base or p >= g:
            continue
        sse = weighted_sse(shape.rows(batch, k), n, mean)
        score = bic(sse, g, p)
        if score < best_bic:
            best, best_bic, best_sse = shape, score, sse
    rms = lambda sse: float(np.sqrt(sse / n.sum()))  # noqa: E731  (relative, step-weighted)
    return best, {
        "shape": best.to_dict(),
        "rms_rel_error_linear": round(rms(base_sse), 5),
        "rms_rel_error_chosen": round(rms(best_sse), 5),
        "groups": g,
    }
