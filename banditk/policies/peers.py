"""Peer policies: other systems' adaptive speculation, written from their public descriptions.

Neither is a port of the peer's code; each follows docs/evaluation.md's description
and its defaults are stated (and marked assumed where the description gives none).

- :class:`SGLangAdaptivePeer` (``peer:sglang``): a moving average of the
  accepted length per batch-size range, with hysteresis over candidate depths.
  It looks only at acceptance, not at step cost.
- :class:`VllmAdaptiveKPeer` (``peer:vllm-adaptive-k``): per-position acceptance
  moving averages over a window of 256 steps; keep the positions whose
  acceptance stays above a threshold (hysteresis 0.05); probe the full K every
  64 steps; never exceed the batch-size table's K.
"""

from __future__ import annotations

import json

import numpy as np

from banditk.core.errors import ConfigError, InvalidContextError
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.policies.static import table_k

#: Batch-size ranges (upper edges) of the SGLang peer's per-range state (assumed).
SGLANG_RANGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 10**9)


def _check_k_max(k_max: object) -> int:
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= 64:
        raise ConfigError(f"`k_max` must be an integer in [1, 64], got {k_max!r}.")
    return k_max


class SGLangAdaptivePeer:
    """SGLang-style adaptive depth: accepted-length EMA with hysteresis, per batch-size range.

    Per range it keeps the current depth and an exponential moving average of
    accepted drafts per request-step. It moves one candidate up when the EMA
    comes within ``up_margin`` of the current depth (drafts nearly all
    accepted) and one candidate down when it falls more than ``down_margin``
    below it, at most once per ``min_dwell`` steps of that range.

    Args:
        k_max: the largest K.
        candidates: candidate depths (default 1..k_max; SGLang never drops to 0).
        ema: smoothing weight of the newest step (assumed 0.05).
        up_margin: assumed 0.4. down_margin: assumed 1.2. min_dwell: assumed 32.

    >>> from banditk.core.types import StepContext, StepOutcome
    >>> p = SGLangAdaptivePeer(k_max=4)
    >>> for _ in range(200):  # every draft accepted: depth climbs to k_max
    ...     d = p.select(StepContext(4, 4, "mtp"))
    ...     p.observe(d, StepOutcome(np.full(4, d.k), np.full(4, d.k), 0.01))
    >>> p.select(StepContext(4, 4, "mtp")).k
    4
    """

    name = "peer:sglang"

    def __init__(
        self,
        *,
        k_max: int,
        candidates: tuple[int, ...] | None = None,
        ema: float = 0.05,
        up_margin: float = 0.4,
        down_margin: float = 1.2,
        min_dwell: int = 32,
    ) -> None:
        self.k_max = _check_k_max(k_max)
        cands = tuple(candidates) if candidates is not None else tuple(range(1, k_max + 1))
        if not cands or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= k_max for c in cands):
            raise ConfigError(f"`candidates` must be integers in [0, k_max={k_max}], got {candidates!r}.")
        if not 0.0 < ema <= 1.0:
            raise ConfigError(f"`ema` must be in (0, 1], got {ema!r}.")
        self.candidates = tuple(sorted(set(cands)))
        self.ema = ema
        self.up_margin = up_margin
        self.down_margin = down_margin
        self.min_dwell = min_dwell
        n = len(SGLANG_RANGES)
        start = len(self.candidates) // 2
        self.idx = np.full(n, start, dtype=int)
        self.avg = np.full(n, float(self.candidates[start]) * 0.5)
        self.dwell = np.zeros(n, dtype=int)
        self.steps = 0

    @staticmethod
    def _range(b: int) -> int:
        for i, hi in enumerate(SGLANG_RANGES):
            if b <= hi:
                return i
        return len(SGLANG_RANGES) - 1

    def select(self, context: StepContext) -> Decision:
        self.steps += 1
        r = self._range(max(context.num_decoding, 1))
        k = min(self.candidates[self.idx[r]], context.k_max)
        return Decision(k=k, bucket=r, num_decoding=context.num_decoding, step_id=self.steps)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        n = outcome.num_requests
        if n == 0 or decision.k == 0:
            return
        r = decision.bucket
        mean_acc = outcome.accepted_total / n
        self.avg[r] += self.ema * (mean_acc - self.avg[r])
        self.dwell[r] += 1
        if self.dwell[r] < self.min_dwell:
            return
        k = self.candidates[self.idx[r]]
        if self.avg[r] >= k - self.up_margin and self.idx[r] + 1 < len(self.candidates):
            self.idx[r] += 1
            self.dwell[r] = 0
        elif self.avg[r] < k - self.down_margin and self.idx[r] > 0:
            self.idx[r] -= 1
            self.dwell[r] = 0


class VllmAdaptiveKPeer:
    """vLLM-style acceptance-adaptive K, capped by the batch-size table.

    Keeps, per draft position i, the accepted and reached counts of the last
    ``window`` steps; the conditional acceptance ``p_i`` is their ratio. The
    chosen K is the longest prefix of positions kept: a kept position is
    dropped when ``p_i < threshold - hysteresis``, a dropped one re-added when
    ``p_i > threshold + hysteresis``. Every ``probe_every`` steps it runs the
    full (capped) K so that dropped positions keep getting observations.

    Args:
        k_max: the largest K.
        table: vLLM batch-size table ``[[lo, hi, K], ...]`` looked up on every
            scheduled request; default: no cap.
        window: 256. probe_every: 64. hysteresis: 0.05.
        threshold: conditional acceptance needed to keep a position (assumed 0.5).

    >>> from banditk.core.types import StepContext, StepOutcome
    >>> p = VllmAdaptiveKPeer(k_max=3)
    >>> for _ in range(300):  # position 1 always accepted, position 2 never
    ...     d = p.select(StepContext(2, 3, "mtp"))
    ...     p.observe(d, StepOutcome(np.full(2, d.k), np.full(2, min(d.k, 1)), 0.01))
    >>> p.select(StepContext(2, 3, "mtp")).k
    1
    """

    name = "peer:vllm-adaptive-k"

    def __init__(
        self,
        *,
        k_max: int,
        table: object = None,
        window: int = 256,
        probe_every: int = 64,
        hysteresis: float = 0.05,
        threshold: float = 0.5,
    ) -> None:
        self.k_max = _check_k_max(k_max)
        if table is None:
            table = [[1, 10**9, k_max]]
        if isinstance(table, str):
            table = json.loads(table)
        try:
            self.table = [(int(lo), int(hi), int(k)) for lo, hi, k in table]
        except (TypeError, ValueError):
            raise ConfigError(f"`table` must be [[lo, hi, K], ...], got {table!r}.") from None
        if window < 1 or probe_every < 1:
            raise ConfigError(f"`window` and `probe_every` must be >= 1, got {window!r} and {probe_every!r}.")
        self.window = window
        self.probe_every = probe_every
        self.hysteresis = hysteresis
        self.threshold = threshold
        self.acc = np.zeros((window, k_max))
        self.reach = np.zeros((window, k_max))
        self.acc_sum = np.zeros(k_max)
        self.reach_sum = np.zeros(k_max)
        self.kept = np.ones(k_max, dtype=bool)
        self.steps = 0
        self._obs = 0

    def cap(self, num_scheduled: int) -> int:
        """The table's K for ``num_scheduled`` requests (vLLM lookup, prefills counted)."""
        return table_k(self.table, num_scheduled, self.k_max)

    def select(self, context: StepContext) -> Decision:
        if context.k_max != self.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but the peer was built for k_max={self.k_max}.")
        self.steps += 1
        cap = self.cap(max(context.num_scheduled, 1))
        if self.steps % self.probe_every == 0:
            k = cap
        else:
            dropped = np.flatnonzero(~self.kept)
            k = int(dropped[0]) if dropped.size else self.k_max
            k = min(k, cap)
        return Decision(k=k, bucket=-1, num_decoding=context.num_decoding, step_id=self.steps)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        if outcome.num_requests == 0:
            return
        succ, fail = outcome.position_counts(self.k_max)
        # A position is reached by the requests that accepted it and those it stopped.
        accepted = np.array(succ, dtype=float)
        reached = accepted + fail
        slot = self._obs % self.window
        self._obs += 1
        self.acc_sum += accepted - self.acc[slot]
        self.reach_sum += reached - self.reach[slot]
        self.acc[slot] = accepted
        self.reach[slot] = reached
        seen = self.reach_sum > 0
        p = np.where(seen, self.acc_sum / np.maximum(self.reach_sum, 1e-12), np.nan)
        drop = seen & self.kept & (p < self.threshold - self.hysteresis)
        add = seen & ~self.kept & (p > self.threshold + self.hysteresis)
        self.kept = (self.kept & ~drop) | add


def make_peer(name: str, *, k_max: int, table: object = None):
    """Build a peer by name: ``sglang`` or ``vllm-adaptive-k``.

    >>> make_peer("sglang", k_max=4).name
    'peer:sglang'
    """
    if name == "sglang":
        return SGLangAdaptivePeer(k_max=k_max)
    if name == "vllm-adaptive-k":
        return VllmAdaptiveKPeer(k_max=k_max, table=table)
    raise ConfigError(f"Unknown peer {name!r}; expected 'sglang' or 'vllm-adaptive-k'.")
