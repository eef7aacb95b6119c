"""Per-request acceptance: each request's per-position Beta, shrunk toward its drafter class.

Requests differ (code against chat, a quoted passage against fresh text), so the conditional
acceptance alpha_{r,i} of request r at position i (as in :mod:`acceptance`: given positions
1..i-1 accepted) is modelled as a draw from the class:

    alpha_{r,i} ~ Beta(n0 * m_i, n0 * (1 - m_i))

m_i is the class posterior's mean and n0 the prior strength, in pseudo-drafts. Each verified
step of the request adds its successes and failures at the positions it reached, so its
posterior mean is (n0 * m_i + s_ri) / (n0 + s_ri + f_ri): a new request starts at the class
mean and moves toward its own rate as its evidence outweighs n0.

n0 is learnt from the requests themselves (empirical Bayes, by moments). Under the model a
request's rate at a position, observed over n drafts, has

    E[(p_hat - m)^2] = m (1 - m) / n + (1 - 1/n) * tau^2,    tau^2 = m (1 - m) / (n0 + 1),

so rho = 1 / (n0 + 1), the share of the variance that lies between requests, is estimated by
pooling (p_hat - m)^2 - m (1 - m) / n against (1 - 1/n) over requests and positions. A class
whose requests are alike gives rho near 0 and a large n0: requests are then not told apart,
which is right, as there is nothing to tell.
"""

from __future__ import annotations

import numpy as np

#: n0 when requests look alike (rho <= 1 / (MAX_STRENGTH + 1)): the class mean all but decides.
MAX_STRENGTH = 1000.0
#: n0 when requests look as different as Bernoulli draws allow: a few drafts decide.
MIN_STRENGTH = 0.5


def shrunk_alpha(class_mean: np.ndarray, strength: float, succ: np.ndarray, fail: np.ndarray) -> np.ndarray:
    """Posterior mean of each request's per-position acceptance, shape ``succ.shape``.

    Args:
        class_mean: m_i per position, shape (k_max,), each in [0, 1].
        strength: n0 > 0, the class prior's weight in pseudo-drafts.
        succ, fail: the request's successes and failures per position, shape (R, k_max)
            (:func:`acceptance.position_counts` of each request's history).

    >>> shrunk_alpha(np.array([0.5, 0.5]), 2.0, np.array([[4, 0]]), np.array([[0, 0]])).tolist()
    [[0.8333333333333334, 0.5]]
    """
    m = np.asarray(class_mean, dtype=float)
    if strength <= 0 or not np.isfinite(strength):
        raise ValueError(f"`strength` must be a finite number > 0, got {strength}.")
    if m.ndim != 1 or ((m < 0) | (m > 1)).any():
        raise ValueError(f"`class_mean` must be a 1-D array of probabilities, got {m.tolist()}.")
    succ, fail = np.asarray(succ, dtype=float), np.asarray(fail, dtype=float)
    if succ.shape != fail.shape or succ.shape[-1] != m.size:
        raise ValueError(
            f"`succ` and `fail` must both have shape (requests, {m.size}), got {succ.shape} and {fail.shape}."
        )
    return (strength * m + succ) / (strength + succ + fail)


def survival(alpha: np.ndarray) -> np.ndarray:
    """P(drafts 1..j all accepted), j = 1..k_max, on the last axis.

    For independent per-position posteriors E[prod alpha_i] = prod E[alpha_i], so the
    posterior means give the posterior survival exactly.

    >>> survival(np.array([[0.5, 0.5, 1.0]])).tolist()
    [[0.5, 0.25, 0.25]]
    """
    return np.cumprod(alpha, axis=-1)


def strength_by_moments(class_mean: np.ndarray, succ: np.ndarray, fail: np.ndarray) -> float | None:
    """n0 estimated from the spread of requests around the class mean, or None without evidence.

    Only (request, position) cells with two or more drafts carry information about the
    spread between requests (one draft's variance is all Bernoulli). The estimate is clipped to
    [MIN_STRENGTH, MAX_STRENGTH].

    >>> m = np.array([0.5])
    >>> strength_by_moments(m, np.array([[10], [0]]), np.array([[0], [10]]))  # all or nothing: rho = 1
    0.5
    >>> strength_by_moments(m, np.array([[5], [5]]), np.array([[5], [5]]))  # exactly the class: rho <= 0
    1000.0
    """
    m = np.asarray(class_mean, dtype=float)
    succ, fail = np.asarray(succ, dtype=float), np.asarray(fail, dtype=float)
    n = succ + fail
    var = m * (1 - m)
    use = (n >= 2) & (var > 0)
    if not use.any():
        return None
    n_u = n[use]
    v = np.broadcast_to(var, n.shape)[use]
    p_hat = succ[use] / n_u
    excess = ((p_hat - np.broadcast_to(m, n.shape)[use]) ** 2 - v / n_u) / v
    rho = excess.sum() / (1 - 1 / n_u).sum()
    if rho <= 1 / (MAX_STRENGTH + 1):
        return MAX_STRENGTH
    return float(np.clip(1 / rho - 1, MIN_STRENGTH, MAX_STRENGTH))
