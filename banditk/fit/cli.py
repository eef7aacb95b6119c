"""``banditk fit``: fit step traces and write a prior file.

Wired into the ``banditk`` command by :func:`add_fit_parser`; nothing here imports
torch or Pyro until a fit runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from banditk.core.buckets import DEFAULT_BUCKET_EDGES, DEFAULT_CONTEXT_EDGES, NO_CONTEXT_EDGES

DESCRIPTION = """\
Fit a Bayesian model of step time and acceptance to step traces (the vLLM adapter's JSONL
telemetry log, or simulator traces in the same format) and write a prior file.

Model: the interpretable latency model t(B,K) = w_fixed + w_verify_token*B*(K+1)
+ w_draft_forward*max(K,1) + w_draft_token*B*max(K,1) with positive weights, plus, where
the trace shows them (chosen by BIC), a per-request term w*B, an MoE-expert term
w*(1 - exp(-n^gamma/s)) and a compute term past the roofline's ridge w*max(0, n - n0),
n = B*(K+1) tokens verified (--no-shape-terms: the four linear features only); noise
proportional to the mean, and a per-(B,K) misfit term; per-position acceptance has
closed-form Beta posteriors. Steps are aggregated per (B, K) first, so large traces fit
in seconds. Inference is NUTS (r-hat, effective sample size) or SVI (ELBO trace).

The posterior predictive check compares observed and predicted mean step time per
(bucket, K). The prior is NOT written when a check fails (r-hat > 1.05, ESS < 100,
divergences > 1%% even after a rerun at a smaller step size, SVI not converged, or
median relative PPC error > --max-ppc-error) unless --force; the command then exits 1 with the reason. Needs the `fit` extra
(pip install 'banditk[fit]').
"""

EPILOG = """\
example:
  banditk fit telemetry.jsonl --hardware gb10 -o priors/mtp-qwen3.6-gb10.json
  banditk prior show priors/mtp-qwen3.6-gb10.json
"""


def _edges(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers like 1,2,4,8, got {text!r}") from None


def add_fit_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``fit`` to the ``banditk`` sub-commands."""
    p = subparsers.add_parser(
        "fit",
        help="fit step traces with Pyro and write a prior file",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("traces", type=Path, nargs="+", help="step-trace JSONL files (rotated parts path.N are read too)")
    p.add_argument("-o", "--output", type=Path, required=True, help="prior file to write (atomically)")
    p.add_argument(
        "--method",
        choices=("auto", "nuts", "svi"),
        default="auto",
        help="inference: NUTS, SVI, or auto = NUTS up to 20,000 steps and SVI above (default auto)",
    )
    p.add_argument(
        "--strength",
        type=float,
        default=200.0,
        help="prior-strength cap: observations per latency cell, acceptance position and regression "
        "(default 200); live data overrule the prior after about this many steps",
    )
    p.add_argument(
        "--bucket-edges",
        type=_edges,
        default=DEFAULT_BUCKET_EDGES,
        metavar="E1,E2,...",
        help="batch-size bucket edges of the cells; must match the governor's "
        f"(default {','.join(map(str, DEFAULT_BUCKET_EDGES))})",
    )
    p.add_argument(
        "--context-edges",
        type=_edges,
        default=NO_CONTEXT_EDGES,
        metavar="0,E2,...",
        help="context bucket edges (tokens per decoding request, from 0) of the cells; must match the "
        "governor's governor_config context_edges (e.g. "
        f"{','.join(map(str, DEFAULT_CONTEXT_EDGES))}). Every step must carry its context (the trace's `ctx`, "
        "which older logs lack). Default: one context bucket",
    )
    p.add_argument("--k-max", type=int, default=None, help="largest K of the prior (default: the trace's k_max)")
    p.add_argument("--hardware", default=None, help="hardware to record (default: the trace header's)")
    p.add_argument(
        "--drafter-class",
        default=None,
        help="refuse traces of any other drafter class (parameters never transfer across classes)",
    )
    p.add_argument("--force", action="store_true", help="write the prior even if it failed its diagnostics")
    p.add_argument(
        "--max-ppc-error",
        type=float,
        default=0.05,
        help="largest accepted median relative error of the posterior predictive check (default 0.05)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fit (default 0)")
    p.add_argument("--chains", type=int, default=2, help="NUTS chains (default 2)")
    p.add_argument("--warmup", type=int, default=400, help="NUTS warmup steps per chain (default 400)")
    p.add_argument("--samples", type=int, default=400, help="NUTS draws kept per chain (default 400)")
    p.add_argument("--svi-steps", type=int, default=6000, help="most SVI steps (default 6000)")
    p.add_argument(
        "--no-shape-terms",
        action="store_true",
        help="fit the four linear features only (no per-request, MoE-expert or compute-knee term)",
    )
    p.add_argument(
        "--report", type=Path, default=None, help="also write the diagnostics, PPC table and ELBO trace here as JSON"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_fit)
    return p


def run_fit(args: argparse.Namespace) -> int:
    """Run ``banditk fit``; 0 when the prior was written, 1 when a check failed (errors raise BanditkError)."""
    from banditk.core.errors import BanditkError
    from banditk.fit.diagnostics import Thresholds
    from banditk.fit.errors import DiagnosticsFailedError, FitInputError

    if not args.max_ppc_error > 0:
        raise FitInputError(f"--max-ppc-error must be a positive fraction, got {args.max_ppc_error}.")
    try:
        import pyro  # noqa: F401
    except ImportError:
        raise BanditkError("banditk fit needs Pyro: pip install 'banditk[fit]'.") from None
    from banditk.fit.fitter import FitOptions, fit, write_prior
    from banditk.fit.ppc import format_table

    try:
        options = FitOptions(
            method=args.method,
            strength=args.strength,
            bucket_edges=args.bucket_edges,
            context_edges=args.context_edges,
            k_max=args.k_max,
            hardware=args.hardware,
            drafter_class=args.drafter_class,
            seed=args.seed,
            chains=args.chains,
            warmup=args.warmup,
            samples=args.samples,
            svi_max_steps=args.svi_steps,
            thresholds=Thresholds(max_ppc_error=args.max_ppc_error),
            shape_terms=not args.no_shape_terms,
            progress=not args.no_progress,
        )
    except FitInputError as e:
        raise FitInputError(f"{e} (check the command-line options)") from None
    result = fit(args.traces, options)
    prior = result.prior
    inputs = prior.provenance["inputs"]
    skipped = sum(i["skipped_lines"] for i in inputs)
    print(
        f"fitted {prior.provenance['steps']} steps ({len(result.ppc.rows)} (bucket, K) cells) of class "
        f"{prior.key.drafter_class} from {', '.join(i['path'] for i in inputs)} with {result.method.upper()} "
        f"in {result.seconds:.1f} s" + (f"; {skipped} malformed lines skipped" if skipped else "")
    )
    mixed = prior.provenance["steps_next_to_a_prompt_chunk"]
    if mixed:
        print(
            f"kept {mixed} steps next to a prompt chunk apart, in cells of their own (time and chunk size per bucket and K)"
        )
    print(_diagnostics_text(result))
    print(format_table(result.ppc))
    if args.report is not None:
        _write_report(args.report, result)
    try:
        write_prior(result, args.output, force=args.force)
    except DiagnosticsFailedError as e:
        print(f"banditk fit: refused: {e}", file=sys.stderr)
        return 1
    if result.failures:
        print(
            f"WARNING: the fit failed its diagnostics; written anyway (--force): {'; '.join(result.failures)}",
            file=sys.stderr,
        )
    print(
        f"wrote {args.output}: class={prior.key.drafter_class} k_max={prior.k_max} hardware={prior.key.hardware or '-'} "
        f"strength_cap={prior.strength_cap:g}"
    )
    return 0


def _diagnostics_text(result) -> str:
    d = result.diagnostics
    shape = result.posterior.shape
    names = shape.names
    w, sd = result.posterior.weights.mean(axis=0), result.posterior.weights.std(axis=0)
    choice = d["latency_shape"]
    lines = [f"latency model: {shape.summary()}"]
    if "rms_rel_error_linear" in choice:
        lines.append(
            f"  (chosen by BIC: rms relative error {100 * choice['rms_rel_error_chosen']:.2f}% against "
            f"{100 * choice['rms_rel_error_linear']:.2f}% with the four linear features alone)"
        )
    lines.append("latency weights (posterior mean +- sd):")
    for j, name in enumerate(names):
        extra = ""
        if d["method"] == "nuts":
            extra = f"  r-hat {d['rhat'][name]:.3f}  ESS {d['ess'][name]:.0f}"
        lines.append(f"  {name:<16} {w[j] * 1e3:10.5f} ms +- {sd[j] * 1e3:.5f}{extra}")
    cv, delta = result.posterior.cv, result.posterior.delta
    for name, x in (("noise cv", cv), ("misfit delta", delta)):
        extra = (
            f"  r-hat {d['rhat'][name.split()[-1]]:.3f}  ESS {d['ess'][name.split()[-1]]:.0f}"
            if d["method"] == "nuts"
            else ""
        )
        lines.append(f"  {name:<16} {x.mean():10.5f}    +- {x.std():.5f}{extra}")
    if d["method"] == "nuts":
        lines.append(
            f"NUTS: {d['chains']} chains x {d['samples_per_chain']} draws ({d['warmup']} warmup), "
            f"{d['divergences']} divergences (target acceptance {d['target_accept']})"
        )
    else:
        e = result.elbo
        marks = [int(i) for i in np.linspace(0, e.size - 1, min(8, e.size))]
        lines.append("SVI ELBO trace: " + "  ".join(f"[{i}] {e[max(0, i - 50) : i + 1].mean():.1f}" for i in marks))
        lines.append(
            f"SVI: {d['steps']} steps, converged={d['converged']} (windowed change {d['abs_change']} nats, "
            f"relative {d['rel_change']})"
        )
    a = result.acceptance
    lines.append(
        "acceptance per position (mean [95% interval]): "
        + "  ".join(f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in zip(a.mean, a.lo, a.hi))
    )
    if d["design_rank"] < len(names):
        lines.append(
            f"note: the traces pin down only {d['design_rank']} of {len(names)} weight combinations "
            "(too few distinct B and K); the rest come from the prior"
        )
    return "\n".join(lines)


def _write_report(path: Path, result) -> None:
    from banditk.io.atomic import atomic_write_text

    doc = {
        "diagnostics": result.diagnostics,
        "failures": result.failures,
        "method": result.method,
        "seconds": round(result.seconds, 3),
        "ppc": [r.__dict__ for r in result.ppc.rows],
        "elbo": None if result.elbo is None else [round(float(v), 3) for v in result.elbo],
        "acceptance": result.acceptance.to_dict(),
        "provenance": result.prior.provenance,
    }
    atomic_write_text(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
