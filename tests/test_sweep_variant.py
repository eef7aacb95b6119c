"""experiments/sweep_variant.py: its inputs, and that its fields reach the simulator's bandits."""

import pytest

from banditk.core.errors import BanditkError, ConfigError
from tests.experiment_scripts import load

sweep_variant = load("sweep_variant")


def test_governor_fields_are_checked_by_name():
    assert sweep_variant.governor_fields('{"cell_prior_count": 4}') == {"cell_prior_count": 4}
    with pytest.raises(BanditkError, match="not JSON"):
        sweep_variant.governor_fields("{cell_prior_count: 4}")
    with pytest.raises(BanditkError, match="JSON object"):
        sweep_variant.governor_fields("[4]")
    with pytest.raises(ConfigError, match="cell_prior_countx"):
        sweep_variant.governor_fields('{"cell_prior_countx": 4}')
    with pytest.raises(ConfigError, match="cell_prior_count"):
        sweep_variant.governor_fields('{"cell_prior_count": -1}')


def test_scenarios_by_name_or_path(tmp_path):
    names = [p.stem for p in sweep_variant.scenario_paths(None)]
    assert "49548" in names and "drift" in names
    assert sweep_variant.scenario_paths(["drift"])[0].name == "drift.json"
    with pytest.raises(BanditkError, match="nowhere"):
        sweep_variant.scenario_paths(["nowhere"])


def test_the_fields_and_the_variant_reach_the_protocols_bandits(monkeypatch):
    from banditk.governor import bandit
    from banditk.sim import protocol, run
    from banditk.sim.scenario import load_scenario

    # Both are module globals the script replaces; monkeypatch puts them back after the test.
    monkeypatch.setattr(protocol, "run_policy", protocol.run_policy)
    monkeypatch.setattr(bandit, "GoodputPosterior", bandit.GoodputPosterior)
    built, build = [], run.build_policy
    monkeypatch.setattr(run, "build_policy", lambda *a, **kw: built.append(build(*a, **kw)) or built[-1])
    sweep_variant.with_governor_config({"cell_prior_count": 3.0})
    sweep_variant.cell_strength_variant.install("cell-strength")
    scn = load_scenario(sweep_variant.scenario_paths(["49548"])[0])
    protocol.run_policy(scn, "bandit", seed=0, steps=40, warmup=0)
    protocol.run_policy(scn, "fixed:2", seed=0, steps=40, warmup=0)
    gov = built[0].policy
    assert gov.config.cell_prior_count == 3.0
    assert type(gov.posterior).__name__ == "FittedCountPosterior"
    assert gov.posterior.count_prior == 3.0
    assert built[1].policy.name != "bandit"  # the fields reach bandit policies only, and do not break others


def test_a_comparison_row_has_the_headers_cells():
    import json
    from pathlib import Path

    path = Path(sweep_variant.ROOT) / "results" / "sweep-49548" / "report.json"
    row = sweep_variant.comparison_row("49548", "committed", json.loads(path.read_text()), str(path))
    assert row.count("|") == sweep_variant.HEADER.count("|")
    assert row.startswith("| committed | 49548 |")
