"""Roofline time of one forward pass.

A forward that processes ``tokens`` tokens reads its weights once (for MoE,
the dense part plus every distinct routed expert any token touched), reads the
KV cache and recurrent state of the batch, and does ``2 x active params`` FLOPs
per token. Its time is the larger of bytes / bandwidth and FLOPs / peak (or
their sum on hardware that does not overlap them, ``overlap`` = 0), plus launch
overhead set by the cudagraph mode.
"""

from __future__ import annotations

import numpy as np

from banditk.sim.hardware import HardwareProfile

#: cudagraph modes: FULL replays one graph per forward; PIECEWISE breaks the
#: graph at every layer's attention (vLLM's dynamic-K mode forces it, and
#: mixed prefill/decode batches use it).
CUDAGRAPH_MODES = ("FULL", "PIECEWISE")


def distinct_experts(tokens: np.ndarray | float, n_experts: int, top_k: int, exponent: float = 1.0) -> np.ndarray:
    """Expected distinct experts per MoE layer touched by ``tokens`` tokens.

    Each of ``tokens ** exponent`` independent draws picks ``top_k`` of
    ``n_experts`` uniformly: E x (1 - (1 - k/E)^n).

    >>> round(float(distinct_experts(1, 256, 8)), 6)
    8.0
    >>> round(float(distinct_experts(3, 256, 8)), 2)
    23.26
    """
    t = np.asarray(tokens, dtype=float)
    n = np.where(t > 0, np.maximum(t, 1e-12) ** exponent, 0.0)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** n)


def combine(mem_s: np.ndarray, comp_s: np.ndarray, overlap: float) -> np.ndarray:
    """Time of a kernel stream that moves ``mem_s`` and computes ``comp_s`` seconds.

    >>> float(combine(2.0, 1.0, 1.0)), float(combine(2.0, 1.0, 0.0))
    (2.0, 3.0)
    """
    mem = np.asarray(mem_s, dtype=float)
    comp = np.asarray(comp_s, dtype=float)
    return np.maximum(mem, comp) + (1.0 - overlap) * np.minimum(mem, comp)


def launch_overhead(hw: HardwareProfile, n_layers: int, mode: str) -> float:
    """Launch cost of one forward of ``n_layers`` layers in cudagraph ``mode``.

    >>> from banditk.sim.hardware import get_hardware
    >>> round(launch_overhead(get_hardware("gb10"), 48, "PIECEWISE") * 1e3, 3)
    7.23
    """
    sync = n_layers * hw.per_layer_s
    if mode == "FULL":
        return hw.graph_launch_s + sync
    return hw.graph_launch_s + sync + n_layers * hw.piecewise_launch_s


def forward_time(
    hw: HardwareProfile,
    *,
    tokens: np.ndarray | float,
    weight_bytes: np.ndarray | float,
    flops: np.ndarray | float,
    extra_bytes: float = 0.0,
    n_layers: int,
    mode: str,
) -> np.ndarray:
    """Seconds for one forward moving ``weight_bytes + extra_bytes`` and doing ``flops``.

    Zero where ``tokens`` is zero (no forward runs).
    """
    mem = (np.asarray(weight_bytes, dtype=float) + extra_bytes) / hw.eff_bw
    comp = np.asarray(flops, dtype=float) / hw.eff_flops
    t = combine(mem, comp, hw.overlap) + launch_overhead(hw, n_layers, mode)
    return np.where(np.asarray(tokens) > 0, t, 0.0)
