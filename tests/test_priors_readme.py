"""priors/README.md is what experiments/priors_readme.py makes of the priors and their regret reports."""

from __future__ import annotations

from pathlib import Path

from experiment_scripts import load

ROOT = Path(__file__).resolve().parents[1]
pr = load("priors_readme")


def test_the_page_is_what_the_reports_give():
    assert (ROOT / "priors" / "README.md").read_text() == pr.render(), (
        "priors/README.md is stale: run `python experiments/priors_readme.py`"
    )


def test_the_bar_is_the_protocols_limit_and_flat():
    assert pr.PRIOR_LIMIT == 0.01
    assert pr.verdict({"regret_flat": 0.02, "regret_prior": 0.009}) == "meets it"
    assert pr.verdict({"regret_flat": 0.009, "regret_prior": 0.009}) == "meets it"  # no worse than flat
    worse = pr.verdict({"regret_flat": 0.003, "regret_prior": 0.0035})
    assert worse == "misses it: 0.050 percentage points worse than flat"
    above = pr.verdict({"regret_flat": 0.05, "regret_prior": 0.04, "regret_best_fixed_k_per_phase": 0.0315})
    assert above == "misses it: above 1%; one K per load phase in hindsight: 3.15%"
    assert pr.verdict({}) == "not measured"
