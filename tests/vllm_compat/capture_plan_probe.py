"""Run under vLLM 0.34's Python (PYTHONPATH): the decode CUDA-graph plan vLLM's own code makes
for the config banditk's plugin produces, next to a static K's. Prints one JSON line.

The platform is made to report CUDA-graph support (nothing is captured: the managers only file
their descriptors) and the config is a tiny Llama's, written here. Usage:
``capture_plan_probe.py MAX_NUM_SEQS K,K,...``.
"""

import json
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import torch
from vllm.platforms import current_platform

from banditk.adapter import vllm_compat
from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY

_PCLS = type(current_platform)
mock.patch.object(_PCLS, "support_static_graph_mode", classmethod(lambda c: True)).start()
mock.patch.object(_PCLS, "is_device_capability_family", classmethod(lambda c, fam, device_id=0: False)).start()

from vllm.config import (  # noqa: E402
    CompilationConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.v1.worker.gpu import cudagraph_utils as cu  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.autoregressive import cudagraph_utils as scu  # noqa: E402

TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def build(model: str, k_max: int, table, max_num_seqs: int, governed: bool) -> VllmConfig:
    mc = ModelConfig(model=model, skip_tokenizer_init=True, max_model_len=2048)
    pc = ParallelConfig()
    sc = None
    if k_max > 0:
        sc = SpeculativeConfig(
            model=model,
            method="draft_model",
            num_speculative_tokens=k_max,
            num_speculative_tokens_per_batch_size=table,
            target_model_config=mc,
            target_parallel_config=pc,
        )
    return VllmConfig(
        device_config=DeviceConfig(device="cuda"),
        model_config=mc,
        parallel_config=pc,
        speculative_config=sc,
        scheduler_config=SchedulerConfig(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=8192, max_model_len=2048, is_encoder_decoder=False
        ),
        compilation_config=CompilationConfig(cudagraph_mode="FULL_AND_PIECEWISE"),
        additional_config={ADDITIONAL_CONFIG_KEY: {}} if governed else {},
    )


def _stubs():
    pp = types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
    plat = types.SimpleNamespace(get_global_graph_pool=lambda: None)
    return [
        mock.patch.object(cu, "get_pp_group", lambda: pp),
        mock.patch.object(cu, "current_platform", plat),
        mock.patch.object(cu, "is_breakable_cudagraph_enabled", lambda *a, **k: False),
    ]


def widest_target_graphs(cfg: VllmConfig) -> dict[int, int]:
    """K -> the widest FULL uniform-decode graph (requests), as the model runner's manager files them."""
    stubs = _stubs()
    for s in stubs:
        s.start()
    try:
        m = cu.CudaGraphManager(
            cfg,
            torch.device("cpu"),
            cfg.compilation_config.cudagraph_mode,
            decode_query_lens=cfg.get_decode_cudagraph_query_lens(cfg.uniform_decode_query_len),
        )
    finally:
        for s in stubs:
            s.stop()
    out: dict[int, int] = {}
    for d in m._capture_descs.get(CUDAGraphMode.FULL, []):
        if d.uniform_token_count is not None:
            k = d.uniform_token_count - 1
            out[k] = max(out.get(k, 0), d.num_reqs)
    return dict(sorted(out.items()))


def widest_draft_decode_graphs(cfg: VllmConfig) -> dict[int, int]:
    """K -> the widest FULL draft-decode graph, as the speculator specialises them per K."""
    stubs = _stubs()
    for s in stubs:
        s.start()
    seen = {}
    try:
        m = scu.SpeculatorCudaGraphManager(
            cfg,
            torch.device("cpu"),
            CUDAGraphMode.FULL_DECODE_ONLY,
            decode_query_lens={1: cfg.scheduler_config.max_num_seqs},
            decode_request_sizes=cfg.get_draft_decode_cudagraph_request_sizes(),
        )

        def record(self, create_forward_fn, progress_bar_desc="", stream=None):
            seen["descs"] = self._capture_descs

        with mock.patch.object(cu.CudaGraphManager, "capture", record):
            m.capture(None, None, None, None, None, None, specialize_spec_tokens=True)
    finally:
        for s in stubs:
            s.stop()
    out: dict[int, int] = {}
    for d in seen["descs"].get(CUDAGraphMode.FULL, []):
        out[d.num_speculative_tokens] = max(out.get(d.num_speculative_tokens, 0), d.num_reqs)
    return dict(sorted(out.items()))


def main() -> None:
    max_num_seqs, ks = int(sys.argv[1]), sorted(int(k) for k in sys.argv[2].split(","))
    installed = vllm_compat.install_full_graphs_for_every_k()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(TINY))
        table = vllm_compat.dynamic_k_table(ks, max_num_seqs)
        governed = build(tmp, max(ks), table, max_num_seqs, governed=True)
        plain = build(tmp, max(ks), table, max_num_seqs, governed=False)  # the same table, not governed
        static = {k: widest_target_graphs(build(tmp, k, None, max_num_seqs, False)).get(k, 0) for k in ks}
        out = {
            "version": vllm_compat.vllm_version(),
            "installed": installed,
            "table": table,
            "static": static,
            "governed": widest_target_graphs(governed),
            "ungoverned_table": widest_target_graphs(plain),
            "governed_plan": governed.get_decode_cudagraph_query_lens(governed.uniform_decode_query_len),
            "ungoverned_plan": plain.get_decode_cudagraph_query_lens(plain.uniform_decode_query_len),
            # draft_model's first draft step runs 2 + K query rows (standalone_ar/speculator.py)
            "governed_draft_prefill_plan": governed.get_decode_cudagraph_query_lens(
                governed.uniform_decode_query_len + 1
            ),
            "governed_draft_decode": widest_draft_decode_graphs(governed),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
