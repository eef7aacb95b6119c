"""The bandit governor: Thompson sampling over K, one rule per module.

- ``bandit``: :class:`BanditGovernor`, the state and the two calls, ``select`` and ``observe``;
- ``thompson``: the posterior draws of E(K) and step times;
- ``scoring``: scores of K for a decode-only step and for a step next to a prompt chunk;
- ``epochs``: how long a sampled K is held;
- ``outliers``: which steps are too slow to credit;
- ``chunk_cells``: the cells of steps next to a prompt chunk;
- ``latency_fit``: the online latency regression behind every cell's prior mean;
- ``prior_weighing``: a prior's cells weighed down where live data contradicts them;
- ``summary``: goodput means, P(best) and the log line;
- ``state``: the snapshot schema of the governor's state, its dump and restore;
- ``snapshot``: snapshot files: write, read back, merge replicas, turn into a prior.

Bucket dwell and hysteresis are :mod:`banditk.core.buckets`; the conjugate formulas are
:mod:`banditk.posterior.nig` and :mod:`banditk.posterior.acceptance`.
"""

from banditk.governor.bandit import BanditGovernor

__all__ = ["BanditGovernor"]
