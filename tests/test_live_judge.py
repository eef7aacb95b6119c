"""A live report's verdicts are judged apart from its measurement (experiments/live_judge.py)."""

from __future__ import annotations

import json

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
    assert out["checks"] == point_checks(at1, "C=1", "real", "bandit") + point_checks(
        at4, "C=4", "real", "bandit+prior"
    )
    failed = {(c["policy"], c["point"], c["check"]) for c in out["checks"] if c["status"] == "fail"}
    assert failed == {
        ("bandit", "C=1", "throughput_vs_best_fixed"),  # 140 / 150 < 0.95
        ("bandit+prior", "C=4", "throughput_vs_nospec"),
        ("bandit+prior", "C=4", "p99_tpot_vs_nospec"),
        ("bandit+prior", "C=4", "oscillations_per_1000_stationary"),
    }
    assert out["summary"]["fail"] == 4 and out["thresholds"]["throughput_vs_best_fixed"] == 0.95


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
