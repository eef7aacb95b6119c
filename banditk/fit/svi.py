"""Inference by SVI with a multivariate-normal guide (the weights are correlated).

With many steps the posterior is close to Gaussian in the unconstrained space
(Bernstein-von Mises), which is what ``AutoMultivariateNormal`` assumes, so SVI is both
fast and accurate exactly where NUTS would be slowest to mix.

Convergence: the loss (-ELBO) is averaged over consecutive windows; the fit has
converged when, twice in a row, the mean of the last window differs from the one before
by less than ``rel_tol`` of its magnitude or by less than ``abs_tol`` nats (the ELBO of
a well-fitted prior is near 0 in magnitude for some traces and in the 1e5s for others;
half a nat is a negligible change in any posterior).

The guide lives in the coordinates whitened by the Laplace approximation
(:func:`banditk.fit.model.laplace`), starting from a standard normal: Adam's steps are
then on the scale of the posterior in every direction, and SVI refines the Laplace
approximation (delta's skewed posterior, the weights' non-Gaussian tails near 0).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from banditk.fit.model import ModelInputs, Posterior, as_tensors, from_theta, laplace, step_time_model

#: Default convergence tolerances (see the module docstring).
REL_TOL = 1e-6
ABS_TOL = 0.5


@dataclass(frozen=True)
class SviResult:
    """Posterior draws from the fitted guide and the ELBO trace.

    Attributes:
        posterior: draws from the guide.
        elbo: ELBO per iteration (nats; higher is better).
        converged: whether the windowed relative change fell below the tolerance.
        rel_change: relative change of the windowed mean ELBO at the end.
        abs_change: absolute change (nats) of the windowed mean ELBO at the end.
        window: window length (iterations).
    """

    posterior: Posterior
    elbo: np.ndarray
    converged: bool
    rel_change: float
    abs_change: float
    window: int


def window_change(elbo: np.ndarray, window: int) -> tuple[float, float]:
    """(relative, absolute) change of the mean ELBO between the last two windows; (inf, inf) if too short.

    >>> window_change(np.array([1.0, 1.0, 2.0, 2.0]), 2)
    (0.5, 1.0)
    """
    if elbo.size < 2 * window:
        return float("inf"), float("inf")
    last = float(np.mean(elbo[-window:]))
    prev = float(np.mean(elbo[-2 * window : -window]))
    change = abs(last - prev)
    return change / max(abs(last), 1e-300), change


def run_svi(
    inputs: ModelInputs,
    *,
    max_steps: int = 6000,
    min_steps: int = 600,
    window: int = 200,
    lr: float = 0.02,
    particles: int = 4,
    rel_tol: float = REL_TOL,
    abs_tol: float = ABS_TOL,
    draws: int = 2000,
    seed: int = 0,
    progress: bool = True,
) -> SviResult:
    """Fit an ``AutoMultivariateNormal`` guide, stopping once the ELBO has converged.

    Args:
        inputs: the aggregated data.
        max_steps: most optimisation steps; not converged by then is a failed diagnostic.
        min_steps: fewest steps before convergence is checked.
        window: iterations per window of the convergence check.
        lr: initial Adam learning rate (decays 10x over ``max_steps``).
        particles: ELBO particles per step (fewer: a noisier ELBO trace).
        rel_tol, abs_tol: convergence tolerances (see the module docstring).
        draws: posterior draws taken from the fitted guide.
        seed: seeds the optimisation and the draws (the global torch generator is restored afterwards).
        progress: show a tqdm progress bar on stderr.
    """
    import pyro
    import torch
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoMultivariateNormal
    from pyro.infer.autoguide.initialization import init_to_value
    from pyro.optim import ClippedAdam
    from tqdm import tqdm

    mode, chol = laplace(inputs)
    data = as_tensors(inputs) | {"mode": torch.as_tensor(mode), "chol": torch.as_tensor(chol)}
    elbo: list[float] = []
    rel, change = float("inf"), float("inf")
    converged = False
    passed = 0
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        pyro.clear_param_store()
        guide = AutoMultivariateNormal(
            step_time_model,
            init_loc_fn=init_to_value(values={"e": torch.zeros(inputs.dim, dtype=torch.float64)}),
            init_scale=1.0,
        )
        optim = ClippedAdam({"lr": lr, "lrd": 0.1 ** (1.0 / max_steps), "clip_norm": 10.0})
        svi = SVI(step_time_model, guide, optim, Trace_ELBO(num_particles=particles))
        with tqdm(
            total=max_steps, desc="SVI", unit="step", disable=None if progress else True, leave=False, file=sys.stderr
        ) as bar:
            for i in range(max_steps):
                elbo.append(-float(svi.step(**data)))
                if (i + 1) % window == 0:
                    bar.update(window)
                    rel, change = window_change(np.asarray(elbo), window)
                    bar.set_postfix(elbo=f"{np.mean(elbo[-window:]):.1f}", rel_change=f"{rel:.1e}")
                    passed = passed + 1 if rel < rel_tol or change < abs_tol else 0
                    if i + 1 >= min_steps and passed >= 2:
                        converged = True
                        break
        with torch.no_grad():
            e = np.stack([guide(**data)["e"].numpy() for _ in range(draws)])
        pyro.clear_param_store()
    post = from_theta(mode + e @ chol.T, inputs)
    return SviResult(post, np.asarray(elbo), converged, rel, change, window)
