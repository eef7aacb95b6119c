"""Scores of K = 0..K_max for one step; the governor plays the argmax.

Decode-only step: goodput B E(K) / t(K), the current K's score raised by the switching
penalty. Step next to a prompt chunk: the chunk costs every K the same, so whole-step goodput
would make drafts look cheap; each K is scored by its tokens less what its time would have
earned at the bucket's best decode-only rate, B E(K) - G* t_chunk(K), the current K keeping a
``switch_penalty`` share of its tokens as a bonus.
"""

from __future__ import annotations

import numpy as np


def decode_scores(tokens: np.ndarray, t: np.ndarray, prev_k: int, switch_penalty: float) -> np.ndarray:
    """Goodput per K (last axis), with the current K's switching bonus.

    >>> decode_scores(np.array([8.0, 12.0]), np.array([1.0, 1.0]), 0, 0.6).tolist()
    [12.8, 12.0]
    """
    scores = tokens / t
    if prev_k >= 0:
        scores[..., prev_k] *= 1.0 + switch_penalty
    return scores


def chunk_step_scores(tokens: np.ndarray, rate: float, t: np.ndarray, prev_k: int, switch_penalty: float) -> np.ndarray:
    """Tokens less their time's worth at ``rate`` per K, with the current K's switching bonus.

    >>> chunk_step_scores(np.array([8.0, 12.0]), 10.0, np.array([0.5, 0.8]), 0, 0.5).tolist()
    [7.0, 4.0]
    """
    scores = tokens - rate * t
    scores[..., prev_k] += switch_penalty * tokens[..., prev_k]
    return scores


def kv_factor(kv_usage: float, threshold: float, weight: float, k_max: int) -> np.ndarray:
    """Per-K goodput factor near a full cache, for an engine that reserves lookahead per K:
    exp(-weight * K / K_max * excess), excess going 0..1 from ``threshold`` to a full cache.

    >>> kv_factor(1.0, 0.5, 1.0, 2).round(3).tolist()
    [1.0, 0.607, 0.368]
    """
    excess = (kv_usage - threshold) / (1.0 - threshold)
    return np.exp(-weight * excess * np.arange(k_max + 1) / k_max)
