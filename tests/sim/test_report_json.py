"""A protocol report's JSON: the same data as plain JSON, one line per item only near the top."""

from __future__ import annotations

import json

import numpy as np

from banditk.sim.report import INDENTED_LEVELS, report_json, write_report

REPORT = {
    "scenario": "s",
    "results": {"C=1": {"bandit": {"throughput_tok_s": {"median": 1.5, "seeds": [1.0, 2.0, np.float64(3.0)]}}}},
    "regret": {"bandit": [[0.1, 0.2], [0.3]]},
    "empty": {},
    "checks": [],
}


def test_it_reads_back_as_the_report():
    assert json.loads(report_json(REPORT)) == json.loads(json.dumps(REPORT, default=float))


def test_only_the_first_levels_take_a_line_each():
    lines = report_json(REPORT).splitlines()
    depth = max(len(line) - len(line.lstrip(" ")) for line in lines)
    assert depth == INDENTED_LEVELS
    # a policy's metrics at a point, below the indented levels, are one line
    assert '   "bandit": {"throughput_tok_s":{"median":1.5,"seeds":[1.0,2.0,3.0]}}' in lines


def test_a_long_series_costs_no_indentation(tmp_path):
    report = {"convergence": {"bandit": {"C=1": list(range(5000))}}}
    path = write_report(report, tmp_path)
    assert json.loads(path.read_text()) == report
    assert len(path.read_text()) < len(json.dumps(report, indent=1)) / 2
    assert not list(tmp_path.glob(".*.tmp"))
