"""Read-outs of a posterior for people and files: goodput means, P(best), the state line."""

from __future__ import annotations

import numpy as np

from banditk.governor.thompson import MIN_STEP_S
from banditk.posterior.acceptance import expected_tokens
from banditk.posterior.nig import mean_from_variates


def mean_goodput(acc_a: np.ndarray, acc_b: np.ndarray, mean_step_s: np.ndarray, rep_batch: np.ndarray) -> np.ndarray:
    """Posterior-mean goodput (tokens/s) per (bucket, K) at each bucket's representative B.

    Independent Betas: E[prod alpha] = prod E[alpha].

    >>> mean_goodput(np.array([1.0]), np.array([1.0]), np.array([[0.1, 0.1]]), np.array([2.0])).tolist()
    [[20.0, 30.0]]
    """
    tokens = expected_tokens(acc_a / (acc_a + acc_b))
    return rep_batch[:, None] * tokens[None, :] / np.maximum(mean_step_s, MIN_STEP_S)


def prob_best(acc_a, acc_b, mn, kn, an, bn, samples: int, seed: int) -> np.ndarray:
    """Monte-Carlo P(K is best) per (bucket, K), from a generator of its own."""
    rng = np.random.default_rng(seed)
    tokens = expected_tokens(rng.beta(acc_a, acc_b, size=(samples, acc_a.size)))  # (S, K+1)
    shape = (samples,) + mn.shape
    gamma = rng.standard_gamma(np.broadcast_to(an, shape))  # exact: this is a read-out, not the per-step draw
    t = np.maximum(mean_from_variates(mn, kn, bn, gamma, rng.standard_normal(shape)), MIN_STEP_S)
    best = np.argmax(tokens[:, None, :] / t, axis=-1)  # (S, buckets)
    k1 = acc_a.size + 1
    return np.stack([np.bincount(best[:, i], minlength=k1) for i in range(best.shape[1])]) / samples


def state_line(steps, k_counts, acc_a, acc_b, switches, goodput, seen, labels) -> str:
    """One line for a server log: K histogram, acceptance per position, best K per visited cell
    (``labels``: each cell's name, :func:`banditk.core.buckets.cell_label`)."""
    hist = " ".join(f"{k}:{int(c)}" for k, c in enumerate(k_counts) if c)
    acc = " ".join(f"{v:.2f}" for v in acc_a / (acc_a + acc_b))
    best = " ".join(f"{labels[i]}:K={int(np.argmax(goodput[i]))}({goodput[i].max():.1f}tok/s)" for i in seen)
    return f"banditk steps={steps} K[{hist}] accept/pos[{acc}] switches={switches} best[{best}]"
