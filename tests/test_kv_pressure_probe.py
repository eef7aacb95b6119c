"""experiments/kv_pressure_probe.py on a short run: each variant's server mode, seeds and pinned K."""

from __future__ import annotations

import json

from experiment_scripts import load


def test_a_pinned_bandit_runs_the_governed_mode_next_to_the_static_fixed_k(tmp_path):
    probe = load("kv_pressure_probe")
    variants = [["fixed:1", "fixed:1", None], ["bandit k=1", "bandit", {"k_set": [1]}]]
    argv = ["--concurrency", "32", "--seeds", "2", "--steps", "400", "--workers", "1", "--out", str(tmp_path)]
    assert probe.main([*argv, "--variants", json.dumps(variants)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["results"]["c32"]
    assert rows["fixed:1"]["server_mode"] == "static FULL" and rows["bandit k=1"]["server_mode"] == "MRv2 FULL"
    assert rows["bandit k=1"]["mean_k_median"] == rows["fixed:1"]["mean_k_median"] == 1.0  # k_set pins the bandit
    for row in rows.values():
        assert len(row["throughput_per_seed"]) == 2
        lo, hi = row["throughput_range"]
        assert 0 < lo <= row["throughput_median"] <= hi
    assert report["steps"] == 400 and report["variants"] == variants
