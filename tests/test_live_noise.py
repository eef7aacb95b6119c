"""experiments/live_noise.py: the two-way fit, the protocol's ratio, and its false-fail rate."""

import json

import numpy as np
import pytest
from experiment_scripts import load

noise = load("live_noise")


def test_the_fit_takes_a_rounds_speed_out_of_every_policy():
    # Two policies 10% apart; round 2 runs the machine 30% slower for both.
    y = np.log([[100.0, 70.0, 100.0], [110.0, 77.0, 110.0]])
    a, b, sd, df = noise.fit_two_way(y)
    assert np.exp(a[1] - a[0]) == pytest.approx(1.1)
    assert np.exp(b[1] - b[0]) == pytest.approx(0.7)
    assert sd == pytest.approx(0.0, abs=1e-12) and df == 2


def test_the_protocol_ratio_is_medians_over_the_largest_fixed_median():
    thr = np.array([[90.0, 100.0, 95.0], [100.0, 80.0, 101.0], [98.0, 99.0, 97.0]])  # bandit, fixed:1, fixed:2
    ratio, best = noise.protocol_ratio(thr, 0, [1, 2])
    # fixed:1's slow run lowers its mean below fixed:2's, not its median.
    assert best == 1 and ratio == pytest.approx(95.0 / 100.0)


def test_a_perfect_governor_fails_more_often_the_noisier_the_runs():
    a = np.zeros(4)  # bandit and three near-tied fixed Ks
    b = np.zeros(3)
    quiet = noise.false_fail_rate(a, b, 0.005, 0, [1, 2, 3], 0.95, 4000, 0)
    loud = noise.false_fail_rate(a, b, 0.08, 0, [1, 2, 3], 0.95, 4000, 0)
    assert quiet == 0.0 and loud > 0.2
    # More rounds, fewer false fails.
    assert noise.repeats_needed(a, b, 0.005, 0, [1, 2, 3], 0.95, 2000, 0) == 3
    assert noise.repeats_needed(a, b, 0.03, 0, [1, 2, 3], 0.95, 2000, 0) > 3


def _report(folder, runs_by_policy):
    folder.mkdir()
    points = [
        {
            "policy": p,
            "concurrency": 4,
            "throughput_tok_s": float(np.median(r)),
            "runs": [{"throughput_tok_s": x} for x in r],
        }
        for p, r in runs_by_policy.items()
    ]
    # Three flips in 450 decided steps: 6.7 per 1,000, over the limit of 5 by less than one look.
    points[0].update(decided_steps=450, oscillations_per_1000=1000.0 * 3 / 450)
    (folder / "report.json").write_text(json.dumps({"provenance": {"commit": "abc"}, "points": points}))


def test_the_report_names_each_point_and_its_verdict(tmp_path):
    _report(
        tmp_path / "live-a",
        {
            "bandit": [93.0, 90.0, 96.0],
            "fixed:1": [100.0, 95.0, 99.0],
            "fixed:2": [80.0, 78.0, 82.0],
            "nospec": [70, 69, 71],
        },
    )
    assert noise.main(["--reports", str(tmp_path / "live-a"), "--draws", "500", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (row,) = report["points"]
    assert row["best_fixed"] == "fixed:1" and row["protocol_ratio"] == pytest.approx(93.0 / 99.0, abs=1e-4)
    assert row["protocol_verdict"] == "fail" and report["sources"] == {str(tmp_path / "live-a"): "abc"}
    assert (tmp_path / "out" / "ratios.png").stat().st_size > 0
    (osc,) = report["oscillations"]
    assert osc["oscillations"] == 3 and osc["per_1000"] == pytest.approx(6.67) and osc["verdict"] == "fail"
    assert osc["per_1000_95"][0] < 5.0 < osc["per_1000_95"][1] and osc["verdict_within_noise"]


def test_the_poisson_interval_covers_its_mean_as_often_as_it_says():
    rng = np.random.default_rng(0)
    for mean in (0.5, 3.0, 12.0):
        counts = rng.poisson(mean, 2000)
        covered = np.mean([lo <= mean <= hi for lo, hi in map(noise.poisson_interval, counts)])
        assert covered >= 0.95  # exact intervals are conservative
    assert noise.poisson_interval(0)[0] == 0.0


def test_bad_arguments_are_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        noise.main(["--threshold", "1.5", "--out", str(tmp_path)])
    assert "--threshold" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        noise.main(["--reports", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert "report.json does not exist" in capsys.readouterr().err
