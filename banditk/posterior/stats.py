"""Sufficient statistics of the governor's posteriors.

Priors and live data are both kept as (weighted) sufficient statistics, so that
- a posterior is the base hyperparameters plus prior statistics plus data statistics;
- snapshots from several replicas merge by adding their statistics;
- discounting (forgetting) multiplies data statistics by a factor;
- a prior-strength cap rescales statistics, keeping their means and widening them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from banditk.core.errors import PriorFormatError
from banditk.posterior.latency_model import FEATURES

NUM_FEATURES = len(FEATURES)
#: Statistics of steps next to a prompt chunk, and their keys in a file's ``mixed_cells``.
MIXED_FIELDS = ("mix_n", "mix_sum", "mix_sumsq", "mix_p", "mix_pp", "mix_tp")
MIXED_KEYS = ("n", "sum_s", "sum_sq_s2", "sum_p", "sum_pp", "sum_tp")
#: Keys of the decode-only cells in a snapshot's state.
DECODE_ONLY_KEYS = ("n", "sum_s", "sum_sq_s2")


@dataclass(slots=True)
class SufficientStats:
    """Acceptance, latency-cell and regression statistics for one drafter class.

    Attributes:
        acc_successes: per position 1..K_max, accepted drafts.
        acc_failures: per position 1..K_max, first rejections.
        cell_n: per (bucket, K), weight of the step-time observations.
        cell_sum: per (bucket, K), weighted sum of step times (s).
        cell_sumsq: per (bucket, K), weighted sum of squared step times (s^2).
        reg_xtx: regression Gram matrix over the latency-model features.
        reg_xty: regression feature-times-time vector.
        reg_n: regression weight.
        prefill_rp: sum of (step-time residual x prefill tokens), for the price of a prefill token.
        prefill_pp: sum of squared prefill tokens.
        mix_n, mix_sum, mix_sumsq, mix_p, mix_pp, mix_tp: per (bucket, K), for steps that
            also compute a prompt chunk: weight, sums of step time t, t^2, prompt tokens P,
            P^2 and t*P. Next to a chunk a step can be compute-bound, so verifying drafts
            costs otherwise than in a decode-only step; with P in them, cells of different
            K are compared at the same chunk size (a shared slope per bucket).
    """

    acc_successes: np.ndarray
    acc_failures: np.ndarray
    cell_n: np.ndarray
    cell_sum: np.ndarray
    cell_sumsq: np.ndarray
    reg_xtx: np.ndarray
    reg_xty: np.ndarray
    reg_n: float = 0.0
    prefill_rp: float = 0.0
    prefill_pp: float = 0.0
    mix_n: np.ndarray | None = None
    mix_sum: np.ndarray | None = None
    mix_sumsq: np.ndarray | None = None
    mix_p: np.ndarray | None = None
    mix_pp: np.ndarray | None = None
    mix_tp: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in MIXED_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, np.zeros_like(self.cell_n))

    @classmethod
    def zeros(cls, k_max: int, num_buckets: int) -> SufficientStats:
        shape = (num_buckets, k_max + 1)
        return cls(
            np.zeros(k_max),
            np.zeros(k_max),
            np.zeros(shape),
            np.zeros(shape),
            np.zeros(shape),
            np.zeros((NUM_FEATURES, NUM_FEATURES)),
            np.zeros(NUM_FEATURES),
            0.0,
        )

    @property
    def k_max(self) -> int:
        return int(self.acc_successes.shape[0])

    @property
    def num_buckets(self) -> int:
        return int(self.cell_n.shape[0])

    def copy(self) -> SufficientStats:
        return SufficientStats(
            self.acc_successes.copy(),
            self.acc_failures.copy(),
            self.cell_n.copy(),
            self.cell_sum.copy(),
            self.cell_sumsq.copy(),
            self.reg_xtx.copy(),
            self.reg_xty.copy(),
            float(self.reg_n),
            self.prefill_rp,
            self.prefill_pp,
            *(getattr(self, f).copy() for f in MIXED_FIELDS),
        )

    def __add__(self, other: SufficientStats) -> SufficientStats:
        if (other.k_max, other.num_buckets) != (self.k_max, self.num_buckets):
            raise ValueError(
                f"Cannot add statistics of K_max={other.k_max}, {other.num_buckets} buckets "
                f"to K_max={self.k_max}, {self.num_buckets} buckets."
            )
        return SufficientStats(
            self.acc_successes + other.acc_successes,
            self.acc_failures + other.acc_failures,
            self.cell_n + other.cell_n,
            self.cell_sum + other.cell_sum,
            self.cell_sumsq + other.cell_sumsq,
            self.reg_xtx + other.reg_xtx,
            self.reg_xty + other.reg_xty,
            self.reg_n + other.reg_n,
            self.prefill_rp + other.prefill_rp,
            self.prefill_pp + other.prefill_pp,
            *(getattr(self, f) + getattr(other, f) for f in MIXED_FIELDS),
        )

    def tiled_over_context(self, num_context: int) -> SufficientStats:
        """Each batch bucket's cells copied into each of ``num_context`` context buckets (flat
        cell ``b * num_context + c``): a prior learnt without context, as every context's prior."""
        if num_context == 1:
            return self.copy()
        tile = lambda a: np.repeat(a, num_context, axis=0)  # noqa: E731
        return dataclasses.replace(
            self.copy(),
            cell_n=tile(self.cell_n),
            cell_sum=tile(self.cell_sum),
            cell_sumsq=tile(self.cell_sumsq),
            **{f: tile(getattr(self, f)) for f in MIXED_FIELDS},
        )

    def truncated(self, k_max: int) -> SufficientStats:
        """The statistics of positions and K up to ``k_max`` (<= this K_max)."""
        return SufficientStats(
            self.acc_successes[:k_max].copy(),
            self.acc_failures[:k_max].copy(),
            self.cell_n[:, : k_max + 1].copy(),
            self.cell_sum[:, : k_max + 1].copy(),
            self.cell_sumsq[:, : k_max + 1].copy(),
            self.reg_xtx.copy(),
            self.reg_xty.copy(),
            float(self.reg_n),
            self.prefill_rp,
            self.prefill_pp,
            *(getattr(self, f)[:, : k_max + 1].copy() for f in MIXED_FIELDS),
        )

    def capped(self, strength: float) -> SufficientStats:
        """Rescale so no acceptance position, latency cell or the regression weighs more than ``strength``.

        Means are kept; the posterior widens. This is how an imported prior is kept from
        drowning live data.
        """
        out = self.copy()
        acc_total = out.acc_successes + out.acc_failures
        f = np.where(acc_total > strength, strength / np.maximum(acc_total, 1e-300), 1.0)
        out.acc_successes *= f
        out.acc_failures *= f
        g = np.where(out.cell_n > strength, strength / np.maximum(out.cell_n, 1e-300), 1.0)
        out.cell_n *= g
        out.cell_sum *= g
        out.cell_sumsq *= g
        g = np.where(out.mix_n > strength, strength / np.maximum(out.mix_n, 1e-300), 1.0)
        for f in MIXED_FIELDS:
            getattr(out, f)[...] *= g
        if out.reg_n > strength:
            h = strength / out.reg_n
            out.reg_xtx *= h
            out.reg_xty *= h
            out.reg_n *= h
            out.prefill_rp *= h
            out.prefill_pp *= h
        return out

    def to_dict(self) -> dict:
        return {
            "acceptance": {"successes": self.acc_successes.tolist(), "failures": self.acc_failures.tolist()},
            "cells": {
                "n": self.cell_n.tolist(),
                "sum_s": self.cell_sum.tolist(),
                "sum_sq_s2": self.cell_sumsq.tolist(),
            },
            "mixed_cells": {key: getattr(self, f).tolist() for key, f in zip(MIXED_KEYS, MIXED_FIELDS)},
            "regression": {
                "features": list(FEATURES),
                "xtx": self.reg_xtx.tolist(),
                "xty": self.reg_xty.tolist(),
                "n": float(self.reg_n),
                "prefill_rp": float(self.prefill_rp),
                "prefill_pp": float(self.prefill_pp),
            },
        }

    @classmethod
    def from_dict(cls, d: object, k_max: int, num_buckets: int, where: str) -> SufficientStats:
        """Parse and validate; every problem raises :class:`PriorFormatError` naming the field."""
        d = _obj(d, where)
        acc = _obj(d.get("acceptance"), f"{where}.acceptance")
        cells = _obj(d.get("cells"), f"{where}.cells")
        reg = _obj(d.get("regression"), f"{where}.regression")
        if reg.get("features", list(FEATURES)) != list(FEATURES):
            raise PriorFormatError(
                f"`{where}.regression.features` must be {list(FEATURES)}, got {reg.get('features')!r}."
            )
        cell_shape = (num_buckets, k_max + 1)
        # Files written before steps with a prompt chunk had their own cells have none.
        zeros = np.zeros(cell_shape).tolist()
        mixed = _obj(d.get("mixed_cells", dict.fromkeys(MIXED_KEYS, zeros)), f"{where}.mixed_cells")
        out = cls(
            _array(acc.get("successes"), (k_max,), f"{where}.acceptance.successes"),
            _array(acc.get("failures"), (k_max,), f"{where}.acceptance.failures"),
            _array(cells.get("n"), cell_shape, f"{where}.cells.n"),
            _array(cells.get("sum_s"), cell_shape, f"{where}.cells.sum_s"),
            _array(cells.get("sum_sq_s2"), cell_shape, f"{where}.cells.sum_sq_s2"),
            _array(reg.get("xtx"), (NUM_FEATURES, NUM_FEATURES), f"{where}.regression.xtx", signed=True),
            _array(reg.get("xty"), (NUM_FEATURES,), f"{where}.regression.xty", signed=True),
            float(_array(reg.get("n"), (), f"{where}.regression.n")),
            float(_array(reg.get("prefill_rp", 0.0), (), f"{where}.regression.prefill_rp", signed=True)),
            float(_array(reg.get("prefill_pp", 0.0), (), f"{where}.regression.prefill_pp")),
            *(_array(mixed.get(key), cell_shape, f"{where}.mixed_cells.{key}") for key in MIXED_KEYS),
        )
        # Feature 0 is the constant 1 and every feature is >= 0: the Gram matrix's first row
        # holds the weight and the feature sums. A file that breaks this would scale the
        # latency model by ~1/0.
        if abs(out.reg_xtx[0, 0] - out.reg_n) > 1e-6 * max(1.0, out.reg_n) or np.any(out.reg_xtx[0] < 0):
            raise PriorFormatError(
                f"`{where}.regression.xtx` must have first row >= 0 starting with `n`={out.reg_n!r} "
                f"(feature 0 is the constant 1), got {out.reg_xtx[0].tolist()!r}."
            )
        _check_cells(out.cell_n, out.cell_sum, out.cell_sumsq, f"{where}.cells")
        _check_cells(out.mix_n, out.mix_sum, out.mix_sumsq, f"{where}.mixed_cells")
        _check_cells(out.mix_n, out.mix_p, out.mix_pp, f"{where}.mixed_cells", ("sum_p", "sum_pp"))
        return out


def _check_cells(
    n: np.ndarray, s: np.ndarray, ss: np.ndarray, where: str, names: tuple[str, str] = ("sum_s", "sum_sq_s2")
) -> None:
    # sum y^2 >= (sum y)^2 / n (Cauchy-Schwarz), with room for rounding; a square that
    # overflows is infinite, so the check fails instead of raising.
    safe_n = np.where(n > 0, n, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        bad = ss * (1 + 1e-9) + 1e-12 < s**2 / safe_n
    if np.any(bad):
        b, k = (int(i) for i in np.argwhere(bad)[0])
        bound = float(s[b, k]) ** 2 / float(safe_n[b, k]) if abs(s[b, k]) < 1e150 else float("inf")
        raise PriorFormatError(
            f"`{where}` at bucket {b}, K={k} is inconsistent: {names[1]}={ss[b, k]!r} < {names[0]}^2/n={bound!r}."
        )
    bad = (n == 0) & (s != 0)
    if np.any(bad):
        b, k = (int(i) for i in np.argwhere(bad)[0])
        raise PriorFormatError(f"`{where}` at bucket {b}, K={k} has {names[0]}={s[b, k]!r} with n=0.")


def _obj(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise PriorFormatError(f"`{where}` must be a JSON object, got {type(value).__name__}: {_short(value)}.")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _array(value: object, shape: tuple[int, ...], where: str, signed: bool = False) -> np.ndarray:
    if value is None:
        raise PriorFormatError(f"`{where}` is missing.")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise PriorFormatError(f"`{where}` must be numbers of shape {list(shape)}, got {_short(value)}.") from None
    if arr.shape != shape:
        raise PriorFormatError(f"`{where}` must have shape {list(shape)}, got shape {list(arr.shape)}.")
    if not np.all(np.isfinite(arr)):
        raise PriorFormatError(f"`{where}` must be finite, got {_short(value)}.")
    if not signed and np.any(arr < 0):
        raise PriorFormatError(f"`{where}` must be >= 0, got {_short(value)}.")
    if np.any(np.abs(arr) > 1e300) or (arr.size and not math.isfinite(float(np.sum(np.abs(arr))))):
        raise PriorFormatError(f"`{where}` is too large to use, got {_short(value)}.")
    return arr
