"""The model runner and CUDA-graph mode a governed vLLM server runs in, decided in one place.

Dynamic K changes the verification length from step to step. vLLM's V1 model runner then
drops to PIECEWISE graphs; Model Runner V2 (MRv2) captures one FULL decode ladder per K that
the dynamic table lists, so it keeps full graphs. The plugin (:mod:`banditk.adapter.graph_mode`)
applies this decision to a real vLLM config, and the simulator asks it which mode a governed
policy runs in on a hardware profile, so both say the same thing.

>>> governed_mode(cuda_graphs=True).label
'MRv2 FULL'
>>> governed_mode(cuda_graphs=True, v2_blockers=("speculative method 'suffix'",)).label
'V1 PIECEWISE'
>>> governed_mode(cuda_graphs=False).label
'V1 NONE'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FULL = "FULL"
PIECEWISE = "PIECEWISE"
NO_GRAPHS = "NONE"
GRAPH_MODES = (FULL, PIECEWISE, NO_GRAPHS)


@dataclass(frozen=True)
class ServerMode:
    """Where a server's forwards run: ``runner`` "v2" (MRv2) or "v1", ``cudagraph`` one of
    :data:`GRAPH_MODES` for decode steps, and ``reason``, one sentence for the log."""

    runner: str
    cudagraph: str
    reason: str

    @property
    def label(self) -> str:
        return ("MRv2 " if self.runner == "v2" else "V1 ") + self.cudagraph


def governed_mode(
    *, cuda_graphs: bool, v2_blockers: Sequence[str] = (), user_forced_v1: bool = False, full_graphs: bool = True
) -> ServerMode:
    """The mode of a governed server.

    Args:
        cuda_graphs: the platform captures CUDA (or HIP) graphs; False on CPU.
        v2_blockers: what in the config MRv2 does not support (LoRA with drafts, a speculative
            method it lacks, ...), as vLLM names it; any of them means V1.
        user_forced_v1: the operator set ``VLLM_USE_V2_MODEL_RUNNER=0``.
        full_graphs: the configured cudagraph mode has full graphs (an attention backend
            without full-graph support, or ``cudagraph_mode=PIECEWISE``, makes it False).
    """
    if not cuda_graphs:
        return ServerMode("v1", NO_GRAPHS, "the platform has no CUDA graphs (CPU): every K runs eagerly")
    if user_forced_v1:
        return ServerMode(
            "v1", PIECEWISE, "VLLM_USE_V2_MODEL_RUNNER=0 is set: vLLM's V1 runner drops to PIECEWISE under dynamic K"
        )
    if v2_blockers:
        return ServerMode(
            "v1",
            PIECEWISE,
            f"Model Runner V2 does not support {', '.join(v2_blockers)}: vLLM's V1 runner drops to PIECEWISE "
            "under dynamic K",
        )
    if not full_graphs:
        return ServerMode("v2", PIECEWISE, "the configured cudagraph mode has no full graphs")
    return ServerMode("v2", FULL, "Model Runner V2 keeps full graphs under dynamic K: one decode ladder per K")
