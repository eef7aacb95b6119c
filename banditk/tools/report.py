"""Human-readable views of a governor's posterior (used by ``banditk prior show``)."""

from __future__ import annotations

import numpy as np

from banditk.governor import BanditGovernor
from banditk.posterior.latency_model import FEATURES


def posterior_table(governor: BanditGovernor, *, all_buckets: bool = False, samples: int = 2000) -> str:
    """Per bucket: posterior-mean goodput per K with P(best), and the best K."""
    cfg = governor.config
    g = governor.mean_goodput()
    pb = governor.prob_best(samples=samples)
    n = governor.posterior.prior_stats.cell_n + governor.data.cell_n
    a, b = governor.acceptance_params()
    w = governor.latency_weights()
    lines = [
        "acceptance per position (posterior mean): " + " ".join(f"{v:.3f}" for v in a / (a + b)),
        "acceptance evidence per position (obs):    " + " ".join(f"{v:.0f}" for v in a + b - 2),
        "latency model: " + ", ".join(f"{name}={1e3 * v:.4g}ms" for name, v in zip(FEATURES, w)),
        "goodput in tok/s at the bucket's representative B, (P(best)); n = observations in the bucket",
    ]
    header = (
        f"{'bucket':>11} {'B~':>6} {'n':>7} " + " ".join(f"{f'K={k}':>16}" for k in range(cfg.k_max + 1)) + "  best"
    )
    lines.append(header)
    edges, nc = cfg.bucket_edges, cfg.num_context_buckets
    for i in range(cfg.num_buckets):
        if not all_buckets and n[i].sum() == 0:
            continue
        b, c = divmod(i, nc)
        hi = f"{edges[b + 1] - 1}" if b + 1 < len(edges) else "+"
        rng = f"{edges[b]}-{hi}" if hi != str(edges[b]) else f"{edges[b]}"
        if nc > 1:
            rng += f" L>={cfg.context_edges[c]}"
        cells = " ".join(f"{g[i, k]:>9.1f} ({pb[i, k]:.2f})" for k in range(cfg.k_max + 1))
        lines.append(
            f"{rng:>11} {governor.posterior.rep_batch[i]:>6.1f} {n[i].sum():>7.0f} {cells}  K={int(np.argmax(g[i]))}"
        )
    if len(lines) == 5:
        lines.append("(no bucket has observations yet; pass --all to see the model's estimates)")
    return "\n".join(lines)
