"""Device and host cost of the drafter per step, by drafter class.

Cost shapes:
- ``sequential`` (mtp, mtp-step, eagle, mtp-external, draft_model): the first
  draft forward runs over every verified position (B x (1 + K) tokens) to sync
  the drafter's cache, then K - 1 more forwards of B tokens each.
- ``parallel`` (dflash): one forward over the whole block, B x (1 + K) tokens.
- ``host`` (ngram, suffix): no device forward; a per-request lookup on the host.

K = 0 is not free where vLLM runs the cache-sync forward before returning no
drafts (``llm_base_proposer.py``, ``step3p5.py``): one forward of B tokens for
every device-drafter class. Host drafters do nothing at K = 0. When speculation
is disabled entirely (``nospec``) no drafter cost applies at all.
"""

from __future__ import annotations

import numpy as np

from banditk.sim.hardware import HardwareProfile
from banditk.sim.models import DrafterProfile, ModelProfile
from banditk.sim.roofline import forward_time

COST_SHAPE: dict[str, str] = {
    "mtp": "sequential",
    "mtp-step": "sequential",
    "eagle": "sequential",
    "mtp-external": "sequential",
    "draft_model": "sequential",
    "dflash": "parallel",
    "ngram": "host",
    "suffix": "host",
}

#: Classes whose proposer runs a cache-sync forward when asked for K = 0.
CACHE_SYNC_AT_K0 = frozenset(c for c, s in COST_SHAPE.items() if s != "host")


class DrafterCost:
    """Draft time per step as a function of K (vectorised) and B."""

    def __init__(self, hw: HardwareProfile, model: ModelProfile, drafter: DrafterProfile) -> None:
        self.hw = hw
        self.shape = COST_SHAPE[drafter.drafter_class]
        self.d = drafter
        lm = model.lm_head_params if drafter.shares_lm_head else drafter.own_lm_head_params
        lm_bpp = model.lm_head_bytes_per_param if drafter.shares_lm_head else drafter.bytes_per_param
        self.weight_bytes = drafter.params * drafter.bytes_per_param + lm * lm_bpp
        self.flops_per_token = 2.0 * drafter.params
        self.flops_per_logit = 2.0 * lm

    def _fwd(self, tokens: np.ndarray, logits: np.ndarray, mode: str) -> np.ndarray:
        return forward_time(
            self.hw,
            tokens=tokens,
            weight_bytes=self.weight_bytes,
            flops=self.flops_per_token * tokens + self.flops_per_logit * logits,
            n_layers=self.d.n_layers,
            mode=mode,
        )

    def time(self, ks: np.ndarray, n_dec: int, mode: str) -> np.ndarray:
        """Seconds of drafting for each K in ``ks`` with ``n_dec`` decoding requests.

        >>> from banditk.sim.hardware import get_hardware
        >>> from banditk.sim.models import get_model
        >>> m = get_model("qwen3.5-122b-a10b-int4")
        >>> c = DrafterCost(get_hardware("gb10"), m, m.drafter("ngram"))
        >>> c.time(np.arange(3), 4, "FULL").round(6).tolist()
        [0.0, 6e-05, 6e-05]
        """
        ks = np.asarray(ks, dtype=float)
        if n_dec <= 0:
            return np.zeros_like(ks)
        if self.shape == "host":
            return np.where(ks > 0, n_dec * self.d.cpu_s_per_request, 0.0)
        b = float(n_dec)
        if self.shape == "parallel":
            first = self._fwd(b * (1.0 + ks), b * np.maximum(ks, 1.0), mode)
            return first
        # sequential: sync/first forward over verified positions, then K-1 more.
        first = self._fwd(b * (1.0 + ks), np.full_like(ks, b), mode)
        rest = self._fwd(np.array([b]), np.array([b]), mode)[0] * np.maximum(ks - 1.0, 0.0)
        return first + rest
