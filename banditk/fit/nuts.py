"""Inference by NUTS: several chains, each from its own jittered start, run one after another.

NUTS runs on :func:`banditk.fit.model.potential`, the model's log density written in
plain torch (Pyro's tracing costs more than the model itself; the tests check the two
densities agree), in coordinates whitened by the Laplace approximation: the weights'
scales differ by orders of magnitude and are strongly correlated, which NUTS's own
warmup adaptation of a dense mass matrix needs far more steps to learn. Whitened, one
step size suits every direction and a draw costs a handful of gradients.

Chains run in this process one after another (Pyro's multi-chain mode forks processes,
which is heavy on a shared CPU box); r-hat and the effective sample size are computed
across them with :mod:`pyro.ops.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from banditk.fit.model import ModelInputs, Posterior, from_theta, laplace, potential


@dataclass(frozen=True)
class NutsResult:
    """Posterior draws and per-parameter diagnostics.

    Attributes:
        posterior: the draws of all chains together.
        rhat: split r-hat per parameter (the weights, ``cv``, ``delta``).
        ess: effective sample size over all chains, per parameter.
        divergences: divergent transitions after warmup, over all chains.
        chains, warmup, samples: the run's shape (samples per chain).
        target_accept: the step-size adaptation's target acceptance it ran at.
    """

    posterior: Posterior
    rhat: dict[str, float]
    ess: dict[str, float]
    divergences: int
    chains: int
    warmup: int
    samples: int
    target_accept: float = 0.85


def run_nuts(
    inputs: ModelInputs,
    names: tuple[str, ...],
    *,
    chains: int = 2,
    warmup: int = 400,
    samples: int = 400,
    seed: int = 0,
    progress: bool = True,
    target_accept: float = 0.85,
) -> NutsResult:
    """Sample the posterior with NUTS (dense mass matrix: the weights are correlated).

    Args:
        inputs: the aggregated data.
        names: names of the weights (``inputs.shape.names``), for the diagnostics.
        chains: number of chains (>= 2 for a meaningful r-hat).
        warmup: adaptation steps per chain.
        samples: kept draws per chain.
        seed: seeds each chain's start jitter and sampler (the global torch generator is restored afterwards).
        progress: show Pyro's progress bar (stderr).
        target_accept: the step-size adaptation's target acceptance; higher means smaller
            steps (fewer divergences where the posterior bends, e.g. weights at 0, and slower).
    """
    import torch
    from pyro.infer import MCMC, NUTS
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    fn = potential(inputs)
    mode, chol = laplace(inputs)
    mode_t, chol_t = torch.as_tensor(mode), torch.as_tensor(chol)

    def whitened(params: dict):
        return fn(mode_t + chol_t @ params["e"])

    rng = np.random.default_rng(seed)
    thetas = []
    divergences = 0
    for _ in range(chains):
        # Overdispersed starts, two posterior standard deviations off in every direction:
        # r-hat can only see non-convergence if the chains start apart.
        e0 = torch.as_tensor(rng.normal(0.0, 2.0, size=inputs.dim))
        with torch.random.fork_rng():
            torch.manual_seed(int(rng.integers(2**31)))
            kernel = NUTS(potential_fn=whitened, max_tree_depth=8, target_accept_prob=target_accept)
            mcmc = MCMC(
                kernel,
                num_samples=samples,
                warmup_steps=warmup,
                num_chains=1,
                initial_params={"e": e0},
                disable_progbar=not progress,
            )
            mcmc.run()
        e = mcmc.get_samples()["e"].detach().numpy()
        thetas.append(mode + e @ chol.T)
        div = mcmc.diagnostics().get("divergences", {})
        divergences += sum(len(v) for v in div.values())
    post = from_theta(np.stack(thetas), inputs)
    per_chain = lambda a: a.reshape(chains, samples, *a.shape[1:])  # noqa: E731
    params = {name: per_chain(post.weights[:, j]) for j, name in enumerate(names)}
    params |= {"cv": per_chain(post.cv), "delta": per_chain(post.delta)}
    rhat, ess = {}, {}
    for name, x in params.items():
        xt = torch.as_tensor(x)
        rhat[name] = _finite(float(split_gelman_rubin(xt, chain_dim=0, sample_dim=1)), 1.0)
        ess[name] = _finite(float(effective_sample_size(xt, chain_dim=0, sample_dim=1)), 0.0)
    return NutsResult(post, rhat, ess, int(divergences), chains, warmup, samples, target_accept)


def _finite(v: float, fallback: float) -> float:
    # A parameter that never moved has an undefined r-hat (0/0); it is also not mixing.
    return v if np.isfinite(v) else (np.inf if fallback == 1.0 else fallback)
