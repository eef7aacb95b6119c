"""experiments/sim_vs_real.py on data whose truth is known: the simulator's own.

A governed "live" run is recorded from the simulator on the cpu-2core profile, and the
"measured" points are the simulator's predictions there. Calibrating a profile from
that trace and predicting the points again must reproduce them closely; a script that
mis-read the trace, mis-fitted or simulated other shapes would not.
"""

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SETUP = {"k_max": 3, "input_len": 128, "output_len": 64, "table": "[[1,4,3],[5,256,0]]"}


def scenario(concurrency, phases=()):
    return {
        "name": "truth",
        "hardware": "cpu-2core",
        "model": "cyclic-4x1024-v512",
        "drafter": {"class": "draft_model", "k_max": 3, "acceptance": [0.75, 0.8, 0.85], "request_dispersion": None},
        "workload": {"concurrency": concurrency, "prompt_tokens": 128, "output_tokens": 64},
        "phases": [{"at_step": at, "workload": {"concurrency": c}} for at, c in phases],
        "table": json.loads(SETUP["table"]),
        "noise_cv": 0.05,
        "steps": 2400,
        "seed": 3,
    }


def test_calibration_and_prediction_recover_the_simulators_own_sweep(tmp_path):
    from banditk.policies.explore import RandomKPolicy
    from banditk.sim.engine import Simulator
    from banditk.sim.run import run_policy
    from banditk.sim.scenario import parse_scenario
    from lab.recording import RecordingPolicy

    live = tmp_path / "live"
    (live / "runs" / "bandit").mkdir(parents=True)
    scn = parse_scenario(scenario(1, phases=[(600, 2), (1200, 4), (1800, 8)]))
    rec = RecordingPolicy(
        RandomKPolicy(k_max=3, seed=3),
        live / "runs" / "bandit" / "telemetry.jsonl",
        drafter_class="draft_model",
        k_max=3,
        source="sim",
        hardware="cpu-2core",
    )
    with rec:
        Simulator(scn, rec, seed=3, speculation=True, dynamic=True).run(scn.steps)
    points = []
    for c, policy in ((1, "fixed:3"), (4, "nospec"), (8, "fixed:1")):
        s = run_policy(parse_scenario(scenario(c)), policy, seed=0, warmup=200).summary
        points.append(
            {
                "policy": policy,
                "concurrency": c,
                "throughput_tok_s": s["throughput_tok_s"],
                "tpot_p99_s": s["tpot_p99_s"],
            }
        )
    (live / "report.json").write_text(json.dumps({"setup": SETUP, "points": points}))

    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import sim_vs_real
    finally:
        sys.path.pop(0)
    assert sim_vs_real.main(["--live", str(live), "--out", str(tmp_path / "out"), "--seeds", "1"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["calibration_rms_step_error"] < 0.08
    assert np.allclose(report["acceptance"], [0.75, 0.8, 0.85], atol=0.03)
    assert report["summary"]["median_abs_throughput_error"] < 0.05, report["points"]
    assert (tmp_path / "out" / "sim_vs_real.png").stat().st_size > 10_000
