"""The gate a fit must pass before its prior is written.

Thresholds and why:

- **r-hat <= 1.05** per parameter (split r-hat over >= 2 chains started apart): above it
  the chains disagree, so the draws do not describe one posterior.
- **ESS >= 100** per parameter over all chains: the posterior mean and sd of each weight
  are then known to about 10% of its sd (Monte-Carlo error sd / sqrt(ESS)).
- **divergent transitions <= 1%** of the kept draws: more means NUTS could not explore
  part of the posterior and the draws are biased.
- **SVI converged**: the windowed ELBO stopped moving (see :mod:`banditk.fit.svi`).
- **posterior predictive median relative error <= 5%**: with at least 20 steps a cell's
  observed mean is itself uncertain by cv / sqrt(20), about 1-2% for step-time noise of
  5-10%, so a right model stays well below 5%. Above it the interpretable model is wrong
  for this trace by more than the goodput gap between neighbouring K near the optimum
  (a few percent: at B = 8 in :class:`banditk.tools.synthetic.SyntheticTruth`, K = 1 and 3 are within
  5% of the best K = 2),
  so its estimates for untried cells would rank K wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_RHAT = 1.05
MIN_ESS = 100.0
MAX_DIVERGENT_FRACTION = 0.01


@dataclass(frozen=True)
class Thresholds:
    """Limits of the diagnostics gate (defaults: see the module docstring)."""

    max_rhat: float = MAX_RHAT
    min_ess: float = MIN_ESS
    max_divergent_fraction: float = MAX_DIVERGENT_FRACTION
    max_ppc_error: float = 0.05


def nuts_failures(
    rhat: dict[str, float], ess: dict[str, float], divergences: int, draws: int, th: Thresholds
) -> list[str]:
    """Reasons the NUTS run fails the gate (empty: it passes).

    >>> nuts_failures({"a": 1.2}, {"a": 500.0}, 0, 800, Thresholds())
    ['r-hat of a is 1.200 > 1.05 (chains disagree)']
    """
    out = []
    for name, v in rhat.items():
        if not v <= th.max_rhat:
            out.append(f"r-hat of {name} is {v:.3f} > {th.max_rhat} (chains disagree)")
    for name, v in ess.items():
        if not v >= th.min_ess:
            out.append(f"effective sample size of {name} is {v:.0f} < {th.min_ess:.0f}")
    if divergences > th.max_divergent_fraction * draws:
        out.append(f"{divergences} divergent transitions in {draws} draws (> {th.max_divergent_fraction:.0%})")
    return out


def svi_failures(converged: bool, rel_change: float, abs_change: float, steps: int) -> list[str]:
    """Reasons the SVI run fails the gate (empty: it passes)."""
    if converged:
        return []
    return [
        f"SVI did not converge in {steps} steps: the windowed ELBO still moved by {abs_change:.3g} nats "
        f"(relative {rel_change:.2e})"
    ]


def ppc_failures(median_rel_error: float, th: Thresholds) -> list[str]:
    """Reasons the posterior predictive check fails the gate (empty: it passes)."""
    if median_rel_error <= th.max_ppc_error:
        return []
    return [
        f"posterior predictive check: the median relative error of the cell mean step times is "
        f"{median_rel_error:.1%} > {th.max_ppc_error:.1%}, so the latency model does not describe this trace "
        "(a step in cost the model cannot express, such as cudagraph padding, or mixed hardware)"
    ]
