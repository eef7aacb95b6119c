"""How noisy a real engine's step clock is, measured from its telemetry log.

Each decode-only step is compared with the median of its shape (B, K): the log ratio is the
clock's noise. Three numbers describe it, in the simulator's terms
(:mod:`banditk.sim.scenario`: ``noise_cv``, ``noise_ar1``, ``noise_spike_p``,
``noise_spike_mean``):

- ``cv``: the robust spread (1.4826 MAD) of the log ratio;
- ``ar1``: the lag-1 correlation of the log ratio between consecutive logged steps, over
  pairs that are both inside the body (stalls excluded): a clock whose speed drifts;
- ``spike_p`` and ``spike_mean``: the share of steps slower than the shape's median by more
  than ``SPIKE_SIGMAS`` robust spreads, and their mean extra time over the median.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

#: A step this many robust spreads slower than its shape's median is a stall, not noise.
SPIKE_SIGMAS = 4.0
#: Shapes with fewer steps than this give no median worth comparing with.
MIN_SHAPE_STEPS = 5


def clock_noise(batch, k, step_s, prefill) -> dict:
    """Noise of the step clock from per-step columns in log order (decode-only steps used).

    >>> rng = np.random.default_rng(0)
    >>> t = 0.02 * np.exp(rng.normal(0.0, 0.1, 4000))
    >>> n = clock_noise(np.full(4000, 4), np.full(4000, 2), t, np.zeros(4000))
    >>> round(n["cv"], 2), abs(n["ar1"]) < 0.05, n["spike_p"] < 0.001
    (0.1, True, True)
    """
    batch, k, t, prefill = (np.asarray(a) for a in (batch, k, step_s, prefill))
    use = (prefill == 0) & (t > 0)
    idx = np.flatnonzero(use)
    by_shape: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in idx:
        by_shape[(int(batch[i]), int(k[i]))].append(int(i))
    dev = np.full(t.size, np.nan)
    for rows in by_shape.values():
        if len(rows) >= MIN_SHAPE_STEPS:
            lt = np.log(t[rows])
            dev[rows] = lt - np.median(lt)
    ok = np.isfinite(dev)
    if ok.sum() < 2 * MIN_SHAPE_STEPS:
        return {"steps": int(ok.sum()), "cv": None, "ar1": None, "spike_p": None, "spike_mean": None}
    cv = float(1.4826 * np.median(np.abs(dev[ok])))
    spike = ok & (dev > SPIKE_SIGMAS * cv)
    body = ok & ~spike
    pairs = body[1:] & body[:-1]
    a, b = dev[:-1][pairs], dev[1:][pairs]
    ar1 = float(np.corrcoef(a, b)[0, 1]) if a.size > 2 and a.std() > 0 and b.std() > 0 else 0.0
    return {
        "steps": int(ok.sum()),
        "cv": cv,
        "ar1": ar1,
        "spike_p": float(spike.sum() / ok.sum()),
        "spike_mean": float(np.mean(np.exp(dev[spike]) - 1.0)) if spike.any() else 0.0,
    }
