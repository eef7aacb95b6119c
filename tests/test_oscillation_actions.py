"""experiments/oscillation_actions.py: every oscillation gets the governor action that made it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from banditk.governor import bandit, switching

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("oscillation_actions", ROOT / "experiments" / "oscillation_actions.py")
oa = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = oa
_spec.loader.exec_module(oa)


def test_points_parse_and_bad_ones_name_the_value():
    assert oa.parse_point("drift:8") == ("drift", 8, "bandit")
    assert oa.parse_point("drift:2:bandit+prior") == ("drift", 2, "bandit+prior")
    for bad, said in [
        ("drift", "'drift'"),
        ("drift:0", "'drift:0'"),
        ("drift:4:ucb", "'ucb'"),
        ("nope:4", "nope.json"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            oa.parse_point(bad)


def _rec(k, incumbent=None, hold=0.0, n_k=100.0, chunk=False):
    chose = None if incumbent is None else (incumbent, k, hold, n_k, 32.0)
    return (k, chunk, chose)


def test_an_exploration_and_its_return_count_as_the_exploration():
    records = [
        _rec(2, -1),  # first decision
        _rec(3, 2, hold=32.0, n_k=0.0),  # first look at K=3
        _rec(3),  # held
        _rec(2, 2),  # back to the bucket's K: ends the first look
        _rec(1, 2, hold=100.0, n_k=100.0),  # revisit of a known K
        _rec(2, 2),  # its end
        _rec(4, 2),  # a sure switch
        _rec(1, chunk=True),  # a step next to a chunk
        _rec(4),  # held, after a chunk the step did not run
    ]
    steps = list(range(10, 19))
    flips = {11, 13, 14, 15, 16, 17, 18}
    assert oa.flip_actions(records, steps, flips) == {
        11: "first look",
        13: "first look",
        14: "revisit",
        15: "revisit",
        16: "sure switch",
        17: "chunk rule",
        18: "chunk rule",
    }


def test_a_held_decode_step_that_changes_k_is_an_error():
    with pytest.raises(AssertionError, match="step 11"):
        oa.flip_actions([_rec(2, 2), _rec(3)], [10, 11], {11})


def test_a_real_run_splits_every_oscillation_and_restores_the_governor():
    choose, select = switching.choose, bandit.BanditGovernor.select
    out = oa.run_seed(("dflash-laguna-gb10", 4, "bandit", 0, {"warmup": 50, "measured": 400}, {}))
    assert switching.choose is choose and bandit.BanditGovernor.select is select
    # Each oscillation after warm-up has one action: the counts add up to the protocol's number.
    assert sum(out["actions"].values()) == pytest.approx(out["oscillations_per_1000"] * out["decided_steps"] / 1000)
    assert sum(out["actions"].values()) > 0  # a cold start over 9 Ks explores in this window
    assert all(j >= 50 for steps in out["at_steps"].values() for j in steps)  # after warm-up only


def test_failing_points_are_read_from_the_sweep_reports(tmp_path):
    checks = [
        {"check": oa.CHECK, "policy": "bandit", "point": "c4", "value": 3.5, "status": "fail"},
        {"check": oa.CHECK, "policy": "bandit+prior", "point": "c8", "value": 2.5, "status": "fail"},
        {"check": oa.CHECK, "policy": "bandit", "point": "c16", "value": 1.0, "status": "pass"},
        {"check": oa.CHECK, "policy": "ucb", "point": "c2", "value": 9.0, "status": "fail"},
        {"check": "throughput_vs_nospec", "policy": "bandit", "point": "c2", "value": 0.5, "status": "fail"},
    ]
    (tmp_path / "sweep-drift").mkdir()
    (tmp_path / "sweep-drift" / "report.json").write_text(json.dumps({"scenario": {"name": "x"}, "checks": checks}))
    assert oa.failing_points(tmp_path) == [("drift", 4, "bandit", 3.5), ("drift", 8, "bandit+prior", 2.5)]
