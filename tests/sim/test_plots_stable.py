"""A report's plots are the same bytes each time they are drawn: remaking a report whose numbers
did not change leaves its PNGs untouched in git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from banditk.sim.plots import plot_report  # noqa: E402

REPORT = Path(__file__).resolve().parents[2] / "results" / "sweep-49548" / "report.json"


def test_drawing_a_report_twice_gives_the_same_bytes(tmp_path):
    report = json.loads(REPORT.read_text())
    first = plot_report(report, tmp_path / "a")
    second = plot_report(report, tmp_path / "b")
    assert first and [Path(p).name for p in first] == [Path(p).name for p in second]
    for a, b in zip(first, second, strict=True):
        assert Path(a).read_bytes() == Path(b).read_bytes(), Path(a).name
