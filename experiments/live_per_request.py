"""Per-request verification in real vLLM on CPU: the split pair, where half the requests accept
90% of drafts and half 30% (issue 16).

The live sweep's machinery (experiments/live_sweep.py: servers, vLLM's bench client, switch
counts, the protocol's checks) on the split test pair (lab/split_pair.py), with the
policy ``bandit-per-request``: the same bandit served with ``"per_request": true`` in its
``governor_config``, next to ``bandit``, no speculation and every fixed K. The
bench client's random prompts end in either half of the vocabulary, so each point serves a mix.

    python experiments/live_per_request.py                     # C = 4, 8, 16 (~25 min)
    python experiments/live_per_request.py --repeats 3         # each point the median of 3 runs
    python experiments/live_per_request.py --quick --out .cache/live-per-request

``bandit-per-request:K`` is the per-request governor with its inner arm set pinned to K
(``"k_set": [K]``): next to ``pinned:K`` (the plugin pinned to K, no cuts) it prices the cuts
alone, apart from the K the inner bandit chooses:

    python experiments/live_per_request.py --concurrency 4,8 --repeats 3 --out results/live-per-request-pinned \\
        --policies pinned:1,pinned:2,bandit,bandit-per-request,bandit-per-request:1,bandit-per-request:2

Every flag of experiments/live_sweep.py is accepted too (``--repeats``, ``--order``, ...).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.evaluation import point_checks, record, summary  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

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
    served = [x for x in policies if not is_per_request(x)]
    sweep_argv = ["--out", str(own.out), "--concurrency", own.concurrency, "--policies", ",".join(served or ["bandit"])]
    sweep = live_sweep.parse_args([*sweep_argv, *(["--quick"] if own.quick else []), *rest])
    for policy in policies:  # a bad K fails here, before any server starts
        k = inner_k(policy) if is_per_request(policy) else None
        if k is not None and k > sweep.k_max:
            raise SystemExit(f"--policies: {policy!r}: K={k} is above --k-max {sweep.k_max}")
    own.policies = policies
    return own, sweep


def build_split(args) -> tuple[str, str]:
    from banditk.testing.tiny_models import TinyModelSpec
    from lab.split_pair import build_split_pair

    heads = max(args.hidden // 64, 1)
    pair = build_split_pair(
        args.models,
        agreement=args.split_agreement,
        target=TinyModelSpec(num_layers=args.target_layers, hidden_size=args.hidden, num_heads=heads),
        draft=TinyModelSpec(num_layers=args.draft_layers, hidden_size=args.hidden, num_heads=heads),
    )
    return pair.target, pair.draft


def is_per_request(policy: str) -> bool:
    return policy == PER_REQUEST or policy.startswith(PER_REQUEST + ":")


def inner_k(policy: str) -> int | None:
    """K of ``bandit-per-request:K`` (the inner arm set pinned to K), None for the free one.

    >>> inner_k("bandit-per-request"), inner_k("bandit-per-request:2")
    (None, 2)
    """
    if policy == PER_REQUEST:
        return None
    k = policy.split(":", 1)[1]
    if not k.isdigit():
        raise SystemExit(f"--policies: {policy!r} needs a K >= 0 after the colon, e.g. {PER_REQUEST}:2")
    return int(k)


def per_request_out(args, policy: str) -> Path:
    """The folder of a per-request policy's server: ``per-request`` or ``per-request-k<K>``."""
    k = inner_k(policy)
    return args.out / ("per-request" if k is None else f"per-request-k{k}")


def make_server(policy: str, args, target: str, draft: str):
    """The live sweep's server of ``policy``; a per-request one is its bandit with
    ``"per_request": true`` (and ``"k_set": [K]`` for ``:K``), in a run folder of its own."""
    if not is_per_request(policy):
        return live_sweep.make_server(policy, args, target, draft)
    config = {**(args.governor_config or {}), "per_request": True}
    k = inner_k(policy)
    if k is not None:
        config["k_set"] = [k]
    own = argparse.Namespace(**{**vars(args), "out": per_request_out(args, policy), "governor_config": config})
    return live_sweep.make_server("bandit", own, target, draft)


def verified_share(run_dir: Path) -> dict | None:
    """The last state line's share of drafts verified and n0, from the server's log."""
    log = run_dir / "server.log"
    hits = VERIFIED.findall(log.read_text(errors="replace")) if log.exists() else []
    if not hits:
        return None
    share, n0 = hits[-1]
    return {"verified_share": int(share) / 100, "n0": float(n0)}


def per_request_run_dir(args, policy: str = PER_REQUEST) -> Path:
    """A per-request server's run folder (:func:`make_server`), also when a resumed run does not start it."""
    return per_request_out(args, policy) / "runs" / "bandit"


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
    pinned = {p: per_request_run_dir(args, p) for p in own.policies if is_per_request(p) and p != PER_REQUEST}
    report = build_report(points, args, made_by, per_request_run_dir(args), pinned)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    report["plots"] = live_sweep.plots(points, args.out)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    live_sweep.print_table(report)
    for c, r in report["per_request_vs_bandit"].items():
        paired = "" if r["throughput_paired"] is None else f" (paired by round: {r['throughput_paired']:.3f})"
        print(f"  {c}: {PER_REQUEST} / bandit = {r['throughput']:.3f} throughput{paired}, {r['tpot_p99']:.3f} p99 TPOT")
    for policy, r in report.get("per_request_pinned", {}).items():
        ratios = ", ".join(
            f"{pt} {v:.3f}"
            + ("" if r["throughput_vs_paired"][pt] is None else f" (paired {r['throughput_vs_paired'][pt]:.3f})")
            for pt, v in r["throughput_vs"].items()
        )
        print(f"  {policy} / {r['vs']}: {ratios or 'no point has both'}; {r['governor']}")
    print(f"wrote {args.out / 'report.json'}")
    return 0


def paired_ratio(mine: dict, theirs: dict) -> float | None:
    """The median over rounds of the throughput ratio within each round, or None for single runs.

    The report's ratio of medians compares runs from different rounds; on this machine, whose
    speed drifts up to 2x over a sweep (docs/decisions.md), the ratio within a round is the
    paired comparison. Informational: the check keeps the protocol's ratio of medians.

    >>> runs = lambda *t: {"runs": [{"throughput_tok_s": x} for x in t]}
    >>> paired_ratio(runs(84.0, 86.0, 140.0), runs(75.0, 95.0, 139.0))  # medians give 86 / 95 = 0.905
    1.007...
    """
    a, b = mine.get("runs"), theirs.get("runs")
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return None
    return statistics.median(x["throughput_tok_s"] / y["throughput_tok_s"] for x, y in zip(a, b, strict=True))


def build_report(points: list[dict], args, made_by: dict, per_request_dir: Path, pinned_dirs=None) -> dict:
    """The live sweep's report of ``points``, with the protocol's checks of both bandits and
    issue 16's own: per-request throughput at least 1.0x the bandit's at each point.

    ``pinned_dirs`` ({``bandit-per-request:K``: run folder}) adds, per such policy, its share
    of drafts verified and its throughput over ``pinned:K``'s at each point: the cuts' own worth
    at one K, informational (no check)."""
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
                "throughput_paired": paired_ratio(mine, theirs),
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
    pinned = {}
    for policy, run_dir in (pinned_dirs or {}).items():
        twin = f"pinned:{inner_k(policy)}"
        pinned[policy] = {
            "governor": verified_share(run_dir),
            "vs": twin,
            "throughput_vs": {
                pt: med[policy]["throughput_tok_s"] / med[twin]["throughput_tok_s"]
                for pt, med in per_point.items()
                if policy in med and twin in med
            },
            "throughput_vs_paired": {
                pt: paired_ratio(med[policy], med[twin])
                for pt, med in per_point.items()
                if policy in med and twin in med
            },
        }
    if pinned:
        report["per_request_pinned"] = pinned
    report["setup"].update(split_agreement=list(args.split_agreement), pair="lab/split_pair.py")
    return report


if __name__ == "__main__":
    sys.exit(main())
