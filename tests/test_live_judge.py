"""A live report's verdicts are judged apart from its measurement (experiments/live_judge.py)."""

from __future__ import annotations

import json

import pytest
from test_results_current import _load, judge_reason, regen

from banditk.evaluation import point_checks

lj = _load("live_judge")

POINTS = [
    {"policy": "nospec", "concurrency": 1, "throughput_tok_s": 100.0, "tpot_p99_s": 0.010},
    {"policy": "fixed:2", "concurrency": 1, "throughput_tok_s": 150.0, "tpot_p99_s": 0.008},
    {"policy": "bandit", "concurrency": 1, "throughput_tok_s": 140.0, "tpot_p99_s": 0.009,
     "oscillations_per_1000": 1.0, "k_switches_per_1000": 2.0},
    {"policy": "nospec", "concurrency": 4, "throughput_tok_s": 300.0, "tpot_p99_s": 0.02},
    {"policy": "bandit+prior", "concurrency": 4, "throughput_tok_s": 280.0, "tpot_p99_s": 0.03,
     "oscillations_per_1000": 7.0},
]  # fmt: skip


def test_verdicts_are_the_protocols_real_column_per_subject_and_point():
    out = lj.verdicts(POINTS)
    at1 = {p["policy"]: p for p in POINTS if p["concurrency"] == 1}
    at4 = {p["policy"]: p for p in POINTS if p["concurrency"] == 4}
    judged = [c for c in out["checks"] if c["status"] != "not_run" or c["value"] is not None]
    protocol = point_checks(at1, "C=1", "real", "bandit") + point_checks(at4, "C=4", "real", "bandit+prior")
    assert judged == [c for c in protocol if c["status"] != "not_run"]  # no runs: no intervals
    failed = {(c["policy"], c["point"], c["check"]) for c in out["checks"] if c["status"] == "fail"}
    assert failed == {
        ("bandit", "C=1", "throughput_vs_best_fixed"),  # 140 / 150 < 0.95
        ("bandit+prior", "C=4", "throughput_vs_nospec"),
        ("bandit+prior", "C=4", "p99_tpot_vs_nospec"),
        ("bandit+prior", "C=4", "oscillations_per_1000_stationary"),
    }
    assert out["summary"]["fail"] == 4 and out["thresholds"]["throughput_vs_best_fixed"] == 0.95


def test_every_comparison_the_sweep_did_not_serve_is_listed_not_run_with_its_reason():
    out = lj.verdicts(POINTS)
    not_run = {(c["policy"], c["point"], c["check"], c["note"]) for c in out["checks"] if c["status"] == "not_run"}
    assert ("bandit", "C=1", "throughput_vs_table", "vLLM's table is not served at this point") in not_run
    assert ("bandit+prior", "C=4", "throughput_vs_best_fixed", "no fixed K is served at this point") in not_run
    for peer in lj.PEERS:
        assert ("bandit", "C=1", "throughput_vs_peer_each_point", f"{peer} is not served by the live sweep") in not_run
        assert (
            "bandit+prior",
            "all",
            "throughput_vs_peer_geomean",
            f"{peer} is not served by the live sweep",
        ) in not_run
    assert not any(c[0] == "bandit+context" for c in not_run)  # not served at all: no subject
    assert out["summary"]["not_run"] == len(not_run) == 2 * (1 + 2 * len(lj.PEERS)) + 1


def runs(*values: float) -> list[dict]:
    return [{"throughput_tok_s": v} for v in values]


def test_a_ratio_gets_its_interval_paired_by_round_and_a_straddling_wide_one_is_undecided():
    def judged(bandit: list[float], fixed: list[float]) -> dict:
        med = {
            "fixed:2": {"throughput_tok_s": sorted(fixed)[1], "runs": runs(*fixed)},
            "bandit": {"throughput_tok_s": sorted(bandit)[1], "runs": runs(*bandit), "oscillations_per_1000": 0.0},
        }
        (check,) = [c for c in point_checks(med, "C=1", "real") if c["check"] == "throughput_vs_best_fixed"]
        return lj.with_interval(check, med)

    # Round speeds move both policies alike: the paired ratio is tight (0.94 every round): a fail.
    tight = judged([94.0, 84.6, 103.4], [100.0, 90.0, 110.0])
    assert tight["status"] == "fail" and tight["rounds"] == 3
    assert tight["interval_90"] == pytest.approx([0.94, 0.94])
    # The same medians, rounds that disagree: the interval straddles 0.95 and is wide: undecided.
    wide = judged([94.0, 99.0, 84.6], [100.0, 90.0, 110.0])
    lo, hi = wide["interval_90"]
    assert wide["status"] == "undecided" and lo < 0.95 < hi and hi / lo > 1.03**2
    # Wide but wholly above the threshold: the verdict stands.
    above = judged([130.0, 110.0, 150.0], [100.0, 90.0, 110.0])
    assert above["status"] == "pass" and above["interval_90"][0] > 0.95


def test_judging_keeps_the_measurement_and_records_who_judged():
    report = {"points": POINTS, "provenance": {"commit": "abc"}, "setup": {"repeats": 3}, "checks": []}
    judged = lj.judge(report, {"commit": "def", "dirty": False, "closure": {"sha256": "s"}})
    assert (
        judged["points"] == POINTS and judged["provenance"] == {"commit": "abc"} and judged["setup"] == report["setup"]
    )
    assert judged["checks"] == lj.verdicts(POINTS)["checks"] and judged["judged_by"]["commit"] == "def"


def test_check_then_judge_then_check(tmp_path, capsys):
    folder = tmp_path / "live"
    folder.mkdir()
    stale = {"points": POINTS, "thresholds": {"throughput_vs_best_fixed": 0.9}, "checks": [], "summary": {}}
    (folder / "report.json").write_text(json.dumps(stale, indent=1) + "\n")
    assert lj.main(["--check", str(folder)]) == 1
    assert "verdicts moved in" in capsys.readouterr().err
    assert json.loads((folder / "report.json").read_text()) == stale  # --check writes nothing
    assert lj.main([str(folder)]) == 0
    judged = json.loads((folder / "report.json").read_text())
    assert judged["summary"]["fail"] == 4 and judged["judged_by"]["closure"]["entries"] == list(lj.JUDGE_ENTRIES)
    assert lj.main(["--check", str(folder)]) == 0


def test_a_report_without_points_is_refused_naming_the_field(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps({"checks": []}))
    assert lj.main([str(tmp_path)]) == 1
    assert "field `points` must be an array" in capsys.readouterr().err


def test_live_sweep_steps_leave_the_judge_out_of_their_stamp_and_name_a_judge_step():
    steps = {s.name: s for s in regen.plan()}
    for name in ("live", "live-context-short", "live-context-long"):
        assert steps[name].judged == lj.JUDGE_MODULES
        assert steps[name].writes in steps["live-judge"].full
    assert steps["live-per-request"].judged == ()  # its own checks are not the judge's
    assert regen.step_for("results/live/report.json") == "live"


def test_judge_reason():
    now = {"sha256": "a"}
    assert judge_reason(None, now).startswith("its verdicts record no `judged_by`")
    assert "uncommitted" in judge_reason({"dirty": True}, now)
    assert "other checks" in judge_reason({"dirty": False, "closure": {"sha256": "b"}}, now)
    assert judge_reason({"dirty": False, "closure": {"sha256": "a"}}, now) is None
