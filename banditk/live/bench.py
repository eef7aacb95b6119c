"""Load from vLLM's own client: ``vllm bench serve``'s code, run in a subprocess.

The ``vllm bench serve`` console entry looks up the ``vllm`` distribution, which the
CPU build does not have, so this calls the same module (``vllm.benchmarks.serve``)
directly: same argument parser, same request generator, same metrics.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_MAIN = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


@dataclass(frozen=True)
class Load:
    """One load point: closed-loop concurrency, request count and shape."""

    concurrency: int
    num_prompts: int
    input_len: int = 128
    output_len: int = 64
    seed: int = 0


def run_bench(base_url: str, model: str, load: Load, result_path: Path, log_path: Path, timeout_s: float = 1800) -> dict:
    """Run vLLM's client against ``base_url`` and return its result JSON (plus our derived fields)."""
    result_path.parent.mkdir(parents=True, exist_ok=True)
    args = ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
            "--dataset-name", "random", "--random-input-len", str(load.input_len),
            "--random-output-len", str(load.output_len), "--random-range-ratio", "0",
            "--num-prompts", str(load.num_prompts), "--max-concurrency", str(load.concurrency),
            "--request-rate", "inf", "--seed", str(load.seed), "--ignore-eos", "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
            "--save-result", "--result-dir", str(result_path.parent), "--result-filename", result_path.name,
            "--disable-tqdm"]
    with open(log_path, "w") as log:
        r = subprocess.run([sys.executable, "-c", _MAIN, *args], stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    if r.returncode != 0 or not result_path.exists():
        tail = Path(log_path).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"vLLM's benchmark client failed (exit {r.returncode}):\n{tail}")
    return json.loads(result_path.read_text())


def summarize(result: dict) -> dict:
    """The protocol's metrics from a ``bench serve`` result."""
    return {
        "throughput_tok_s": result["output_throughput"],
        "tpot_p50_s": result["p50_tpot_ms"] / 1e3,
        "tpot_p95_s": result["p95_tpot_ms"] / 1e3,
        "tpot_p99_s": result["p99_tpot_ms"] / 1e3,
        "ttft_p99_s": result["p99_ttft_ms"] / 1e3,
        "completed": result["completed"],
        "duration_s": result["duration"],
    }
