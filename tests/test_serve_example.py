"""``banditk serve-example``: builds a tiny local pair and prints a vLLM command banditk accepts."""

import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.request

import pytest

from banditk.adapter.settings import split_speculative_config
from banditk.tools.cli import main


def run(capsys, *argv):
    rc = main(["serve-example", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def server_argv(out: str) -> tuple[dict, list[str]]:
    """The env assignments and argv of the printed server command (its first shell line)."""
    text = out.split("# 2.")[0].split("\n", 1)[1]
    words = shlex.split(text.replace("\\\n", " "))
    n = next(i for i, w in enumerate(words) if not re.match(r"^[A-Z_][A-Z0-9_]*=", w))
    return dict(w.split("=", 1) for w in words[:n]), words[n:]


def option(argv, name):
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("method", ["draft_model", "ngram", "mtp"])
def test_builds_models_and_prints_a_command_banditk_accepts(capsys, tmp_path, method):
    pytest.importorskip("transformers")
    out_dir = tmp_path / "ex"
    rc, out, _ = run(capsys, "--out", str(out_dir), "--method", method, "--port", "8123")
    assert rc == 0
    env, argv = server_argv(out)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert env["OMP_NUM_THREADS"] == "2" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CACHE_ROOT"].startswith(str(out_dir))
    target = option(argv, "--model")
    assert target.startswith(str(out_dir)) and os.path.exists(os.path.join(target, "config.json"))
    assert option(argv, "--dtype") == "float32" and option(argv, "--max-model-len") == "512"
    assert int(option(argv, "--kv-cache-memory-bytes")) == 256 << 20 and "--enforce-eager" in argv
    assert option(argv, "--port") == "8123"
    spec = json.loads(option(argv, "--speculative-config"))
    clean, settings = split_speculative_config(spec)
    resolved = settings.resolve(method=clean["method"], k_max=clean["num_speculative_tokens"])
    assert resolved.governor == "bandit" and resolved.drafter_class_for() == method
    assert resolved.telemetry_log.startswith(str(out_dir)) and resolved.snapshot_path.startswith(str(out_dir))
    if method == "draft_model":
        assert clean["model"].startswith(str(out_dir)) and os.path.exists(os.path.join(clean["model"], "config.json"))
    else:
        assert "model" not in clean
    assert "http://127.0.0.1:8123/v1/completions" in out and '"temperature": 0' in out
    assert "/metrics | grep '^banditk:'" in out
    script = out_dir / "serve.sh"
    assert os.access(script, os.X_OK) and target in script.read_text()


def test_bad_arguments_exit_1_naming_the_value(capsys, tmp_path):
    rc, _, err = run(capsys, "--port", "70000", "--out", str(tmp_path))
    assert rc == 1 and "--port" in err and "70000" in err
    f = tmp_path / "file"
    f.write_text("")
    rc, _, err = run(capsys, "--out", str(f))
    assert rc == 1 and "--out" in err and str(f) in err
    with pytest.raises(SystemExit):
        main(["serve-example", "--method", "eagle"])


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve-example", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for word in ("--out", "--method", "draft_model", "ngram", "mtp", "--port", "cpu extra"):
        assert word in text


@pytest.mark.vllm
def test_the_printed_command_serves_and_shows_banditk_metrics(capsys, tmp_path):
    """A new user's path end to end: run OUT/serve.sh as printed, send the printed request, read /metrics."""
    pytest.importorskip("vllm")
    from lab.live.server import free_port

    port = free_port()
    rc, out, _ = run(capsys, "--out", str(tmp_path / "ex"), "--port", str(port))
    assert rc == 0
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        ["sh", str(tmp_path / "ex" / "serve.sh")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "server did not start"
            try:
                with urllib.request.urlopen(f"{base}/v1/models", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        curl = next(line for line in out.splitlines() if line.startswith("curl") and "/v1/completions" in line)
        r = json.loads(
            subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=120, check=True).stdout
        )
        assert len(r["choices"][0]["text"]) > 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{base}/metrics", timeout=10) as m:
                text = m.read().decode()
            if "banditk:decisions_total" in text:
                break
            time.sleep(1)
        assert "banditk:decisions_total" in text and "banditk:k_chosen_bucket" in text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
