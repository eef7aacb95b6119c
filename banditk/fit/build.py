"""From a posterior to a prior's sufficient statistics.

A latency cell (bucket, K) gets pseudo-observations (n, sum, sum of squares) chosen so
that, in the governor's Normal-Inverse-Gamma cell,

- the mean is the fitted mean step time m (sum = n m);
- the spread is the fitted step-time noise s (sum of squares = n (m^2 + s^2)), s = cv m;
- the weight n says how well m is known: the mean of n steps of noise s is known to
  s / sqrt(n), so n = s^2 / Var(m), capped at the prior strength.

m is the posterior mean of the cell's true mean under the model, held as the governor holds
its cells: at the bucket's representative batch size, carried there from the batch sizes
measured along the governor's four-feature model. It is the parametric prediction, with
uncertainty from the weights' posterior and the model misfit delta, combined with the
cell's own observed mean where the trace has one. Cells are filled
for the buckets the trace visited and the K range it tried (the governor's regression,
seeded with the fitted weights, covers the rest: no extrapolation is written as data).
Acceptance pseudo-counts are the trace's successes and failures, and the cells of steps
next to a prompt chunk (step time and chunk size, outside the latency model) the trace's
own such steps, in the buckets the governor would have put them; the regression
statistics are pseudo-data whose least-squares solution is the four-feature model closest
to the fit (:func:`governor_regression`).
Everything is capped at the strength, as the governor would on load.

With context buckets the cells are per (batch bucket, context bucket). The fitted model
has no context term, so each context bucket's model part is scaled by how much slower or
faster that bucket's steps ran than the model says (:func:`context_scale`), and each
cell's own steps refine it as above.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from banditk.core.buckets import bucket_of, representative_batch
from banditk.fit.data import FitData, StepGroups
from banditk.fit.model import Posterior
from banditk.posterior.latency_model import features_rows
from banditk.posterior.stats import MIXED_FIELDS, SufficientStats


def prior_stats(data: FitData, posterior: Posterior, edges: tuple[int, ...], strength: float) -> SufficientStats:
    """Pseudo-observations for a prior (see the module docstring), in the cells of
    ``data.context_edges``: with context buckets, cell ``b * n_context + c``."""
    g = data.groups
    k_max, nc = data.k_max, len(data.context_edges)
    stats = SufficientStats.zeros(k_max, len(edges) * nc)
    stats.acc_successes[:] = data.acc_successes
    stats.acc_failures[:] = data.acc_failures
    for f in MIXED_FIELDS:
        getattr(stats, f)[...] = getattr(data.mixed, f)
    k_range = range(int(g.k.min()), int(g.k.max()) + 1)
    cv = float(np.mean(posterior.cv))
    delta = float(np.mean(posterior.delta))
    stats.reg_xtx, stats.reg_xty, linear = governor_regression(g, posterior)
    stats.reg_n = float(g.n.sum())

    def fill(groups, context: int, scale: float) -> None:
        """The latency cells of one context bucket, from its step groups."""
        buckets = np.array([bucket_of(edges, int(b)) for b in groups.batch])
        for b in np.unique(buckets):
            in_b = buckets == b
            cell_index = int(b) * nc + context
            # The governor keeps a cell's times at the bucket's representative B, each step's
            # carried there along its four-feature latency model, whose prior weights are
            # `linear`. The prior's cells must be in the same terms: cells at the trace's own B
            # (a bucket's lower edge) read 3-8% fast on Qwen3.6/GB10, and cells carried along
            # the fitted model (which bends where the linear one does not) 2.4% slow at B = 48.
            rep = representative_batch(edges, int(b))
            for k in k_range:
                sel = in_b & (groups.k == k)
                # The batch sizes this cell will see: its own, else the bucket's.
                mix = sel if sel.any() else in_b
                bs, w = groups.batch[mix], groups.n[mix] / groups.n[mix].sum()
                ks = np.full(bs.size, k)
                carry = _linear(linear, np.array([rep]), np.array([k]))[0] / _linear(linear, bs, ks)
                cell = scale * (posterior.predict(bs, ks) @ (w * carry))  # (draws,)
                m = float(cell.mean())
                s2 = (cv * m) ** 2
                var_m = float(cell.var()) + (delta * m) ** 2
                if sel.any():
                    # Combine with the cell's observed mean (precision-weighted), carried alike.
                    n_obs = float(groups.n[sel].sum())
                    obs = float(groups.n[sel] @ (groups.mean[sel] * carry) / n_obs)
                    var_obs = s2 / n_obs
                    m = (m / var_m + obs / var_obs) / (1.0 / var_m + 1.0 / var_obs)
                    var_m = 1.0 / (1.0 / var_m + 1.0 / var_obs)
                n = min(float(strength), s2 / max(var_m, 1e-300))
                stats.cell_n[cell_index, k] = n
                stats.cell_sum[cell_index, k] = n * m
                stats.cell_sumsq[cell_index, k] = n * (m * m + s2)

    if nc == 1:
        fill(g, 0, 1.0)
    # A context bucket the traces never reached keeps empty cells, as an unvisited batch
    # bucket does: the governor's regression covers them.
    for c, (_, gc, scale) in enumerate(context_parts(data, posterior)):
        if len(gc):
            fill(gc, c, scale)
    return stats.capped(float(strength))


def context_parts(data: FitData, posterior: Posterior) -> tuple[tuple[int, StepGroups, float], ...]:
    """Per context bucket: its lower edge, its step groups and its :func:`context_scale`
    (1 where it has no steps); () without context buckets."""
    return tuple(
        (int(edge), g, context_scale(g, posterior) if len(g) else 1.0)
        for edge, g in zip(data.context_edges, data.by_context)
    )


def context_scale(groups, posterior: Posterior) -> float:
    """One context bucket's step time over the fitted model's, over its own steps.

    The fitted model has no context term: it describes the steps of every context
    together. A context bucket whose steps run slower (long contexts read more KV cache)
    has its cells' model part scaled by this ratio, which all its steps measure (not one
    cell's few); the cell's own mean then refines it as usual.
    """
    predicted = posterior.predict(groups.batch, groups.k).mean(axis=0)
    return float(groups.n @ groups.mean / (groups.n @ predicted))


def _linear(weights: np.ndarray, batch: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The four-feature model's step time at paired B and K (positive: its constant is)."""
    return np.maximum(features_rows(batch, k) @ weights, 1e-12)


def governor_regression(groups, posterior: Posterior) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fit as the governor's four-feature regression: ``X^T N X``, ``X^T N mu`` and its weights.

    ``mu`` is the fitted mean step time of each (B, K) group the trace measured and ``N``
    its step count: pseudo-data whose least-squares solution is the closest four-feature
    model to the fit over the trace's own steps. Where the fit has only the four features,
    that is its weights exactly; with optional terms (an MoE or compute-knee term), their
    best linear stand-in, since the online model has no such terms.
    """
    g = groups
    x = features_rows(g.batch, g.k)
    mu = posterior.predict(g.batch, g.k).mean(axis=0)
    xtx = (x * g.n[:, None]).T @ x
    xty = (x * g.n[:, None]).T @ mu
    r = np.sqrt(g.n)
    w, _ = nnls(x * r[:, None], mu * r)
    return xtx, xty, w
