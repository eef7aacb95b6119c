"""The governor with its cells' prior count fit to the latency model's misfit
(:mod:`banditk.governor.cell_strength`), installed into this process for a simulator run.

    python experiments/sweep_variant.py --variant cell-strength --governor-config '{"cell_prior_count": 4}'
    python experiments/sweep_variant.py --variant cell-strength+data-ridge --governor-config '{...}'

``cell_prior_count`` becomes the prior guess of the count (tau0^2 = latency_cv^2 / count); the
count in use follows the measured cells at each refit of the latency model, capped at half of
``explore_steps`` (the model never outweighs half a first look). ``+data-ridge`` also scales the
latency model's ridge prior by the rows observed, where the governor scales it by every bucket's
design: worth ``model_prior_strength`` observations like the ones seen, not like a B = 256 step
(at small B the shipped scaling lets the default shape outweigh hundreds of steps).
``relative-ridge`` instead makes the ridge relative to each prior weight: worth
``model_prior_strength`` = (step noise cv / the weights' relative spread)^2, with no feature scale,
so it binds where a feature is small (extrapolation to buckets not seen) and yields where it is
large.

:func:`install` replaces the posterior class the bandit governor builds; forked workers inherit
it. The classes here are the change as it would land in ``governor/posterior.py``.
"""

from __future__ import annotations

import dataclasses

import exploration_variant
import numpy as np

from banditk.core.config import GovernorConfig
from banditk.governor import bandit, cell_strength, latency_fit
from banditk.governor.posterior import NOISE_SHAPE, GoodputPosterior
from banditk.posterior import nig


class FittedCountPosterior(GoodputPosterior):
    """:class:`GoodputPosterior` whose ``cell_prior_count`` is refit with the latency model."""

    def __init__(self, config, prior) -> None:
        self.count_prior = config.cell_prior_count
        self.count_cap = config.explore_steps / 2.0
        super().__init__(config, prior)

    def fitted_count(self) -> float:
        """The count fit to the measured cells; the prior guess while the model's means are
        placeholders (the scale is not known yet)."""
        if self.scale_pending:
            return self.count_prior
        cfg = self.config
        return cell_strength.fitted_cell_count(
            self.decode_only, self.cell_prior_mean, self._design, cfg.latency_cv, self.count_prior, self.count_cap
        )

    def update_cache(self) -> None:
        self.config = dataclasses.replace(self.config, cell_prior_count=self.fitted_count())
        super().update_cache()


def data_scaled_precision(xtx: np.ndarray, n: float, strength: float) -> np.ndarray:
    """Ridge precision worth ``strength`` observations per feature at the observed rows' mean
    squared size (``diag(X^T X) / n``).

    >>> data_scaled_precision(np.diag([4.0, 400.0]), 4.0, 2.0).tolist()
    [[2.0, 0.0], [0.0, 200.0]]
    """
    return np.diag(strength * np.diag(xtx) / n)


class DataRidge:
    """Mixed in before a posterior: the latency model's ridge scaled by the rows observed."""

    def refresh(self) -> None:
        self.fold_pending()
        p, d = self.prior_stats, self.data
        n = p.reg_n + d.reg_n
        if n > 0:
            self._model_prior_precision = data_scaled_precision(
                p.reg_xtx + d.reg_xtx, n, self.config.model_prior_strength
            )
        super().refresh()


class FittedCountDataRidgePosterior(DataRidge, FittedCountPosterior):
    """:class:`FittedCountPosterior` whose latency model's ridge is scaled by the rows observed."""


def leverage_ratio(design: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Per cell, its row's leverage over the highest of the measured cells' rows (the model's
    prediction variance there over its worst at a measured cell); inf outside their span.

    >>> d = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0], [1.0, 9.0]])
    >>> leverage_ratio(d, np.array([True, False, True, False])).round(2).tolist()
    [1.0, 0.5, 1.0, 25.0]
    >>> leverage_ratio(np.eye(2), np.array([True, False])).tolist()
    [1.0, inf]
    """
    rows = design.reshape(-1, design.shape[-1])
    scale = np.maximum(np.abs(rows).max(axis=0), 1e-300)  # features differ by orders of magnitude
    x, xm = rows / scale, rows[measured.reshape(-1)] / scale
    if xm.shape[0] == 0:
        return np.full(design.shape[:-1], np.inf)
    gram = xm.T @ xm
    gram_inv = np.linalg.pinv(gram)
    h = np.einsum("ij,jk,ik->i", x, gram_inv, x)
    in_span = np.linalg.norm(x - x @ (gram_inv @ gram), axis=1) <= 1e-8 * np.linalg.norm(x, axis=1)
    h_max = float(np.max(np.einsum("ij,jk,ik->i", xm, gram_inv, xm)))
    return np.where(in_span, h / h_max, np.inf).reshape(design.shape[:-1])


def surrounded(design: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Per cell, whether the measured cells' rows surround its row: it lies in their span, at a
    leverage no higher than the highest of theirs. The model's time there interpolates what was
    measured; elsewhere (a K with a feature row of its own, a B beyond those measured) it
    extrapolates, and no residual says how well.

    >>> d = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0], [1.0, 9.0], [1.0, -5.0]])
    >>> surrounded(d, np.array([True, False, True, False, False])).tolist()
    [True, True, True, False, False]
    >>> surrounded(np.eye(2), np.array([True, False])).tolist()  # the second row is outside the span
    [True, False]
    """
    return leverage_ratio(design, measured) <= 1.0 + 1e-9


class LeverageGatedPosterior(FittedCountPosterior):
    """:class:`FittedCountPosterior` whose fitted count applies only to the cells the measured ones
    surround (:func:`surrounded`); every other cell keeps the shipped flat count."""

    FLAT_COUNT = GovernorConfig.__dataclass_fields__["cell_prior_count"].default

    def cell_counts_for(self, fitted: float, measured: np.ndarray) -> np.ndarray:
        return np.where(surrounded(self._design, measured), fitted, self.FLAT_COUNT)

    def update_cache(self) -> None:
        measured = self.decode_only[0] >= cell_strength.MIN_CELL_OBSERVATIONS
        self.cell_counts = self.cell_counts_for(self.fitted_count(), measured)
        GoodputPosterior.update_cache(self)

    def latency_params(self, bucket=slice(None)):
        """The shipped posterior's, with each cell's own count (``bucket`` may also be a cell)."""
        p, d, cfg = self.prior_stats, self.data, self.config
        m0 = self.cell_prior_mean[bucket]
        counts = getattr(self, "cell_counts", None)  # None while the base class builds
        k0 = self.FLAT_COUNT if counts is None else counts[bucket]
        return nig.posterior(
            m0,
            k0,
            NOISE_SHAPE,
            NOISE_SHAPE * (cfg.latency_cv * m0) ** 2,
            p.cell_n[bucket] + d.cell_n[bucket],
            p.cell_sum[bucket] + d.cell_sum[bucket],
            p.cell_sumsq[bucket] + d.cell_sumsq[bucket],
        )

    def _update_cell(self, bucket: int, k: int) -> None:
        out = (float(v) for v in self.latency_params((bucket, k)))
        self.post_m[bucket, k], self.post_k[bucket, k], self.post_a[bucket, k], self.post_b[bucket, k] = out


class LeverageScaledPosterior(LeverageGatedPosterior):
    """:class:`LeverageGatedPosterior` with the fitted count divided by the leverage ratio beyond
    the measured rows (the prediction's variance grows with it) instead of dropped to the flat
    count; the flat count outside their span."""

    def cell_counts_for(self, fitted: float, measured: np.ndarray) -> np.ndarray:
        ratio = leverage_ratio(self._design, measured)
        finite = np.isfinite(ratio)
        scaled = fitted / np.maximum(np.where(finite, ratio, 1.0), 1.0)
        return np.where(finite, np.maximum(scaled, self.FLAT_COUNT), self.FLAT_COUNT)


class DataRidgePosterior(DataRidge, GoodputPosterior):
    """The shipped posterior with only the latency model's ridge scaled by the rows observed."""


def relative_precision(w0: np.ndarray, t_mean: float, x_typ: np.ndarray, strength: float) -> np.ndarray:
    """Ridge precision of a prior that knows each weight relative to its own size:
    ``strength * (t_mean / w0_j)^2``, i.e. (noise cv / relative spread)^2 of the weights,
    against steps of mean time ``t_mean``. No feature scale enters, so a B = 256 bucket no
    one has seen does not make the prior heavier at B = 2, and a weight's prior binds where
    its feature is small (extrapolation) and gives way where it is large (data). A weight
    whose prior is 0 is floored where its feature would add 0.1% of a mean step at its
    typical size ``x_typ``.

    >>> np.diag(relative_precision(np.array([0.01, 0.0]), 0.02, np.array([1.0, 100.0]), 0.01)).tolist()
    [0.04, 100000000.0]
    """
    floor = 1e-3 * t_mean / np.maximum(x_typ, 1e-300)
    return np.diag(strength * (t_mean / np.maximum(w0, floor)) ** 2)


class RelativeRidge:
    """Mixed in before a posterior: the latency model's ridge relative to each prior weight."""

    def refresh(self) -> None:
        self.fold_pending()
        p, d = self.prior_stats, self.data
        xtx, xty, n = p.reg_xtx + d.reg_xtx, p.reg_xty + d.reg_xty, p.reg_n + d.reg_n
        w0 = latency_fit.prior_mean(self._prior_weights, xtx, xty, n)
        if w0 is not None:
            x_typ = np.sqrt((self._design**2).reshape(-1, self._design.shape[-1]).mean(axis=0))
            # The mean step seen, or before any step the prior's mean over the design.
            t_mean = float(xty[0] / n) if n > 0 else float((self._design @ w0).mean())
            self._model_prior_precision = relative_precision(w0, t_mean, x_typ, self.config.model_prior_strength)
        super().refresh()


class RelativeRidgePosterior(RelativeRidge, GoodputPosterior):
    """The shipped posterior with the latency model's ridge relative to each prior weight."""


class FittedCountRelativeRidgePosterior(RelativeRidge, FittedCountPosterior):
    """:class:`FittedCountPosterior` whose latency model's ridge is relative to each prior weight."""


POSTERIORS = {
    "cell-strength": FittedCountPosterior,
    "cell-strength+data-ridge": FittedCountDataRidgePosterior,
    "cell-strength-gated": LeverageGatedPosterior,
    "cell-strength-leverage": LeverageScaledPosterior,
    "data-ridge": DataRidgePosterior,
    "relative-ridge": RelativeRidgePosterior,
    "cell-strength+relative-ridge": FittedCountRelativeRidgePosterior,
}
#: The defaults each change would ship with: the prior guess of the count tau0 = 5%
#: (latency_cv 0.1 / sqrt(4)); a ridge worth one observed row per feature.
WIRED_DEFAULTS = {
    "cell-strength": {"cell_prior_count": 4.0},
    "cell-strength+data-ridge": {"cell_prior_count": 4.0, "model_prior_strength": 1.0},
    "cell-strength-gated": {"cell_prior_count": 4.0},
    "cell-strength-leverage": {"cell_prior_count": 4.0},
    "data-ridge": {"model_prior_strength": 1.0},
    # (10% step noise / weights known within about 30%)^2.
    "relative-ridge": {"model_prior_strength": 0.1},
    "cell-strength+relative-ridge": {"cell_prior_count": 4.0, "model_prior_strength": 0.1},
}


#: The exploration rules of experiments/exploration_variant.py, alone or on the relative ridge.
NAMES = sorted([*POSTERIORS, *(f"{p}{r}" for r in exploration_variant.RULES for p in ("", "relative-ridge+"))])
for _rule, _defaults in exploration_variant.WIRED_DEFAULTS.items():
    WIRED_DEFAULTS[_rule] = dict(_defaults)
    WIRED_DEFAULTS[f"relative-ridge+{_rule}"] = {**WIRED_DEFAULTS["relative-ridge"], **_defaults}


def wired(posterior: type, defaults: dict) -> type:
    """``posterior`` built with ``defaults`` where a config leaves a field at its shipped
    default: the change as a user would get it, flag-free."""
    shipped = GovernorConfig.__dataclass_fields__

    class Wired(posterior):
        def __init__(self, config, prior) -> None:
            same = {k: v for k, v in defaults.items() if getattr(config, k) == shipped[k].default}
            super().__init__(dataclasses.replace(config, **same), prior)

    Wired.__name__ = Wired.__qualname__ = f"Wired{posterior.__name__}"
    return Wired


def add_argument(parser, installed: str = "with the defaults it would ship with") -> None:
    """``--variant``: one of :data:`NAMES`, or none (the shipped governor)."""
    parser.add_argument(
        "--variant",
        choices=NAMES,
        default=None,
        help=f"a governor change under study (experiments/cell_strength_variant.py), {installed}",
    )


def install(name: str = "cell-strength", with_defaults: bool = False) -> None:
    """Make the bandit governor build the posterior of variant ``name`` (one of :data:`NAMES`),
    with its :data:`WIRED_DEFAULTS` in place of the shipped defaults if ``with_defaults``; a
    name ending in an exploration rule of experiments/exploration_variant.py also installs it."""
    rule = next((r for r in exploration_variant.RULES if name.endswith(r)), None)
    base = name.removesuffix(rule or "").removesuffix("+")
    if base:
        posterior = POSTERIORS[base]
        bandit.GoodputPosterior = wired(posterior, WIRED_DEFAULTS[base]) if with_defaults else posterior
    if rule:
        exploration_variant.install(with_defaults, rule)
