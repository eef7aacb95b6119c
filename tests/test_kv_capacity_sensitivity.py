"""experiments/kv_capacity_sensitivity.py: one policy on the long-tail mix with the cache cut."""

import json

import pytest
from experiment_scripts import load

kcs = load("kv_capacity_sensitivity")


def test_a_tiny_run_reports_each_cut_and_how_far_each_seed_moved(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--concurrency", "8", "--cuts", "0,500", "--seeds", "2", "--steps", "150", "--workers", "1"]
    assert kcs.main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]["c8"]
    assert rows["cut0"]["kv_capacity_tokens"] - rows["cut500"]["kv_capacity_tokens"] == 500
    assert len(rows["cut0"]["throughput_per_seed"]) == 2 and rows["cut0"]["throughput_median"] > 0
    base, cut = rows["cut0"]["throughput_per_seed"], rows["cut500"]["throughput_per_seed"]
    moved = rows["cut500"]["per_seed_change_vs_first_cut"]
    assert moved == pytest.approx([c / b - 1 for b, c in zip(base, cut, strict=True)], abs=1e-3)
    assert "per_seed_change_vs_first_cut" not in rows["cut0"]


@pytest.mark.parametrize("bad", [["--cuts", "0,x"], ["--seeds", "0"], ["--cuts", "-5"]])
def test_bad_arguments_are_refused_naming_the_flag(bad, capsys):
    with pytest.raises(SystemExit):
        kcs.main(bad)
    err = capsys.readouterr().err
    assert "--cuts" in err or "--seeds" in err
