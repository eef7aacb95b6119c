"""Model Runner V2's decode ladders under banditk's dynamic table, before and after the mend.

For each installed vLLM (the CPU environment's, and the GPU wheel's Python fetched by
``tests/vllm_compat/gpu_wheel.py`` when ``--with-gpu-wheel`` is given), builds MRv2's
``CudaGraphManager`` without a GPU (``lab.mrv2``), for the table the plugin
installs and for today's one-row table, and counts the (K, batch size) pairs whose uniform
decode batch dispatches outside a FULL graph of its own ladder: vLLM #56136's shadowing. No
capture, no timing: it reads the dispatch tables.

    python experiments/graph_ladders.py [--out results/graph-ladders] [--with-gpu-wheel]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

K_MAX = 4
MAX_NUM_SEQS = (16, 64, 256)


def measure() -> dict:
    """This interpreter's vLLM: ladders and misses per table and max_num_seqs."""
    from banditk.adapter import graph_mode, vllm_compat
    from lab.mrv2 import decode_query_lens, missed_full_graphs, probe_manager

    ks = list(range(K_MAX + 1))
    rows = []
    for max_num_seqs in MAX_NUM_SEQS:
        for name, table in (
            ("one row [[1, max_num_seqs, K_max]]", [[1, max_num_seqs, K_MAX]]),
            ("banditk: every K", vllm_compat.dynamic_k_table(ks, max_num_seqs)),
        ):
            m = probe_manager(table, K_MAX, max_num_seqs)
            laddered = sorted(q - 1 for q in decode_query_lens(m))
            before = missed_full_graphs(m, laddered, max_num_seqs)
            added = graph_mode.mend_shadowed_ladders(m._candidates, vllm_compat.full_graph_descs(m))
            after = missed_full_graphs(m, laddered, max_num_seqs)
            pairs = sum(1 for k in laddered for b in range(1, max_num_seqs + 1))
            rows.append(
                {
                    "table": name,
                    "max_num_seqs": max_num_seqs,
                    "k_with_full_ladder": laddered,
                    "pairs": pairs,
                    "missed_before_mend": sum(len(v) for v in before.values()),
                    "missed_after_mend": sum(len(v) for v in after.values()),
                    "missed_per_k_before": {str(k): len(v) for k, v in before.items()},
                    "entries_added": added,
                }
            )
    return {"vllm_version": vllm_compat.vllm_version(), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "graph-ladders", help="report folder")
    ap.add_argument("--with-gpu-wheel", action="store_true", help="also measure vLLM 0.33.0's GPU wheel (fetched)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one measurement, printed
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure()))
        return
    from banditk.io.atomic import atomic_write_text
    from banditk.io.provenance import provenance

    runs = [measure()]
    if args.with_gpu_wheel:
        sys.path.insert(0, str(ROOT / "tests" / "vllm_compat"))
        from gpu_wheel import ensure

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ensure("0.33.0")), str(ROOT)])}
        out = subprocess.run(
            [sys.executable, __file__, "--json"], env=env, capture_output=True, text=True, check=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    report = {"provenance": provenance(), "k_max": K_MAX, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1))
    for run in runs:
        for r in run["rows"]:
            print(
                f"vLLM {run['vllm_version']}  max_num_seqs={r['max_num_seqs']:<4} {r['table']:<36} "
                f"ladders K={r['k_with_full_ladder']}  missed {r['missed_before_mend']}/{r['pairs']} -> "
                f"{r['missed_after_mend']} after the mend"
            )
    print(f"graph_ladders: {args.out / 'report.json'}")


if __name__ == "__main__":
    main()
