"""experiments/decision_digest.py: the same code gives the same digests, and a moved decision is named."""

import json

from experiment_scripts import load

dd = load("decision_digest")


def test_every_listed_scenario_exists():
    for file, *_ in (*dd.RUNS, *dd.QUICK):
        assert (dd.SCENARIOS / file).is_file(), file


def test_a_run_decides_the_same_twice_and_a_seed_changes_it():
    job = ("mtp-qwen3.6-h200.json", "bandit", 8, 600, 0)
    name, a = dd.run_digest(job)
    assert dd.run_digest(job) == (name, a)
    assert dd.run_digest(("mtp-qwen3.6-h200.json", "bandit", 8, 600, 1))[1] != a


def test_check_names_a_moved_run_and_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dd, "digests", lambda runs, workers: {"r1": "aa", "r2": "bb"})
    stored = tmp_path / "d.json"
    assert dd.main(["--out", str(stored), "--quick"]) == 0
    assert dd.main(["--check", str(stored), "--quick"]) == 0
    stored.write_text(json.dumps({"r1": "aa", "r2": "cc"}))
    assert dd.main(["--check", str(stored), "--quick"]) == 1
    assert "r2: decisions moved" in capsys.readouterr().out
