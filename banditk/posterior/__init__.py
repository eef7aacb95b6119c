"""Posterior maths, pure functions over arrays: no state, no policy.

- ``acceptance``: per-position counts and E(K);
- ``nig``: the Normal-Inverse-Gamma update and draw of a mean step time;
- ``latency_model``: the parametric step-time model and its features;
- ``stats``: sufficient statistics, the form priors, snapshots and live data share;
- ``sampling``: fast gamma variates for the per-step draw;
- ``prior_conflict``: how much of a prior's latency evidence to keep against live data.
"""
