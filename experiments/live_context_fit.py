"""A prior with context buckets, fitted from real vLLM telemetry (issue 17).

The short- and long-prompt live points (results/live-context-short and -long, real
``vllm serve`` on this machine) log every governed step with its summed context (``ctx``).
This fits their traces together twice, as ``banditk fit`` does: with the governor's context
buckets (0, 2048, 8192 tokens per request) and without. It reports, per context bucket, its
steps and their time over the fitted model (the scale its cells take), the posterior
predictive check of each fit, and the two priors' cells at each batch bucket the traces
reached. Writes results/live-context-fit/report.json and the context prior next to it.

    python experiments/live_context_fit.py [--short DIR] [--long DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.core.buckets import DEFAULT_CONTEXT_EDGES, NO_CONTEXT_EDGES, representative_batch  # noqa: E402
from banditk.fit.errors import FitInputError  # noqa: E402
from banditk.fit.fitter import FitOptions, FitResult, fit, write_prior  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402


def traces(folder: Path) -> list[Path]:
    """The governed runs' telemetry of one live sweep."""
    found = sorted((folder / "runs").glob("*/telemetry.jsonl"))
    if not found:
        raise SystemExit(
            f"no governed telemetry under {folder / 'runs'}: make it with "
            f"`python experiments/regenerate.py --only {folder.name}`."
        )
    return found


def cells(result: FitResult) -> list[dict]:
    """The prior's latency cells the traces reached: mean step time (ms) per K, per cell."""
    p = result.prior
    nc = len(p.context_edges)
    out = []
    for i in range(p.stats.cell_n.shape[0]):
        n = p.stats.cell_n[i]
        if not n.any():
            continue
        b, c = divmod(i, nc)
        means = [round(1e3 * s / w, 3) if w > 0 else None for s, w in zip(p.stats.cell_sum[i], n)]
        out.append(
            {
                "batch_bucket_from": int(p.bucket_edges[b]),
                "representative_batch": round(representative_batch(p.bucket_edges, b), 2),
                "context_from": int(p.context_edges[c]),
                "mean_step_ms_by_k": means,
            }
        )
    return out


def summary(result: FitResult) -> dict:
    prov = result.prior.provenance
    return {
        "method": result.method,
        "diagnostics_passed": result.ok,
        "diagnostics_failures": result.failures,
        "ppc": result.ppc.to_dict(),
        "steps": prov["steps"],
        "context_edges": list(result.prior.context_edges),
        "context_buckets": prov.get("context_buckets"),
        "cells": cells(result),
        "seconds": round(result.seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", type=Path, default=ROOT / "results" / "live-context-short", help="short-prompt sweep")
    ap.add_argument("--long", type=Path, default=ROOT / "results" / "live-context-long", help="long-prompt sweep")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "live-context-fit")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    paths = traces(a.short) + traces(a.long)
    report = {
        "provenance": provenance(),
        "traces": [p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(p) for p in paths],
        "fits": {},
    }
    a.out.mkdir(parents=True, exist_ok=True)
    for name, edges in (("context", DEFAULT_CONTEXT_EDGES), ("pooled", NO_CONTEXT_EDGES)):
        print(f"fitting {len(paths)} traces, context edges {list(edges)}", flush=True)
        try:
            result = fit(paths, FitOptions(context_edges=edges, seed=a.seed, progress=sys.stderr.isatty()))
        except FitInputError as e:
            raise SystemExit(f"live_context_fit: {e}") from None
        report["fits"][name] = summary(result)
        print(json.dumps({k: v for k, v in report["fits"][name].items() if k != "cells"}, indent=1), flush=True)
        if name == "context":
            # Written whatever its checks say, so it can be read; provenance.forced says which.
            write_prior(result, a.out / "prior-context.json", force=True)
    atomic_write_text(a.out / "report.json", json.dumps(report, indent=1) + "\n")
    print(f"wrote {a.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
