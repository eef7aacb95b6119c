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

:func:`install` replaces the posterior class the bandit governor builds; forked workers inherit
it. The classes here are the change as it would land in ``governor/posterior.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.governor import bandit, cell_strength
from banditk.governor.posterior import GoodputPosterior


class FittedCountPosterior(GoodputPosterior):
    """:class:`GoodputPosterior` whose ``cell_prior_count`` is refit with the latency model."""

    def __init__(self, config, prior) -> None:
        self.count_prior = config.cell_prior_count
        self.count_cap = config.explore_steps / 2.0
        super().__init__(config, prior)

    def update_cache(self) -> None:
        cfg, count = self.config, self.count_prior
        if not self.scale_pending:  # the model's means are placeholders until the scale is known
            count = cell_strength.fitted_cell_count(
                self.decode_only, self.cell_prior_mean, self._design, cfg.latency_cv, self.count_prior, self.count_cap
            )
        self.config = dataclasses.replace(cfg, cell_prior_count=count)
        super().update_cache()


def data_scaled_precision(xtx: np.ndarray, n: float, strength: float) -> np.ndarray:
    """Ridge precision worth ``strength`` observations per feature at the observed rows' mean
    squared size (``diag(X^T X) / n``).

    >>> data_scaled_precision(np.diag([4.0, 400.0]), 4.0, 2.0).tolist()
    [[2.0, 0.0], [0.0, 200.0]]
    """
    return np.diag(strength * np.diag(xtx) / n)


class FittedCountDataRidgePosterior(FittedCountPosterior):
    """:class:`FittedCountPosterior` whose latency model's ridge is scaled by the rows observed."""

    def refresh(self) -> None:
        self.fold_pending()
        p, d = self.prior_stats, self.data
        n = p.reg_n + d.reg_n
        if n > 0:
            self._model_prior_precision = data_scaled_precision(
                p.reg_xtx + d.reg_xtx, n, self.config.model_prior_strength
            )
        super().refresh()


POSTERIORS = {"cell-strength": FittedCountPosterior, "cell-strength+data-ridge": FittedCountDataRidgePosterior}
#: The defaults the change would ship with: the prior guess tau0 = 5% (latency_cv 0.1 / sqrt(4)).
WIRED_DEFAULTS = {"cell_prior_count": 4.0}


def wired(posterior: type) -> type:
    """``posterior`` built with :data:`WIRED_DEFAULTS` where a config leaves a field at its
    shipped default: the change as a user would get it, flag-free."""
    shipped = GovernorConfig.__dataclass_fields__

    class Wired(posterior):
        def __init__(self, config, prior) -> None:
            same = {k: v for k, v in WIRED_DEFAULTS.items() if getattr(config, k) == shipped[k].default}
            super().__init__(dataclasses.replace(config, **same), prior)

    Wired.__name__ = Wired.__qualname__ = f"Wired{posterior.__name__}"
    return Wired


def install(name: str = "cell-strength", with_defaults: bool = False) -> None:
    """Make the bandit governor build the posterior of variant ``name`` (a key of POSTERIORS),
    with :data:`WIRED_DEFAULTS` in place of the shipped defaults if ``with_defaults``."""
    bandit.GoodputPosterior = wired(POSTERIORS[name]) if with_defaults else POSTERIORS[name]
