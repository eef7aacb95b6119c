"""experiments/cpu_prior.py's calibration on a trace whose truth is known: the simulator's own.

A random-K trace is recorded from the simulator on the cpu-2core profile, as the live
run records one from vLLM. The profile the script calibrates from it must predict the
true step times, and a regret run on it must work end to end.
"""

import math
import sys
from pathlib import Path

import numpy as np

from .test_sim_vs_real import scenario

ROOT = Path(__file__).resolve().parents[2]


def test_profile_calibrated_from_the_prior_s_telemetry_predicts_its_step_times(tmp_path):
    from banditk.policies.explore import RandomKPolicy
    from banditk.sim import hardware as hwmod
    from banditk.sim.engine import Simulator
    from banditk.sim.models import get_model
    from banditk.sim.scenario import parse_scenario
    from banditk.sim.step_time import StepCostModel
    from lab.recording import RecordingPolicy

    trace = tmp_path / "telemetry.jsonl"
    scn = parse_scenario(scenario(1, phases=[(600, 2), (1200, 4), (1800, 8)]))
    rec = RecordingPolicy(
        RandomKPolicy(k_max=3, seed=5), trace, drafter_class="draft_model", k_max=3, source="sim", hardware="cpu-2core"
    )
    with rec:
        Simulator(scn, rec, seed=5, speculation=True, dynamic=True).run(scn.steps)
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import cpu_prior
    finally:
        sys.path.pop(0)
    profiles = cpu_prior.register_profiles(trace)
    ours = profiles[cpu_prior.PROFILE]
    assert ours["rms_step_error"] < 0.08 and abs(ours["noise_cv"] - 0.05) < 0.02
    model = get_model("cyclic-4x1024-v512")
    truth = StepCostModel(hwmod.HARDWARE["cpu-2core"], model, "draft_model", 3, dynamic=True)
    fitted = StepCostModel(hwmod.HARDWARE[cpu_prior.PROFILE], model, "draft_model", 3, dynamic=True)
    for b in (1, 4, 8):
        kv = truth.kv_read_bytes(np.full(b, 160), b)
        err = fitted.times(b, b, 0, kv) / truth.times(b, b, 0, kv) - 1
        assert np.all(np.abs(err) < 0.1), (b, err)
    run = cpu_prior.regret_run(None, 0, ours["noise_cv"], steps=3000)
    assert 0.0 <= run["regret_fraction"] < 0.2 and math.isfinite(run["curve"][-1])
