"""Offline prior fitting (``banditk fit``): a Bayesian fit of step traces, written as a prior file.

The pipeline, one module per step:

- :mod:`~banditk.fit.data`: read traces and aggregate them to sufficient statistics per (B, K);
- :mod:`~banditk.fit.acceptance`: closed-form Beta posteriors of per-position acceptance;
- :mod:`~banditk.fit.model`: the Pyro model of step time (interpretable latency model,
  noise proportional to the mean, a relative model-discrepancy term per (B, K));
- :mod:`~banditk.fit.nuts` / :mod:`~banditk.fit.svi`: inference;
- :mod:`~banditk.fit.diagnostics`: r-hat, ESS, ELBO convergence and the gate on them;
- :mod:`~banditk.fit.ppc`: posterior predictive check per (bucket, K);
- :mod:`~banditk.fit.build`: the prior file's statistics from the posterior;
- :mod:`~banditk.fit.fitter`: the whole fit; :mod:`~banditk.fit.cli`: ``banditk fit``.

This package is an optional extra (``pip install banditk[fit]``): only
:mod:`~banditk.fit.model`, :mod:`~banditk.fit.nuts` and :mod:`~banditk.fit.svi` import
torch and Pyro, and only when a fit runs, so ``import banditk`` and ``banditk --help``
never import torch.
"""
