"""What a verified token costs: the step-time model refitted on the tokens actually verified.

The batch governor's step-time model (:mod:`banditk.posterior.latency_model`) prices B (K + 1)
verified tokens, which is what a step verifies when every draft is verified. Once drafts are
cut per request, the verified count moves apart from K, and only a fit on what was verified
tells a verified token's price from a drafted position's. This is that fit:

    t = w_fixed + w_verify (B + V) + w_draft_forward max(K, 1) + w_draft_token B max(K, 1)

with V the drafts verified, a Bayesian ridge regression whose prior mean is the batch model's
current weights (worth ``PRIOR_STEPS`` typical steps) and whose weights are kept >= 0, as
there. At a single batch size and with every draft verified, V is a function of K and the
price cannot be told from the drafting cost; the Thompson draws of the price
(:meth:`VerifyPrice.draw`) vary the budget, and that variation identifies it.
"""

from __future__ import annotations

import numpy as np

from banditk.posterior import latency_model

#: Index of the seconds-per-verified-token weight in the step-time model.
VERIFY_WEIGHT = latency_model.FEATURES.index("verify_token_s")
#: Observations the prior (the batch model's weights) is worth.
PRIOR_STEPS = 1.0
#: Observations between two solves of the posterior.
REFRESH = 16
#: Floor of the residual variance, relative to the squared mean step time (a 1% clock).
MIN_REL_VAR = 1e-4
#: Weight of the newest squared residual in the noise estimate.
NOISE_WEIGHT = 1.0 / 64.0


def verified_features(batch: float, verified: float, k: int) -> np.ndarray:
    """The step-time model's feature row with B + V verified tokens in place of B (K + 1).

    >>> verified_features(4, 6, 3).tolist()
    [1.0, 10.0, 3.0, 12.0]
    """
    x = latency_model.features_rows(np.array([batch]), np.array([k]))[0]
    x[VERIFY_WEIGHT] = batch + verified
    return x


class VerifyPrice:
    """Posterior of the step-time weights with V as verified; ``draw`` gives one Thompson draw of them."""

    def __init__(self) -> None:
        n = len(latency_model.FEATURES)
        self.xtx, self.xty = np.zeros((n, n)), np.zeros(n)
        self.n, self.t_sum = 0, 0.0
        self.noise_var: float | None = None  # of a step around the posterior mean, once there is one
        self.mean = np.zeros(n)
        self._chol = None  # Cholesky factor of the posterior covariance / sigma^2
        self._scale = None  # squared feature magnitudes of the first step: the prior's units
        self._since = REFRESH

    def observe(self, batch: int, verified: int, k: int, t: float) -> None:
        x = verified_features(batch, verified, k)
        if self._scale is None:
            self._scale = np.maximum(x * x, 1e-12)
        if self._chol is not None:  # residuals only against a fitted mean: the noise the draws scale by
            r2 = (t - float(x @ self.mean)) ** 2
            self.noise_var = r2 if self.noise_var is None else self.noise_var + NOISE_WEIGHT * (r2 - self.noise_var)
        self.xtx += np.outer(x, x)
        self.xty += x * t
        self.n += 1
        self.t_sum += t

    def refresh(self, prior_mean: np.ndarray) -> None:
        """Solve for the posterior given the batch model's weights as the prior mean."""
        if self._scale is None:
            return
        precision = np.diag(PRIOR_STEPS * self._scale)
        self.mean = latency_model.solve(np.maximum(prior_mean, 0.0), precision, self.xtx, self.xty)
        try:
            self._chol = np.linalg.cholesky(np.linalg.inv(precision + self.xtx))
        except np.linalg.LinAlgError:
            self._chol = None
        self._since = 0

    def draw(self, rng: np.random.Generator, prior_mean: np.ndarray) -> np.ndarray:
        """One Thompson draw of the weights (each >= 0); the posterior mean when nothing is known."""
        self._since += 1
        if self._since >= REFRESH:
            self.refresh(prior_mean)
        if self._chol is None or self.n < 2:
            return np.maximum(self.mean if self.n else prior_mean, 0.0)
        mean_t = self.t_sum / self.n
        var = max(self.noise_var if self.noise_var is not None else 0.01 * mean_t * mean_t, MIN_REL_VAR * mean_t**2)
        return np.maximum(self.mean + np.sqrt(var) * (self._chol @ rng.standard_normal(self.mean.size)), 0.0)
