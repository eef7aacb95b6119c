"""Model Runner V2's graph manager built without a GPU: its ladders and dispatch, no capture.

``CudaGraphManager.__init__`` asks the pipeline-parallel group and the platform's graph pool;
both are stubbed here, so the candidates it files for a dynamic table can be read and its
``dispatch`` probed on CPU (tests, and ``check_mrv2_shape`` in CI against vLLM 0.32 and 0.33).
"""

from __future__ import annotations

import types
from unittest import mock

#: vLLM's default capture sizes up to 256 (1, 2, 4, then every 8).
DEFAULT_CAPTURE_SIZES = (1, 2, 4, *range(8, 257, 8))


def probe_manager(table, k_max: int, max_num_seqs: int, capture_sizes=DEFAULT_CAPTURE_SIZES):
    """A ``CudaGraphManager`` for FULL_AND_PIECEWISE under the dynamic ``table``, graphs
    marked captured so :meth:`dispatch` answers as on a GPU."""
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu import cudagraph_utils as cu

    spec = types.SimpleNamespace(
        num_speculative_tokens_per_batch_size=table, uses_dynamic_speculative_decoding=lambda: table is not None
    )
    sizes = sorted(capture_sizes)
    config = types.SimpleNamespace(
        speculative_config=spec,
        num_speculative_tokens=k_max,
        compilation_config=types.SimpleNamespace(cudagraph_capture_sizes=sizes, max_cudagraph_capture_size=sizes[-1]),
        scheduler_config=types.SimpleNamespace(max_num_seqs=max_num_seqs),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1, data_parallel_size=1),
        cache_config=types.SimpleNamespace(use_kda_recoverssm=False),
    )
    pp = types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
    platform = types.SimpleNamespace(get_global_graph_pool=lambda: None)
    with (
        mock.patch.object(cu, "get_pp_group", lambda: pp),
        mock.patch.object(cu, "current_platform", platform),
        mock.patch.object(cu, "is_breakable_cudagraph_enabled", lambda: False),
    ):
        manager = cu.CudaGraphManager(config, "cpu", CUDAGraphMode.FULL_AND_PIECEWISE, decode_query_len=1 + k_max)
    manager._graphs_captured = True
    return manager


def decode_query_lens(manager) -> set[int]:
    """Query lengths of the FULL uniform-decode ladders the manager would capture."""
    from banditk.adapter.vllm_compat import full_graph_descs

    return {d.uniform_token_count for d in full_graph_descs(manager) if d.uniform_token_count is not None}


def missed_full_graphs(manager, ks, max_batch: int) -> dict[int, list[int]]:
    """Per K, the uniform decode batch sizes (up to ``max_batch``) that dispatch outside a FULL
    graph although a FULL graph of their ladder with room for them was captured."""
    from banditk.adapter.vllm_compat import full_graph_descs, graph_desc_is_full

    full = full_graph_descs(manager)
    out: dict[int, list[int]] = {}
    for k in ks:
        q = 1 + k
        room = max((d.num_tokens for d in full if d.uniform_token_count == q), default=0)
        for b in range(1, max_batch + 1):
            if b * q > room:
                break
            d = manager.dispatch(b, b * q, q, 0, max_query_len=q)
            if not (graph_desc_is_full(d) and d.uniform_token_count == q):
                out.setdefault(k, []).append(b)
    return out
