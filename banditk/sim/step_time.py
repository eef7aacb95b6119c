"""Expected wall time of one serving step, for every K at once.

step = fixed host overhead + per-request host overhead
     + target forward (decodes verify 1 + K tokens each, plus prefill chunks)
     + drafter cost (see :mod:`banditk.sim.drafter_cost`).

The cudagraph mode of a decode-only step's target forward (and of the drafter's) is the
server's ``graph_mode`` (:mod:`banditk.sim.policies`): FULL for a static-K or no-spec server
and for a governed server on Model Runner V2, PIECEWISE where vLLM's V1 runner serves
dynamic K, NONE on hardware without graphs (costed as FULL: eager dispatch is in
``graph_launch_s`` there). Mixed prefill/decode batches run piecewise in every mode.
Decode-only batches on cudagraph hardware are padded to the next capture size
(:data:`CAPTURE_SIZES`): the padding tokens cost compute (assumed: not extra
MoE experts), a staircase a smooth latency model does not have.
"""

from __future__ import annotations

import numpy as np

from banditk.core.server_mode import FULL, GRAPH_MODES, PIECEWISE
from banditk.sim.drafter_cost import DrafterCost
from banditk.sim.hardware import HardwareProfile
from banditk.sim.models import ModelProfile
from banditk.sim.roofline import combine, distinct_experts, forward_time, launch_overhead

#: vLLM's default cudagraph capture sizes (assumed: 1, 2, 4, then every 8 up to 256, every 16 up to 512).
CAPTURE_SIZES = np.array([1, 2, 4] + list(range(8, 257, 8)) + list(range(272, 513, 16)), dtype=float)


def pad_to_capture(tokens: np.ndarray) -> np.ndarray:
    """Tokens a graph replay computes: the next capture size (unchanged past the largest).

    >>> pad_to_capture(np.array([1.0, 3.0, 9.0, 257.0, 600.0])).tolist()
    [1.0, 4.0, 16.0, 272.0, 600.0]
    """
    t = np.asarray(tokens, dtype=float)
    i = np.searchsorted(CAPTURE_SIZES, t)
    return np.where(i < CAPTURE_SIZES.size, CAPTURE_SIZES[np.minimum(i, CAPTURE_SIZES.size - 1)], t)


class StepCostModel:
    """Step time as a function of the batch, vectorised over K = 0..k_max.

    Args:
        hw: hardware profile.
        model: target model profile.
        drafter_class: the drafter's class (must have a row in ``model``).
        k_max: largest K.
        dynamic: the older spelling of ``graph_mode="PIECEWISE"`` (True) or ``"FULL"``
            (False), used when ``graph_mode`` is not given.
        graph_mode: the server's decode-step graph mode, one of
            :data:`banditk.core.server_mode.GRAPH_MODES`; only PIECEWISE costs more.
    """

    def __init__(
        self,
        hw: HardwareProfile,
        model: ModelProfile,
        drafter_class: str,
        k_max: int,
        dynamic: bool = False,
        *,
        graph_mode: str | None = None,
    ) -> None:
        if graph_mode is None:
            graph_mode = PIECEWISE if dynamic else FULL
        if graph_mode not in GRAPH_MODES:
            raise ValueError(f"`graph_mode`={graph_mode!r} must be one of {', '.join(GRAPH_MODES)}.")
        self.hw = hw
        self.model = model
        self.k_max = int(k_max)
        self.graph_mode = graph_mode
        #: Decode-only speculative steps run piecewise (the only mode that costs per layer).
        self.dynamic = graph_mode == PIECEWISE
        self.ks = np.arange(self.k_max + 1, dtype=float)
        self.drafter = DrafterCost(hw, model, model.drafter(drafter_class))
        m = model
        self._dense_bytes = m.dense_params * m.bytes_per_param + m.lm_head_params * m.lm_head_bytes_per_param
        self._expert_bytes = m.expert_params * m.bytes_per_param
        self._flops_token = 2.0 * m.active_params
        self._flops_logit = 2.0 * m.lm_head_params
        self._cache: dict[tuple, tuple] = {}

    def target_time(self, tokens: np.ndarray, logits: np.ndarray, kv_bytes: float, mode: str) -> np.ndarray:
        """Target forward seconds for ``tokens`` query tokens (array)."""
        m = self.model
        wb = self._dense_bytes
        if m.is_moe:
            wb = wb + self._expert_bytes * distinct_experts(tokens, m.n_experts, m.top_k, m.routing_token_exponent)
        flops = self._flops_token * tokens + self._flops_logit * logits
        return forward_time(
            self.hw, tokens=tokens, weight_bytes=wb, flops=flops, extra_bytes=kv_bytes, n_layers=m.n_layers, mode=mode
        )

    def kv_read_bytes(self, ctx: np.ndarray, n_requests: int) -> float:
        """KV-cache and recurrent-state bytes read for requests with contexts ``ctx``."""
        m = self.model
        b = m.kv_bytes_per_token * float(ctx.sum()) + 2.0 * m.state_bytes_per_request * n_requests
        if m.swa_kv_bytes_per_token:
            b += m.swa_kv_bytes_per_token * float(np.minimum(ctx, m.swa_window).sum())
        return b

    def _parts(self, n_dec: int, n_sched: int, prefill_tokens: int, spec: bool) -> tuple:
        """Everything of a step's time except the KV bytes, cached per batch shape."""
        key = (n_dec, n_sched, prefill_tokens, spec)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        m, hw = self.model, self.hw
        mixed = prefill_tokens > 0
        n_prefill = n_sched - n_dec
        host = hw.step_overhead_s + hw.per_request_overhead_s * n_sched
        if spec:
            mode = "PIECEWISE" if (mixed or self.dynamic) else "FULL"
            tok = n_dec * (1.0 + self.ks) + prefill_tokens
            logits = tok - prefill_tokens + n_prefill
            draft = self.drafter.time(self.ks, n_dec, mode)
        else:
            mode = "PIECEWISE" if mixed else "FULL"
            tok = np.full(self.k_max + 1, float(n_dec + prefill_tokens))
            logits = np.full(self.k_max + 1, float(n_dec + n_prefill))
            draft = np.zeros(self.k_max + 1)
        parts = self._forward_parts(tok, logits, mixed, host + launch_overhead(hw, m.n_layers, mode) + draft)
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[key] = parts
        return parts

    def _forward_parts(self, tok: np.ndarray, logits: np.ndarray, mixed: bool, fixed: np.ndarray) -> tuple:
        """``(memory, compute, fixed)`` seconds of a target forward over ``tok`` query tokens."""
        m, hw = self.model, self.hw
        padded = pad_to_capture(tok) if (hw.cuda_graphs and not mixed) else tok
        wb = self._dense_bytes
        if m.is_moe:
            # Padding tokens cost compute only (assumed: they do not pull in extra experts).
            wb = wb + self._expert_bytes * distinct_experts(tok, m.n_experts, m.top_k, m.routing_token_exponent)
        if padded is not tok:
            logits = logits + (padded - tok)
            tok = padded
        mem = np.broadcast_to(np.asarray(wb, dtype=float) / hw.eff_bw, tok.shape).copy()
        comp = (self._flops_token * tok + self._flops_logit * logits) / hw.eff_flops
        return mem, comp, fixed

    def times(self, n_dec: int, n_sched: int, prefill_tokens: int, kv_bytes: float, spec: bool = True) -> np.ndarray:
        """Expected step seconds for K = 0..k_max (``spec`` False: speculation disabled, K ignored).

        Args:
            n_dec: decoding requests.
            n_sched: all scheduled requests (decodes + prefill chunks).
            prefill_tokens: prompt tokens computed this step.
            kv_bytes: from :meth:`kv_read_bytes`.
            spec: False for a server without speculative decoding.

        Equal to the target forward (:meth:`target_time`) plus drafter and host
        costs; the batch-shape part is cached, only the KV bytes vary per step.
        """
        mem, comp, fixed = self._parts(n_dec, n_sched, prefill_tokens, bool(spec))
        return combine(mem + kv_bytes / self.hw.eff_bw, comp, self.hw.overlap) + fixed

    def verified_times(
        self, n_dec: int, n_sched: int, prefill_tokens: int, kv_bytes: float, k: int, verified: np.ndarray
    ) -> np.ndarray:
        """Expected step seconds when every decoding request drafted ``k`` tokens and ``verified``
        of those drafts (over the batch; an array: several budgets at once) are verified.

        Drafting costs K whatever is verified; the target verifies B + ``verified`` tokens. With
        ``verified`` = B K it equals ``times(...)[k]``.
        """
        m, hw = self.model, self.hw
        mixed = prefill_tokens > 0
        mode = "PIECEWISE" if (mixed or self.dynamic) else "FULL"
        verified = np.asarray(verified, dtype=float)
        tok = n_dec + verified + prefill_tokens
        logits = tok - prefill_tokens + (n_sched - n_dec)
        draft = float(self.drafter.time(self.ks, n_dec, mode)[k])
        host = hw.step_overhead_s + hw.per_request_overhead_s * n_sched
        fixed = np.full(tok.shape, host + launch_overhead(hw, m.n_layers, mode) + draft)
        mem, comp, fixed = self._forward_parts(tok, logits, mixed, fixed)
        return combine(mem + kv_bytes / hw.eff_bw, comp, hw.overlap) + fixed
