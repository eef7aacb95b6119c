"""Scenario validation: errors name the field and show the value."""

import json
from pathlib import Path

import pytest

from banditk.core.errors import ConfigError
from banditk.sim.scenario import ScenarioError, load_scenario, parse_scenario

SHIPPED = sorted(Path(__file__).resolve().parents[2].joinpath("experiments", "scenarios").glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_are_valid(path):
    s = load_scenario(path)
    assert s.name and s.k_max == len(s.acceptance)


def test_shipped_cover_every_drafter_class_and_49548():
    classes = {load_scenario(p).drafter_class for p in SHIPPED}
    assert classes >= {"mtp", "mtp-step", "mtp-external", "eagle", "dflash", "draft_model", "ngram", "suffix"}
    s = load_scenario(next(p for p in SHIPPED if p.name == "49548.json"))
    assert (s.hardware, s.model, s.drafter_class, s.workload["concurrency"], s.workload["output_tokens"]) == (
        "gb10",
        "qwen3.5-122b-a10b-int4",
        "mtp",
        8,
        180,
    )
    assert s.table == [[1, 4, 2], [5, 512, 0]]


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d["drafter"].__setitem__("acceptance", [0.8, 1.3]), r"`drafter.acceptance\[1\]`=1.3"),
        (lambda d: d["drafter"].__setitem__("acceptance", [0.8]), r"`drafter.acceptance`=\[0.8\] must have k_max=2"),
        (lambda d: d.__setitem__("hardware", "tpu9"), r"`hardware`='tpu9'"),
        (lambda d: d.__setitem__("model", "gpt-9"), r"`model`='gpt-9'"),
        (lambda d: d["drafter"].__setitem__("class", "magic"), r"`drafter.class`='magic'"),
        (lambda d: d["workload"].__setitem__("concurrency", 0), r"`workload.concurrency`=0 must be >= 1"),
        (lambda d: d["workload"].__setitem__("arrival_rate", 2.0), r"`workload.arrival_rate`=2.0 cannot be given"),
        (lambda d: d["workload"].pop("output_tokens"), r"missing required field `workload.output_tokens`"),
        (lambda d: d.__setitem__("colour", "red"), r"`colour`='red' is not a known field"),
        (lambda d: d.__setitem__("phases", [{"at_step": -1}]), r"`phases\[0\].at_step`=-1"),
        (
            lambda d: d.__setitem__("phases", [{"at_step": 5, "drafter": {"acceptance": [2, 0]}}]),
            r"`phases\[0\].drafter.acceptance\[0\]`=2",
        ),
        (lambda d: d.__setitem__("table", [[1, 4, 7]]), r"`table\[0\]\[2\]`=7"),
        (lambda d: d.__setitem__("steps", "many"), r"`steps`='many' must be an integer"),
        (lambda d: d["drafter"].__setitem__("request_dispersion", -1.0), r"`drafter.request_dispersion`=-1.0"),
        (lambda d: d.__setitem__("dynamic_cudagraph", "NONE"), r"`dynamic_cudagraph`='NONE'"),
        (lambda d: d.__setitem__("noise_ar1", 1.0), r"`noise_ar1`=1.0 must be in \[0, 1\)"),
        (lambda d: d.__setitem__("noise_spike_p", 1.5), r"`noise_spike_p`=1.5 must be a probability"),
        (lambda d: d.__setitem__("noise_spike_mean", -0.5), r"`noise_spike_mean`=-0.5 must be >= 0"),
    ],
)
def test_errors_name_field_and_value(base_dict, mutate, match):
    mutate(base_dict)
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(base_dict)


def test_scenario_error_is_config_and_value_error(base_dict):
    base_dict["model"] = "gpt-oss-120b"  # no speculative mechanism configured: no drafter row
    with pytest.raises(ConfigError, match=r"`drafter.class`='mtp' has no row for model 'gpt-oss-120b'") as e:
        parse_scenario(base_dict)
    assert isinstance(e.value, ValueError)


def test_load_reports_bad_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{nope")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match=r"`--scenario`=.*cannot be read"):
        load_scenario(tmp_path / "missing.json")


def test_open_loop_and_phases_parse(base_dict):
    base_dict["workload"] = {"arrival_rate": 1.5, "prompt_tokens": 64, "output_tokens": 32}
    base_dict["phases"] = [{"at_step": 100, "workload": {"concurrency": 4}}]
    s = parse_scenario(json.loads(json.dumps(base_dict)))
    assert s.workload["arrival_rate"] == 1.5 and s.phases[0].workload["concurrency"] == 4


def test_the_clock_has_the_scenario_s_spread_correlation_and_stalls(base_dict):
    import numpy as np

    from banditk.sim.engine import Simulator
    from banditk.sim.policies import build_policy

    base_dict.update(noise_cv=0.1, noise_ar1=0.7, noise_spike_p=0.05, noise_spike_mean=2.0)
    scn = parse_scenario(base_dict)
    sim = Simulator(scn, build_policy("fixed:1", scn), seed=0)
    f, z = np.empty(20000), np.empty(20000)
    for i in range(f.size):
        f[i] = sim._clock_factor()
        z[i] = sim._log_clock
    assert z.std() == pytest.approx(0.1, rel=0.05)  # the log-normal body's spread
    assert np.corrcoef(z[1:], z[:-1])[0, 1] == pytest.approx(0.7, abs=0.02)
    stall = f / np.exp(z - 0.005)  # what the body does not explain
    stalled = stall > 1.0 + 1e-12
    assert stalled.mean() == pytest.approx(0.05, abs=0.005)
    assert (stall[stalled] - 1.0).mean() == pytest.approx(2.0, rel=0.1)
    assert np.allclose(stall[~stalled], 1.0)
    quiet = Simulator(parse_scenario({**base_dict, "noise_cv": 0.0, "noise_spike_p": 0.0}), sim.policy, seed=0)
    assert {quiet._clock_factor() for _ in range(10)} == {1.0}
