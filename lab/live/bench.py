"""Load from vLLM's own client: ``vllm bench serve``'s code, run in a subprocess.

The ``vllm bench serve`` console entry looks up the ``vllm`` distribution, which the
CPU build does not have, so this calls the same module (``vllm.benchmarks.serve``)
directly: same argument parser, same request generator, same metrics.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The warm-up, then the measured run sized from it, in one process: importing the
# client costs ~10 s here, twice per point otherwise (a sixth of the default sweep).
_WARM_THEN_MEASURE = (
    "import json, math, sys, time\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "spec = json.loads(sys.argv[1])\n"
    "def run(argv):\n"
    "    p = FlexibleArgumentParser()\n"
    "    add_cli_args(p)\n"
    "    main(p.parse_args(argv))\n"
    "run(spec['warmup'])\n"
    "from lab.live.bench import measured_requests\n"
    "with open(spec['warmup_result']) as f:\n"
    "    warm_s = float(json.load(f)['duration'])\n"
    "n = measured_requests(warm_s, spec['warmup_requests'], spec['min_requests'], spec['min_seconds'])\n"
    "argv = spec['measure']\n"
    "argv[argv.index('--num-prompts') + 1] = str(n)\n"
    "t0 = time.time()\n"
    "run(argv)\n"
    "with open(spec['times'], 'w') as f:\n"
    "    json.dump({'t0': t0, 't1': time.time(), 'num_prompts': n}, f)\n"
)


def measured_requests(warm_s: float, warm_requests: int, min_requests: int, min_seconds: float) -> int:
    """Requests to measure: at least ``min_requests``, and enough for ``min_seconds`` at the
    warm-up's pace (``warm_requests`` requests in ``warm_s`` seconds, at the same concurrency).

    >>> measured_requests(10.0, 52, 32, 60.0), measured_requests(10.0, 4, 32, 60.0)
    (312, 32)
    """
    per_request_s = max(warm_s, 1e-3) / max(warm_requests, 1)
    return max(min_requests, math.ceil(min_seconds / per_request_s))


@dataclass(frozen=True)
class Load:
    """One load point: closed-loop concurrency, request count and shape."""

    concurrency: int
    num_prompts: int
    input_len: int = 128
    output_len: int = 64
    seed: int = 0


def _client_args(base_url: str, model: str, load: Load, result_path: Path) -> list[str]:
    return [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(load.input_len),
        "--random-output-len",
        str(load.output_len),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(load.num_prompts),
        "--max-concurrency",
        str(load.concurrency),
        "--request-rate",
        "inf",
        "--seed",
        str(load.seed),
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,95,99",
        "--save-result",
        "--result-dir",
        str(result_path.parent),
        "--result-filename",
        result_path.name,
        "--disable-tqdm",
    ]


def run_warm_then_measure(
    base_url: str,
    model: str,
    warm: Load,
    measure: Load,
    *,
    min_requests: int,
    min_seconds: float,
    run_dir: Path,
    tag: str,
    timeout_s: float = 3600,
) -> tuple[dict, dict]:
    """The warm-up (``warm``: one or more batches of its concurrency), then ``measure`` with at
    least ``min_requests`` requests or ``min_seconds`` of load (sized from the warm-up's pace per
    request), in one client process.

    Returns the measured run's result JSON, and ``{"t0", "t1", "num_prompts"}`` (wall clock of
    the measured run, for matching the governor's telemetry).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    warm_path, result_path = run_dir / f"warmup_{tag}.json", run_dir / f"bench_{tag}.json"
    times_path, log_path = run_dir / f"times_{tag}.json", run_dir / f"bench_{tag}.log"
    spec = {
        "warmup": _client_args(base_url, model, warm, warm_path),
        "warmup_result": str(warm_path),
        "warmup_requests": warm.num_prompts,
        "measure": _client_args(base_url, model, measure, result_path),
        "min_requests": min_requests,
        "min_seconds": min_seconds,
        "times": str(times_path),
    }
    with open(log_path, "w") as log:
        r = subprocess.run(
            [sys.executable, "-c", _WARM_THEN_MEASURE, json.dumps(spec)],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
        )
    if r.returncode != 0 or not result_path.exists() or not times_path.exists():
        tail = Path(log_path).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"vLLM's benchmark client failed (exit {r.returncode}):\n{tail}")
    return json.loads(result_path.read_text()), json.loads(times_path.read_text())


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
