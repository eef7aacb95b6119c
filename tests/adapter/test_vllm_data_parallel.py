"""The OpenAI API server with two data-parallel ranks of a dense model, governed: vLLM runs the
ranks as independent engines, and each rank's governor steers its own K (banditk.adapter.data_parallel)."""

import json
import os

import pytest

from tests.adapter.test_vllm_server import assert_greedy_exact_concurrently

pytestmark = pytest.mark.vllm


def test_two_dense_ranks_each_govern_their_own_k_and_stay_exact(vllm_cpu, tiny_pair, tmp_path):
    from banditk.testing.engines import cpu_env
    from lab.live.server import VllmServer

    spec = {
        "method": "draft_model",
        "model": tiny_pair.draft,
        "num_speculative_tokens": 3,
        "governor": "bandit",
        "governor_config": {
            "snapshot_path": str(tmp_path / "snapshot.json"),
            "snapshot_interval_s": 0,
            "telemetry_log": str(tmp_path / "steps.jsonl"),
        },
    }
    env = cpu_env(in_process=False, cache_root=str(tmp_path / "cache"))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # restore for the rest of this session
    log_path = tmp_path / "server.log"
    server = VllmServer(
        tiny_pair.target,
        log_path,
        spec,
        env=env,
        args=[
            *("--dtype", "float32", "--enforce-eager", "--max-model-len", "512"),
            *("--kv-cache-memory-bytes", str(64 << 20), "--max-num-seqs", "8"),
            *("--data-parallel-size", "2"),
        ],
    )
    prompts = [f"def f{i}(x):" for i in range(8)]
    server.start(timeout_s=420)
    try:
        assert_greedy_exact_concurrently(server.base_url, tiny_pair.target, tiny_pair.next_token, prompts * 2)
    finally:
        server.stop(grace_s=90)
    text = log_path.read_text()
    assert "each rank's governor steers its own K" in text, text[-3000:]
    assert "will observe only" not in text
    played = set()
    for rank in (0, 1):  # each rank decided K itself, into its own log and snapshot
        rows = [json.loads(x) for x in (tmp_path / f"steps.rank{rank}.jsonl").read_text().splitlines()[1:]]
        assert rows and all(0 <= r["k"] <= 3 for r in rows), rank
        assert (tmp_path / f"snapshot.rank{rank}.json").exists(), text[-3000:]
        played |= {r["k"] for r in rows}
    assert played - {3}, played  # K moved off vLLM's static num_speculative_tokens: governed, not observed
    assert not (tmp_path / "snapshot.json").exists()
