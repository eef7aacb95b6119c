"""Per-request verification in real vLLM on CPU: the split pair, where half the requests accept
90% of drafts and half 30% (issue 16).

The live sweep's machinery (experiments/live_sweep.py: servers, vLLM's bench client, switch
counts, the protocol's checks) on the split test pair (banditk/testing/split_pair.py), with the
policy ``bandit-per-request``: the same bandit served with ``"per_request": true`` in its
``governor_config``, next to ``bandit``, no speculation and every fixed K. The
bench client's random prompts end in either half of the vocabulary, so each point serves a mix.

    python experiments/live_per_request.py                     # C = 4, 8, 16 (~25 min)
    python experiments/live_per_request.py --repeats 3         # each point the median of 3 runs
    python experiments/live_per_request.py --quick --out .cache/live-per-request

Every flag of experiments/live_sweep.py is accepted too (``--repeats``, ``--order``, ...).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live_sweep  # noqa: E402

from banditk.evaluation import point_checks, record, summary  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PER_REQUEST = "bandit-per-request"
DEFAULT_POLICIES = f"nospec,fixed:1,fixed:2,fixed:3,bandit,{PER_REQUEST}"
#: Issue 16's live target: per-request throughput at least this times the bandit's at each point.
VS_BANDIT = 1.0
#: The per-request governor's share of drafts verified, from its state line in the server log.
VERIFIED = re.compile(r"verified (\d+)% of drafts, n0=([\d.e+-]+)")


def parse_args(argv=None) -> tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "live-per-request", help="report folder")
    p.add_argument("--concurrency", default="4,8,16", help="concurrency points (default %(default)s)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="policies (default %(default)s)")
    p.add_argument("--agreement", default="0.9,0.3", help="draft agreement on the high and the low half")
    p.add_argument("--quick", action="store_true", help="tiny models and short points: checks the pipeline")
    p.add_argument("--fresh", action="store_true", help="discard finished points and start over")
    own, rest = p.parse_known_args(argv)
    own.agreement = tuple(float(x) for x in own.agreement.split(","))
    if len(own.agreement) != 2:
        p.error(f"--agreement {own.agreement}: give two shares, high,low")
    policies = [x for x in own.policies.split(",") if x]
    served = [x for x in policies if x != PER_REQUEST]
    sweep_argv = ["--out", str(own.out), "--concurrency", own.concurrency, "--policies", ",".join(served or ["bandit"])]
    sweep = live_sweep.parse_args([*sweep_argv, *(["--quick"] if own.quick else []), *rest])
    own.policies = policies
    return own, sweep


def build_split(args) -> tuple[str, str]:
    from banditk.testing.split_pair import build_split_pair
    from banditk.testing.tiny_models import TinyModelSpec

    heads = max(args.hidden // 64, 1)
    pair = build_split_pair(
        args.models,
        agreement=args.split_agreement,
        target=TinyModelSpec(num_layers=args.target_layers, hidden_size=args.hidden, num_heads=heads),
        draft=TinyModelSpec(num_layers=args.draft_layers, hidden_size=args.hidden, num_heads=heads),
    )
    return pair.target, pair.draft


def make_server(policy: str, args, target: str, draft: str):
    """The live sweep's server of ``policy``; the per-request one is its bandit with
    ``"per_request": true``, in a run folder of its own."""
    if policy != PER_REQUEST:
        return live_sweep.make_server(policy, args, target, draft)
    config = {**(args.governor_config or {}), "per_request": True}
    own = argparse.Namespace(**{**vars(args), "out": args.out / "per-request", "governor_config": config})
    return live_sweep.make_server("bandit", own, target, draft)


def verified_share(run_dir: Path) -> dict | None:
    """The last state line's share of drafts verified and n0, from the server's log."""
    log = run_dir / "server.log"
    hits = VERIFIED.findall(log.read_text(errors="replace")) if log.exists() else []
    if not hits:
        return None
    share, n0 = hits[-1]
    return {"verified_share": int(share) / 100, "n0": float(n0)}


def per_request_run_dir(args) -> Path:
    """The per-request server's run folder (:func:`make_server`), also when a resumed run does not start it."""
    return args.out / "per-request" / "runs" / "bandit"


def main(argv=None) -> int:
    own, args = parse_args(argv)
    args.split_agreement = own.agreement
    if own.fresh and args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "points").mkdir(parents=True, exist_ok=True)
    target, draft = build_split(args)
    made_by = provenance()
    args.policies = own.policies  # the sweep's own parser does not know the per-request policy
    points = live_sweep.run_sweep(args, target, draft, server_for=make_server)
    report = build_report(points, args, made_by, per_request_run_dir(args))
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    report["plots"] = live_sweep.plots(points, args.out)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    live_sweep.print_table(report)
    for c, r in report["per_request_vs_bandit"].items():
        print(f"  {c}: {PER_REQUEST} / bandit = {r['throughput']:.3f} throughput, {r['tpot_p99']:.3f} p99 TPOT")
    print(f"wrote {args.out / 'report.json'}")
    return 0


def build_report(points: list[dict], args, made_by: dict, per_request_dir: Path) -> dict:
    """The live sweep's report of ``points``, with the protocol's checks of both bandits and
    issue 16's own: per-request throughput at least 1.0x the bandit's at each point."""
    per_point: dict[str, dict[str, dict]] = {}
    for p in points:
        per_point.setdefault(f"C={p['concurrency']}", {})[p["policy"]] = p
    checks = [
        c
        for s in ("bandit", PER_REQUEST)
        for pt, med in per_point.items()
        if s in med
        for c in point_checks(med, pt, "real", s)
    ]
    ratio = {}
    for pt, med in per_point.items():
        if PER_REQUEST in med and "bandit" in med:
            mine, theirs = med[PER_REQUEST], med["bandit"]
            ratio[pt] = {
                "throughput": mine["throughput_tok_s"] / theirs["throughput_tok_s"],
                "tpot_p99": mine["tpot_p99_s"] / theirs["tpot_p99_s"],
            }
            value, tpot = ratio[pt]["throughput"], ratio[pt]["tpot_p99"]
            note = f"p99 TPOT {tpot:.3f}x the bandit's"
            checks.append(record("throughput_vs_bandit", PER_REQUEST, pt, value, VS_BANDIT, value >= VS_BANDIT, note))
    report = live_sweep.build_report(points, args, made_by)
    report.update(
        protocol="docs/evaluation.md, real-vLLM column; per-request verification (issue 16)",
        checks=checks,
        summary=summary(checks),
        per_request_vs_bandit=ratio,
        per_request_governor=verified_share(per_request_dir),
    )
    report["setup"].update(split_agreement=list(args.split_agreement), pair="banditk/testing/split_pair.py")
    return report


if __name__ == "__main__":
    sys.exit(main())
