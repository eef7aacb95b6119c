"""experiments/decision_timeline.py, and the cold-start flaw its reports showed in the rule before likely-revisits."""

import json
from pathlib import Path

from tests.experiment_scripts import load

RESULTS = Path(__file__).resolve().parents[1] / "results" / "timelines"

timeline = load("decision_timeline")


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


def unmeasured_plausible_at_first_return(report: dict) -> list[int]:
    """The Ks never measured that the draws found plausible when a cold bucket's looks first
    returned to its incumbent: the first looks a leading-K-only rule leaves for later."""
    for e in report["events"]:
        c = e["choice"]
        if c and c["incumbent"] >= 0 and c["k"] == c["incumbent"] and c["hold"] == 0:
            return [k for k, (w, n) in enumerate(zip(c["wins"], c["cell_steps"])) if w >= 0.1 and n == 0]
    raise AssertionError("the run never returned to its incumbent")


def test_a_cold_bucket_looks_at_every_plausible_k_before_it_returns_to_its_incumbent(tmp_path):
    # results/timelines/...-leading-k: the rule before likely-revisits went back to K=7 at step 41
    # with K=1, 2, 4, 5, 6 and 8 unmeasured and plausible; K=2 got its first look at step 1,841.
    before = json.loads((RESULTS / "dflash-laguna-gb10-c24-seed0-leading-k.json").read_text())
    assert unmeasured_plausible_at_first_return(before) == [1, 2, 4, 5, 6, 8]
    out = tmp_path / "t.md"
    timeline.main(["--point", "dflash-laguna-gb10:24", "--seed", "0", "--out", str(out)])
    assert unmeasured_plausible_at_first_return(json.loads(out.with_suffix(".json").read_text())) == []
