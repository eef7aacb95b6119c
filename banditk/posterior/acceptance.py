"""Per-position acceptance: counting and expected tokens.

alpha_i = P(draft i accepted | drafts 1..i-1 accepted). A request that drafted k
tokens and had m accepted contributes successes at positions 1..m and one failure
at position m + 1 when m < k; later positions are unobserved.
"""

from __future__ import annotations

import math

import numpy as np


def position_counts(drafted: np.ndarray, accepted: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Successes and failures per position 1..k_max from per-request counts.

    Returns two integer arrays of length ``k_max``, index 0 being position 1.

    >>> s, f = position_counts(np.array([3, 3, 2]), np.array([3, 1, 0]), 3)
    >>> s.tolist(), f.tolist()
    ([2, 1, 1], [1, 1, 0])
    """
    # One histogram over (m, stopped-short): succ[i-1] = #requests with m >= i (a
    # reverse cumulative count of m); a failure sits at position m + 1 for every
    # request with m < k.
    code = accepted * 2
    code += accepted < drafted
    hist = np.bincount(code, minlength=2 * (k_max + 1))
    per_m = hist[0 : 2 * (k_max + 1) : 2] + hist[1 : 2 * (k_max + 1) : 2]
    succ = per_m[::-1].cumsum()[::-1][1:]
    fail = hist[1 : 2 * k_max : 2]
    return succ, fail


#: Up to this many requests :func:`position_count_lists` counts in Python: below it numpy's
#: per-call cost is more than the loop.
_LOOP_MAX = 32


def position_count_lists(drafted: np.ndarray, accepted: np.ndarray, k_max: int) -> tuple[list[int], list[int]]:
    """:func:`position_counts` as lists of ints, the governor's per-step form.

    >>> position_count_lists(np.array([3, 3, 2]), np.array([3, 1, 0]), 3)
    ([2, 1, 1], [1, 1, 0])
    """
    if drafted.size > _LOOP_MAX:
        succ, fail = position_counts(drafted, accepted, k_max)
        return succ.tolist(), fail.tolist()
    per_m, fail = [0] * (k_max + 1), [0] * (k_max + 1)
    for d, a in zip(drafted.tolist(), accepted.tolist()):
        per_m[a] += 1
        if a < d:
            fail[a] += 1
    succ, above = [0] * k_max, 0
    for i in range(k_max, 0, -1):
        above += per_m[i]
        succ[i - 1] = above
    return succ, fail[:k_max]


def position_count_pairs(pairs: tuple[int, ...], k_max: int) -> tuple[list[int], list[int]]:
    """:func:`position_count_lists` from requests counted per (drafted, accepted) pair: entry
    ``d * w + a`` of ``pairs`` (``w`` its width, at most ``k_max + 1``) counts the requests that
    drafted ``d`` and accepted ``a``. The work is the pairs', not the requests'.

    >>> w = 4; pairs = [0] * w * w
    >>> for d, a in ((3, 3), (3, 1), (2, 0)): pairs[d * w + a] += 1
    >>> position_count_pairs(tuple(pairs), 3)
    ([2, 1, 1], [1, 1, 0])
    """
    w = math.isqrt(len(pairs))
    per_m, fail = [0] * (k_max + 1), [0] * (k_max + 1)
    for d in range(1, w):  # a request that drafted nothing reaches no position
        row = d * w
        for a in range(d + 1):
            n = pairs[row + a]
            if n:
                per_m[a] += n
                if a < d:
                    fail[a] += n
    succ, above = [0] * k_max, 0
    for i in range(k_max, 0, -1):
        above += per_m[i]
        succ[i - 1] = above
    return succ, fail[:k_max]


def expected_tokens(alpha: np.ndarray) -> np.ndarray:
    """E(K) = 1 + sum_{j<=K} prod_{i<=j} alpha_i for K = 0..len(alpha).

    Works on the last axis, so a batch of sampled alpha vectors gives a batch of curves.

    >>> expected_tokens(np.array([0.5, 0.5])).tolist()
    [1.0, 1.5, 1.75]
    """
    reach = np.cumprod(alpha, axis=-1)
    out = np.ones(alpha.shape[:-1] + (alpha.shape[-1] + 1,))
    out[..., 1:] += np.cumsum(reach, axis=-1)
    return out
