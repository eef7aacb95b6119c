"""Every number docs/ takes from a report is a quote of it, and each quote is the report's value.

docs/results.md and priors/README.md are generated whole from their reports (readme_results.py,
priors_readme.py); the other pages quote numbers inline (experiments/docs_quotes.py).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from banditk.evaluation import THRESHOLDS

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


dq = _load("docs_quotes")

#: A measured ratio, share or speed: a decimal number written with x, % or tok/s.
MEASURED = re.compile(r"(?<![\w.])\d+\.\d+ ?(?:x|%|tok/s)(?!\w)")
#: A line that states a target (the protocol's thresholds, an issue's), not a measurement.
TARGET = re.compile(r">=|<=|\bat least\b|\bat most\b")
GENERATED = ("docs/results.md", "priors/README.md")


def test_every_quote_in_docs_is_its_reports_value():
    problems = dq.stale()
    assert not problems, "Run `python experiments/docs_quotes.py` (after remaking the reports):\n" + "\n".join(problems)


def test_every_measured_number_in_docs_is_a_quote():
    loose = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        rel = page.relative_to(ROOT).as_posix()
        if rel in GENERATED:
            continue
        for i, line in enumerate(page.read_text().splitlines(), 1):
            bare = dq.QUOTE.sub("", line)
            if TARGET.search(bare):
                continue
            loose += [f"{rel}:{i}: {m}" for m in MEASURED.findall(bare)]
    assert not loose, (
        "Numbers measured by a report belong in a quote (experiments/docs_quotes.py), so that they follow "
        "the report; a target belongs on a line that says so (>=, at least):\n" + "\n".join(loose)
    )


def test_protocol_thresholds_in_docs_are_the_codes():
    """docs/evaluation.md's threshold table states THRESHOLDS, the ones the checks apply."""
    text = (ROOT / "docs" / "evaluation.md").read_text()
    for column in ("simulator", "real"):
        for name in ("throughput_vs_nospec", "throughput_vs_best_fixed", "throughput_vs_peer_each_point"):
            assert f"{THRESHOLDS[column][name]:.2f}x" in text, (column, name)


REPORT = {
    "points": [
        {"report": "live", "concurrency": 1, "contrast_ratio": 0.9137},
        {"report": "live", "concurrency": 8, "contrast_ratio": 0.96},
        {"report": "other", "concurrency": 1, "contrast_ratio": 0.5},
    ],
    "regret": {"bandit": {"final": {"median": 0.0123}}},
    "best": "fixed:2",
}


def test_select_by_key_index_and_match():
    assert dq.select(REPORT, "points/[report=live,concurrency=1]/contrast_ratio") == 0.9137
    assert dq.select(REPORT, "points/-1/report") == "other"
    assert dq.select(REPORT, "regret/bandit/final/median") == 0.0123
    assert dq.select({"results": {"phases/c8": {"r": 1.01}}}, "results/phases~1c8/r") == 1.01


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("points/[concurrency=1]/contrast_ratio", "matches 2 elements, not one"),
        ("points/[concurrency=4]", "matches 0 elements, not one"),
        ("points/3", "is not an index of a list of 3"),
        ("regret/ucb", "no key `ucb`"),
        ("best/x", "goes below a str"),
        ("regret/[a=b]", "selects from a list by key=value, found dict"),
    ],
)
def test_a_path_the_report_lacks_is_named(path, message):
    with pytest.raises(dq.QuoteError, match=re.escape(message)):
        dq.select(REPORT, path, "docs/x.md:3")


def test_render_formats_and_scales():
    assert dq.render(0.9137, ".2f") == "0.91"
    assert dq.render(0.0123, ".2fx100") == "1.23"
    assert dq.render("fixed:2", "s") == "fixed:2"
    with pytest.raises(dq.QuoteError, match="not a number or a string"):
        dq.render([1], ".2f")
    with pytest.raises(dq.QuoteError, match="format spec `d`"):
        dq.render(0.5, "d")


def test_rewrite_then_check_on_a_tree(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "results" / "r").mkdir(parents=True)
    (tmp_path / "results" / "r" / "report.json").write_text(json.dumps(REPORT))
    q = "<!-- quote results/r/report.json points/[report=live,concurrency=1]/contrast_ratio .2f -->"
    r = "<!-- quote results/r/report.json regret/bandit/final/median .1fx100 -->"
    page = tmp_path / "docs" / "a.md"
    page.write_text(f"At C = 1 {q}0.80<!-- /quote -->x,\nregret {r}9<!-- /quote -->%.\n")
    args = ["--root", str(tmp_path)]
    assert dq.main([*args, "--check"]) == 1
    assert "docs/a.md:1: quote of results/r/report.json" in capsys.readouterr().err
    assert dq.main(args) == 0
    assert page.read_text() == f"At C = 1 {q}0.91<!-- /quote -->x,\nregret {r}1.2<!-- /quote -->%.\n"
    assert dq.main([*args, "--check"]) == 0
    page.write_text(page.read_text().replace("results/r/", "results/gone/"))
    assert dq.main(args) == 1
    assert "docs/a.md:1: quote of results/gone/report.json" in capsys.readouterr().err


def test_a_code_quote_reads_a_constant_or_a_dataclass_default():
    from banditk.core.config import GovernorConfig

    assert (
        dq.code_value("banditk.core.config", "GovernorConfig.explore_steps")
        == GovernorConfig(drafter_class="mtp", k_max=3).explore_steps
    )
    assert dq.code_value("banditk.evaluation", "THRESHOLDS.real.throughput_vs_nospec") == 0.97
    with pytest.raises(dq.QuoteError, match="no attribute `nope`"):
        dq.code_value("banditk.core.config", "GovernorConfig.nope")
    with pytest.raises(dq.QuoteError, match="module `banditk.nope` cannot be imported"):
        dq.code_value("banditk.nope", "X")


def test_code_quotes_are_rewritten_from_the_code(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "m.md"
    q = "<!-- code banditk.core.config GovernorConfig.explore_steps d -->"
    page.write_text(f"first looks of {q}7<!-- /code --> steps\n")
    assert dq.main(["--root", str(tmp_path), "--check"]) == 1
    assert dq.main(["--root", str(tmp_path)]) == 0
    from banditk.core.config import GovernorConfig

    steps = GovernorConfig(drafter_class="mtp", k_max=3).explore_steps
    assert f"-->{steps}<!-- /code --> steps" in page.read_text()
