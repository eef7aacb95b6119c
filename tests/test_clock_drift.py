"""experiments/clock_drift.py on a synthetic telemetry log: two runs, the machine twice as fast in the second."""

from __future__ import annotations

import json

from experiment_scripts import load


def test_drift_is_the_played_k_step_time_per_run_relative_to_the_first(tmp_path):
    clock_drift = load("clock_drift")
    rows = []
    for run, (t0, speed) in enumerate(((0.0, 1.0), (100.0, 0.5))):
        for i in range(40):
            k = 3 if run == 0 and i < 4 else 1  # the first run also explores K=3 a little
            step = (0.09 if k == 3 else 0.06) * speed
            rows.append({"t": t0 + i * 0.1, "B": 4, "k": k, "step_s": step, "draft_s": step / 4, "target_s": step / 2})
        rows.append({"t": t0 + 5.0, "B": 2, "k": 1, "step_s": 1.0, "prefill": 0})  # another B: not compared
    server = tmp_path / "runs" / "bandit"
    server.mkdir(parents=True)
    (server / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    assert clock_drift.main([str(tmp_path), "--batch", "4"]) == 0
    report = json.loads((tmp_path / "clock_drift.json").read_text())
    s = report["servers"]["runs/bandit"]
    assert s["drift"] == {"k": 1, "step_ms": [60.0, 30.0], "relative": [1.0, 0.5]}
    first = s["segments"][0]["by_k"]
    assert first["3"] == {"steps": 4, "step_ms": 90.0, "draft_ms": 22.5, "target_ms": 45.0}
    assert "| runs/bandit | 1 | 60.0, 30.0 | 1.00, 0.50 |" in (tmp_path / "clock_drift.md").read_text()
