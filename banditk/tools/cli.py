"""The ``banditk`` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from banditk import __version__
from banditk.core.errors import BanditkError


def _prior_parsers(sub: argparse._SubParsersAction) -> None:
    prior = sub.add_parser(
        "prior",
        help="inspect, validate, import and merge prior and snapshot files",
        description="Work with prior files (what a governor starts from) and snapshots (a live governor's state).",
    )
    psub = prior.add_subparsers(dest="prior_cmd", metavar="COMMAND", required=True)

    show = psub.add_parser(
        "show",
        help="per bucket: posterior-mean goodput per K, P(best), best K",
        description="Print a prior's or snapshot's posterior as a table: per batch-size bucket, the "
        "posterior-mean goodput of each K, the probability that K is best, and the best K.",
    )
    show.add_argument("file", type=Path, help="prior or snapshot JSON file")
    show.add_argument(
        "--all", action="store_true", help="also show buckets with no observations (model estimates only)"
    )
    show.add_argument(
        "--samples", type=_positive_samples, default=2000, help="Monte-Carlo samples for P(best) (default 2000)"
    )
    show.set_defaults(func=_cmd_show)

    val = psub.add_parser(
        "validate",
        help="check files; exit 0 when all are valid, 1 otherwise",
        description="Validate prior or snapshot files. Prints OK or the reason per file; exits 0 "
        "when every file is valid and 1 otherwise.",
    )
    val.add_argument("files", type=Path, nargs="+", help="prior or snapshot JSON files")
    val.set_defaults(func=_cmd_validate)

    imp = psub.add_parser(
        "import",
        help="turn a snapshot into a prior for another deployment",
        description="Turn a live governor's snapshot into a prior: its posterior becomes the prior's "
        "pseudo-observations, capped at --strength observations per acceptance position, "
        "latency cell and regression, so the new deployment's live data can overrule it.",
    )
    imp.add_argument("snapshot", type=Path, help="snapshot JSON written by a running governor")
    imp.add_argument("-o", "--output", type=Path, required=True, help="prior file to write (atomically)")
    imp.add_argument(
        "--strength",
        type=float,
        default=None,
        help="prior-strength cap in observations (default: the snapshot's own cap, 200 if flat)",
    )
    imp.add_argument("--hardware", default=None, help="record this hardware name in the prior's drafter key")
    imp.set_defaults(func=_cmd_import)

    merge = psub.add_parser(
        "merge",
        help="merge snapshots of several replicas (or several priors)",
        description="Merge snapshots from several replicas by adding their sufficient statistics "
        "(the prior, config and random state come from the first), or merge priors by "
        "adding their pseudo-observations.",
    )
    merge.add_argument("files", type=Path, nargs="+", help="two or more snapshots, or two or more priors")
    merge.add_argument("-o", "--output", type=Path, required=True, help="file to write (atomically)")
    merge.set_defaults(func=_cmd_merge)


def _governor_for(path: Path):
    from banditk.core.config import GovernorConfig
    from banditk.governor import BanditGovernor
    from banditk.governor.snapshot import governor_from_snapshot
    from banditk.io.priorfile import SNAPSHOT_SCHEMA, _check_header, prior_from_dict, read_json

    doc = read_json(path)
    if _check_header(doc, str(path)) == SNAPSHOT_SCHEMA:
        return governor_from_snapshot(doc, str(path)), doc
    prior = prior_from_dict(doc, str(path))
    cfg = GovernorConfig(
        drafter_class=prior.key.drafter_class,
        k_max=prior.k_max,
        bucket_edges=prior.bucket_edges,
        context_edges=prior.context_edges,
    )
    return BanditGovernor(cfg, prior), doc


def _cmd_show(args: argparse.Namespace) -> int:
    from banditk.tools.report import posterior_table

    governor, doc = _governor_for(args.file)
    d = doc.get("drafter", {})
    kind = "snapshot" if doc.get("schema") == "banditk/snapshot" else "prior"
    print(
        f"{kind}: {args.file}  class={d.get('class')}  method={d.get('method') or '-'}  "
        f"target={d.get('target_model') or '-'}  hardware={d.get('hardware') or '-'}  "
        f"k_max={doc.get('k_max')}  strength_cap={doc.get('strength_cap')}"
    )
    prov = doc.get("provenance") or {}
    if prov:
        print("provenance: " + ", ".join(f"{k}={v}" for k, v in prov.items() if not isinstance(v, dict)))
    print(posterior_table(governor, all_buckets=args.all, samples=args.samples))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            _governor_for(path)
        except BanditkError as e:
            print(f"INVALID {path}: {e}")
            status = 1
        else:
            print(f"OK {path}")
    return status


def _check_output(path: Path) -> None:
    """An output path must name a file: refuse a directory before any work is done."""
    if path.is_dir():
        raise BanditkError(f"output {str(path)!r} is a directory; give a file name.")


def _positive_samples(text: str) -> int:
    """argparse type for --samples: an integer >= 1 (P(best) of 0 samples is 0/0)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {n}")
    return n


def _cmd_import(args: argparse.Namespace) -> int:
    import dataclasses

    from banditk.governor.snapshot import prior_from_snapshot
    from banditk.io.priorfile import MAX_STRENGTH, read_json, save_prior

    if args.strength is not None and not 0 < args.strength < MAX_STRENGTH:
        raise BanditkError(
            f"--strength must be a number of observations in (0, {MAX_STRENGTH:g}), got {args.strength}."
        )
    _check_output(args.output)
    prior = prior_from_snapshot(read_json(args.snapshot), strength=args.strength, name=str(args.snapshot))
    if args.hardware:
        prior.key = dataclasses.replace(prior.key, hardware=args.hardware)
    save_prior(args.output, prior)
    print(
        f"wrote {args.output}: class={prior.key.drafter_class} k_max={prior.k_max} strength_cap={prior.strength_cap:g} "
        f"from {prior.provenance.get('observations')} observations"
    )
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from banditk.governor.snapshot import merge_documents
    from banditk.io.atomic import atomic_write_text
    from banditk.io.priorfile import dumps, read_json

    _check_output(args.output)
    merged = merge_documents([(str(p), read_json(p)) for p in args.files])
    atomic_write_text(args.output, dumps(merged))
    print(f"wrote {args.output}: merged {len(args.files)} {merged['schema'].split('/')[1]}s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="banditk",
        description="banditk: a load-aware Bayesian speculative-depth governor for vLLM. "
        "Work with priors and snapshots, fit priors from traces, run the demo, run the simulator, "
        "build a tiny model pair to serve.",
    )
    parser.add_argument("--version", action="version", version=f"banditk {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _prior_parsers(sub)
    from banditk.tools.demo import add_demo_parser

    add_demo_parser(sub)
    from banditk.fit.cli import add_fit_parser

    add_fit_parser(sub)
    from banditk.sim.cli import add_sim_parser, add_sweep_parser

    add_sim_parser(sub)
    add_sweep_parser(sub)
    from banditk.tools.serve_example import add_serve_example_parser

    add_serve_example_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BanditkError as e:
        print(f"banditk: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        # A file near the size cap under a tight memory limit (ulimit -v): say so, no traceback.
        print(
            f"banditk: error: out of memory running `banditk {' '.join(argv if argv is not None else sys.argv[1:])}`; "
            "raise the process's memory limit (ulimit -v) or use a smaller file.",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("banditk: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
