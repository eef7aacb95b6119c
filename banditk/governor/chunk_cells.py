"""Cells of steps next to a prompt chunk: their posterior at a given chunk size, and their credit.

Such a step's time grows with the chunk, and the K tried next to chunks met chunks of other
sizes, so each K's mean is read at this chunk size along a slope in P shared by the bucket's
K (fitted within cells: analysis of covariance). The prior mean, worth ``PRIOR_COUNT`` steps,
is additive: the best-measured K's time next to such a chunk plus the decode-only difference
(before any such step, the decode-only time plus the chunk's price).
"""

from __future__ import annotations

import numpy as np

from banditk.posterior.nig import posterior_from_moments
from banditk.posterior.prior_conflict import chunk_moments, residual_var, slope_from_moments
from banditk.posterior.stats import MIXED_FIELDS, SufficientStats

#: Weight, in steps, of the additive prior of a cell next to a chunk: a K with a few such
#: steps is read mostly from them.
PRIOR_COUNT = 2.0


def chunk_step_posterior(
    prior: SufficientStats,
    data: SufficientStats,
    bucket: int,
    prefill_tokens: float,
    decode_s: np.ndarray,
    prefill_price: float,
    noise_shape: float,
    latency_cv: float,
):
    """Posterior (m, k, a, b) per K of the time of a step next to a chunk of ``prefill_tokens``,
    given the decode-only time per K at this step's batch (``decode_s``) and the price of a
    prompt token (the slope where chunks have not varied enough to fit one)."""
    n, s, ss, p, pp, tp = (getattr(prior, f)[bucket] + getattr(data, f)[bucket] for f in MIXED_FIELDS)
    mt, mp, var_p, cov, var_t = chunk_moments(n, s, p, pp, tp, ss)
    slope = float(slope_from_moments(n, var_p, cov, fallback=prefill_price))
    at_p = mt + slope * (prefill_tokens - mp)
    scatter = n * residual_var(var_t, var_p, cov, slope)
    if n.max() > 0:
        # A chunk costs every K the same: a K rarely seen next to one starts from the
        # best-measured K's time there plus the decode-only difference between them.
        ref = int(np.argmax(n))
        m0 = at_p[ref] + decode_s - decode_s[ref]
    else:
        m0 = decode_s + prefill_price * prefill_tokens
    b0 = noise_shape * (latency_cv * m0) ** 2
    return posterior_from_moments(m0, PRIOR_COUNT, noise_shape, b0, n, at_p, scatter)


def credit(data: SufficientStats, bucket: int, k: int, t: float, prefill_tokens: float, gamma: float) -> None:
    """Add one step next to a chunk (whole step time ``t``) to its cell, forgetting by ``gamma``."""
    p = float(prefill_tokens)
    for arr, v in (
        (data.mix_n, 1.0),
        (data.mix_sum, t),
        (data.mix_sumsq, t * t),
        (data.mix_p, p),
        (data.mix_pp, p * p),
        (data.mix_tp, t * p),
    ):
        arr[bucket, k] = arr[bucket, k] * gamma + v
