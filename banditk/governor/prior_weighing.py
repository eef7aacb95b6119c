"""A prior's latency cells, weighed down where live data contradicts them.

Per bucket, the calibration variance tau^2 of the prior's cell means about the live cells
(:mod:`banditk.posterior.prior_conflict`) sets how much of each prior cell is kept. Decode-only cells
are compared with the live decode-only cells; cells next to a chunk with the live ones
carried to the prior cell's chunk size along the prior's slope, since this deployment's
chunks may cost otherwise than the trace's. Acceptance and regression are used as loaded.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.core.errors import DrafterClassMismatchError, IncompatiblePriorError
from banditk.io.prior import Prior
from banditk.posterior import prior_conflict
from banditk.posterior.stats import MIXED_FIELDS, SufficientStats


def fit_prior(config: GovernorConfig, prior: Prior) -> SufficientStats:
    """Check a prior against the config and return its (truncated, capped) statistics."""
    if prior.key.drafter_class != config.drafter_class:
        raise DrafterClassMismatchError(
            f"prior drafter class {prior.key.drafter_class!r} cannot be used for drafter class "
            f"{config.drafter_class!r}: parameters never transfer across drafter classes."
        )
    if prior.k_max < config.k_max:
        raise IncompatiblePriorError(f"prior k_max={prior.k_max} is below the server's k_max={config.k_max}.")
    if tuple(prior.bucket_edges) != tuple(config.bucket_edges):
        raise IncompatiblePriorError(
            f"prior bucket_edges={list(prior.bucket_edges)} differ from the governor's {list(config.bucket_edges)}."
        )
    stats = prior.stats.truncated(config.k_max) if prior.k_max > config.k_max else prior.stats.copy()
    if tuple(prior.context_edges) != tuple(config.context_edges):
        if len(prior.context_edges) > 1:
            raise IncompatiblePriorError(
                f"prior context_edges={list(prior.context_edges)} differ from the governor's "
                f"{list(config.context_edges)}: refit or merge it with the same context edges."
            )
        # A prior learnt without context is each context bucket's starting point.
        stats = stats.tiled_over_context(config.num_context_buckets)
    return stats.capped(prior.strength_cap)


class PriorWeigher:
    """A loaded prior's statistics with their cell means and noise worked out once."""

    def __init__(self, loaded: SufficientStats) -> None:
        self.loaded = loaded
        p = loaded
        self.cells = prior_conflict.PriorCells(p.cell_n, p.cell_sum, p.cell_sumsq)
        mixed = [getattr(p, f) for f in MIXED_FIELDS]
        self.chunk_slope = prior_conflict.shared_chunk_slope(*mixed[:2], *mixed[3:])
        self.chunk_p = np.where(p.mix_n > 0, p.mix_p / np.where(p.mix_n > 0, p.mix_n, 1.0), 0.0)
        self.mixed_cells = prior_conflict.PriorCells(*mixed[:3], prior_conflict.chunk_adjusted_rel_var(*mixed))

    def calibration(self, data: SufficientStats, decode_only: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
        """tau^2 per bucket of the decode-only cells and of the cells next to a chunk; the
        latter is never below the former."""
        tau2 = self.cells.calibration_variance(*decode_only)
        live = prior_conflict.at_chunk_size(
            data.mix_n, data.mix_sum, data.mix_sumsq, data.mix_p, self.chunk_slope, self.chunk_p
        )
        return tau2, np.maximum(tau2, self.mixed_cells.calibration_variance(*live))

    def weighed(self, tau2: np.ndarray, tau2_mixed: np.ndarray) -> SufficientStats:
        """The prior with its cells at the weight they keep under ``tau2`` / ``tau2_mixed``;
        unchanged arrays are shared with the loaded prior (nothing writes to either)."""
        p = self.loaded
        if not tau2.any() and not tau2_mixed.any():
            return p
        f = self.cells.kept_share(tau2)
        g = self.mixed_cells.kept_share(tau2_mixed)
        return dataclasses.replace(
            p,
            cell_n=p.cell_n * f,
            cell_sum=p.cell_sum * f,
            cell_sumsq=p.cell_sumsq * f,
            **{name: getattr(p, name) * g for name in MIXED_FIELDS},
        )
