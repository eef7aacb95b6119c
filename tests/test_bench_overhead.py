"""The overhead benchmark's bookkeeping: its report, its verdicts and its engine instruments.

Speed itself is the benchmark's to measure (`make bench`), not asserted here.
"""

import json

import pytest
from experiment_scripts import load

bench = load("bench_overhead")
engine = load("engine_overhead")


def test_a_short_run_writes_every_target_with_a_verdict(tmp_path):
    assert bench.main(["--steps", "64", "--warmup", "40", "--repeats", "3", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["provenance"]["commit"]
    rows = {row["B"]: row for row in report["synthetic"]}
    assert sorted(rows) == list(bench.BATCHES)
    for row in rows.values():
        for mode in ("batch", "per_request"):
            split = row[mode]
            assert split["held"]["n"] + split["deciding"].get("n", 0) == 64
            assert split["all"]["p50_us"] > 0
        assert row["list_lookup"]["p50_us"] >= 0
        p50s = row["repeats_p50_us"]["batch"]
        assert len(p50s) == 3 and row["batch"]["all"]["p50_us"] == sorted(p50s)[1]
    verdicts = {c["check"]: c for c in report["checks"]}
    for b in bench.TARGET_BATCHES:
        assert verdicts[f"B={b} batch-wide p50"]["status"] in ("pass", "fail")
        assert verdicts[f"B={b} batch-wide p50"]["value"] == rows[b]["batch"]["all"]["p50_us"]
    assert verdicts["engine ratios"]["status"] == "not_run"
    assert report["profile"]["synthetic_batch_wide_B8"][0]["function"].startswith("banditk/")


def test_a_value_at_its_limit_passes_and_one_above_fails():
    def row(b, p50, mean, per_request_mean):
        stats = {"p50_us": p50, "mean_us": mean}
        return {"B": b, "batch": {"all": stats}, "per_request": {"all": {"mean_us": per_request_mean}}}

    verdicts = bench.checks([row(1, 10.0, 25.0, 50.0), row(8, 10.01, 26.0, 53.0), row(256, 99.0, 99.0, 999.0)], None)
    by_name = {c["check"]: c["status"] for c in verdicts}
    assert by_name["B=1 batch-wide p50"] == by_name["B=1 batch-wide mean"] == "pass"
    assert by_name["B=1 per-request mean / batch-wide mean"] == "pass"
    assert by_name["B=8 batch-wide p50"] == by_name["B=8 batch-wide mean"] == "fail"
    assert by_name["B=8 per-request mean / batch-wide mean"] == "fail"
    assert not any(name.startswith("B=256") for name in by_name)  # no target there
    engine_rows = [{"B": 1, "ratio": 0.25}, {"B": 8, "ratio": 0.11}, {"B": 2, "ratio": 9.0}]
    by_name = {c["check"]: c["status"] for c in bench.checks([], engine_rows)}
    assert by_name == {
        "B=1 engine banditk / vLLM scheduler": "pass",
        "B=8 engine banditk / vLLM scheduler": "fail",
    }


def test_the_step_clock_splits_outer_time_from_the_hooks_inside_it():
    clock = engine.StepClock()
    hook = clock.timed(lambda: sum(range(2000)), "on_schedule")
    outer = clock.timed(lambda: hook() + hook(), starts_step=True)
    for _ in range(3):
        outer()
    clock.new_step()
    assert len(clock.outer) == len(clock.banditk) == len(clock.hooks["on_schedule"]) == 3
    for total, inside in zip(clock.outer, clock.banditk):
        assert 0 < inside <= total


def test_the_plain_class_runs_without_the_hooks_and_swaps_back():
    class VllmScheduler:
        def schedule(self):
            return "vllm"

    class Mixin:
        def schedule(self):
            return "hooked " + super().schedule()

    Governed = type("Governed", (Mixin, VllmScheduler), {"__module__": "banditk.adapter.scheduler"})
    Mixin.__module__ = "banditk.adapter.scheduler"
    sch = Governed()
    sch.__class__ = engine._plain_class(Governed)
    assert sch.schedule() == "vllm"
    sch.__class__ = Governed
    assert sch.schedule() == "hooked vllm"


@pytest.mark.parametrize("flag", ["--steps", "--warmup", "--rounds", "--repeats"])
def test_a_count_below_one_is_refused_naming_the_flag(flag, capsys):
    with pytest.raises(SystemExit):
        bench.main([flag, "0"])
    assert f"{flag} must be >= 1, got 0" in capsys.readouterr().err


def test_the_readme_section_quotes_each_batch_and_names_what_missed_its_target(tmp_path):
    readme = load("readme_results")
    bench.main(["--steps", "64", "--warmup", "40", "--repeats", "1", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    report["engine"] = [{"B": 1, "banditk_ms": 0.05, "vllm_scheduler_ms_plain": 0.1, "ratio": 0.5}]
    report["checks"] = [
        {"check": "B=1 engine banditk / vLLM scheduler", "value": 0.5, "limit": 0.25, "status": "fail"},
        {"check": "B=1 batch-wide p50", "value": 3.0, "limit": 10.0, "status": "pass"},
    ]
    text = readme.render_overhead(report, "results/overhead/report.json")
    assert "targets: 1 pass, 1 fail, 0 not run" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(bench.BATCHES)
    assert rows[0].endswith("| 50 / 100 us = 0.50 |") and rows[1].endswith("| - |")
    assert text.endswith("Over target: B=1 engine banditk / vLLM scheduler 0.5 > 0.25.")
    line = readme.summarize_overhead(report, "results/overhead/report.json")
    assert "(`results/overhead/report.json`, " in line and "targets: 1 pass, 1 fail, 0 not run" in line
    assert f"p50 at B = {min(bench.BATCHES)}-{max(bench.BATCHES)}" in line
    assert line.endswith("banditk's time per step is 0.50 of vLLM's scheduler's at B = 1.")
