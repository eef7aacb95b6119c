"""experiments/decision_timeline.py and the exploration rules of experiments/exploration_variant.py."""

import json

import numpy as np

from banditk.governor import bandit, switching
from tests.experiment_scripts import load

timeline = load("decision_timeline")
variant = load("exploration_variant")


def restore_after_install(monkeypatch):
    """Let monkeypatch undo what exploration_variant.install patches."""
    cls = bandit.BanditGovernor
    for name in ("__init__", "_decode_scores", "_select_chunk_step", "_decide"):
        monkeypatch.setattr(cls, name, getattr(cls, name))
    monkeypatch.setattr(cls, "_front_loaded", False, raising=False)
    monkeypatch.setattr(switching, "choose", switching.choose)


def test_a_timeline_lists_the_run_s_explorations_with_what_the_governor_saw(tmp_path):
    out = tmp_path / "t.md"
    assert timeline.main(["--point", "dflash-laguna-gb10:24", "--seed", "0", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    events = report["events"]
    assert report["decisions"] > 2000 and events[0]["choice"]["incumbent"] == -1
    explorations = [e for e in events if e["choice"] and e["choice"]["hold"] > 0]
    assert explorations, "a cold bucket with 9 Ks explores"
    for e in explorations:  # an exploration leaves the incumbent for a K the draws find plausible
        c = e["choice"]
        assert c["k"] != c["incumbent"] and c["wins"][c["k"]] >= 0.1 and len(c["cell_steps"]) == 9
    assert "| step | K |" in out.read_text()


def test_likely_revisits_explores_a_plausible_unmeasured_k_the_shipped_rule_leaves(monkeypatch):
    # K=0 leads the draws but is measured and may not be revisited; K=2, plausible, never was.
    s = np.array([[3.0, 2.0, 2.5], [3.0, 2.0, 1.0], [3.0, 2.0, 3.0], [1.0, 2.0, 1.0]])
    cells = np.array([40.0, 90.0, 0.0])
    assert switching.choose(s, 1, cells, 32, 0.9, False) == (1, 0.0)
    restore_after_install(monkeypatch)
    variant.install(rule="likely-revisits")
    assert switching.choose(s, 1, cells, 32, 0.9, False) == (2, 32.0)


def test_likely_revisits_fewer_changes_on_the_cold_dflash_bucket(monkeypatch, tmp_path):
    # results/timelines: the shipped rule's dflash C=24 run trickles first looks over 2,200 steps.
    def changes(path):
        return sum(1 for e in json.loads(path.with_suffix(".json").read_text())["events"] if e["step"] > 200)

    shipped = tmp_path / "shipped.md"
    timeline.main(["--point", "dflash-laguna-gb10:24", "--out", str(shipped)])
    restore_after_install(monkeypatch)
    variant.install(rule="likely-revisits")
    likely = tmp_path / "likely.md"
    timeline.main(["--point", "dflash-laguna-gb10:24", "--out", str(likely)])
    assert changes(likely) < changes(shipped), (changes(likely), changes(shipped))
