"""One verification budget per step, spent on the drafts most likely to be accepted.

The governor drafts K tokens for every request and verifies at most ``budget`` of them over
the batch. Verifying the first t drafts of request r yields sum_{j<=t} S_rj accepted tokens in
expectation, S_rj = P(drafts 1..j of r all accepted) (:mod:`banditk.posterior.request_acceptance`).
S is non-increasing in j, so the slots with the largest S, taken with the earlier position
first on ties, form a prefix of each request's drafts; that greedy choice maximises the
expected accepted tokens for the budget (an exchange argument: any other prefix-closed set of
the same size swaps a slot for one of no smaller S).
"""

from __future__ import annotations

import numpy as np


def allot(surv: np.ndarray, drafted: np.ndarray, budget: int) -> np.ndarray:
    """Drafts to verify per request: the ``budget`` slots of highest survival, as prefixes.

    Args:
        surv: S_rj, shape (R, k_max), non-increasing along each row.
        drafted: drafts each request proposed, shape (R,), each 0..k_max; no allotment exceeds it.
        budget: verified drafts over the batch, >= 0; a budget above the drafts verifies them all.

    >>> allot(np.array([[0.9, 0.8, 0.1], [0.5, 0.2, 0.0]]), np.array([3, 3]), 3).tolist()
    [2, 1]
    """
    surv = np.asarray(surv, dtype=float)
    drafted = np.asarray(drafted)
    if surv.ndim != 2:
        raise ValueError(f"`surv` must have shape (requests, k_max), got {surv.shape}.")
    r, k_max = surv.shape
    if drafted.shape != (r,) or ((drafted < 0) | (drafted > k_max)).any():
        raise ValueError(f"`drafted` must be {r} counts in 0..{k_max}, got {drafted.tolist()}.")
    if budget < 0:
        raise ValueError(f"`budget` must be >= 0, got {budget}.")
    if (np.diff(surv, axis=1) > 1e-12).any():
        raise ValueError("`surv` must be non-increasing along each request's positions (a survival curve).")
    surv = np.minimum.accumulate(surv, axis=1)  # rounding must not let a later slot outrank an earlier one
    pos = np.broadcast_to(np.arange(k_max), surv.shape)
    valid = pos < drafted[:, None]
    rows, cols = np.nonzero(valid)
    # Highest survival first; on ties the earlier position, so each request's picks stay a prefix.
    order = np.lexsort((rows, cols, -surv[rows, cols]))[:budget]
    return np.bincount(rows[order], minlength=r)


def expected_accepted(surv: np.ndarray, allotment: np.ndarray) -> float:
    """Expected accepted drafts of an allotment: sum over requests of S_r1 + ... + S_rt_r.

    >>> round(expected_accepted(np.array([[0.9, 0.8, 0.1], [0.5, 0.2, 0.0]]), np.array([2, 1])), 9)
    2.2
    """
    surv = np.asarray(surv, dtype=float)
    taken = np.arange(surv.shape[1]) < np.asarray(allotment)[:, None]
    return float(surv[taken].sum())


def best_budget(surv: np.ndarray, batch: int, base_s: float, price_s: float) -> int:
    """The budget that maximises a step's goodput: n maximising (B + sum of the n largest S) / (t0 + c n).

    Each verified draft costs ``price_s`` (c, the step-time model's seconds per verified
    token) and yields its survival S in expectation; the B requests' own tokens come whatever
    is verified, and ``base_s`` (t0) is the step's time with no draft verified. Sorted by S, the
    ratio rises while the next S exceeds c times the goodput so far and falls after, so the
    first maximum is the optimum; on ties the smaller budget.

    Args:
        surv: S of every slot that may be verified (any shape, any order), each in [0, 1].
        batch: B >= 0, tokens the step emits with no draft verified.
        base_s: t0 > 0.
        price_s: c >= 0; 0 verifies every slot with S > 0.

    >>> best_budget(np.array([0.9, 0.5, 0.05]), 2, 1.0, 0.1)  # 0.05 is below c x goodput
    2
    """
    s = np.sort(np.asarray(surv, dtype=float).ravel())[::-1]
    if base_s <= 0 or price_s < 0 or batch < 0:
        raise ValueError(f"need base_s > 0, price_s >= 0 and batch >= 0, got {base_s}, {price_s}, {batch}.")
    n = np.arange(s.size + 1)
    tokens = batch + np.concatenate(([0.0], np.cumsum(s)))
    return int(np.argmax(tokens / (base_s + price_s * n)))
