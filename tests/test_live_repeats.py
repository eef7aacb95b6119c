"""lab.live.repeats: several runs of a live point become one, without hiding any run."""

import pytest

from lab.live.repeats import combine


def run(throughput, p99, decided, causes, k_hist):
    return {
        "policy": "bandit",
        "concurrency": 2,
        "throughput_tok_s": throughput,
        "tpot_p99_s": p99,
        "num_prompts": 10,
        "decided_steps": decided,
        "change_causes": causes,
        "decode_flips_by_bucket": {"1": causes["decode_flip"]} if causes["decode_flip"] else {},
        "k_hist": k_hist,
        "oscillations_per_1000": 1000.0 * causes["decode_flip"] / decided,
    }


def test_one_slow_run_moves_no_timing_and_switches_are_pooled_over_steps():
    quiet = {"fallback": 0, "bucket": 2, "chunk": 0, "chunk_flip": 0, "decode_flip": 0}
    first = run(150.0, 0.015, 500, {**quiet, "decode_flip": 6}, {"2": 100, "3": 400})
    runs = [first, run(80.0, 0.040, 1500, quiet, {"3": 1500}), run(148.0, 0.014, 1000, quiet, {"3": 1000})]
    point = combine(runs)
    assert point["throughput_tok_s"] == 148.0 and point["tpot_p99_s"] == 0.015
    # 6 flips in 3,000 steps, not the mean of 12, 0 and 0 per 1,000.
    assert point["oscillations_per_1000"] == pytest.approx(2.0)
    assert point["k_switches_per_1000"] == pytest.approx(4.0)  # and 6 bucket changes
    assert point["decided_steps"] == 3000 and point["num_prompts"] == 30
    assert point["k_hist"] == {"2": 100, "3": 2900} and point["decode_flips_by_bucket"] == {"1": 6}
    assert [r["throughput_tok_s"] for r in point["runs"]] == [150.0, 80.0, 148.0]
    assert point["runs"][0]["oscillations_per_1000"] == pytest.approx(12.0)


def test_a_static_policy_keeps_its_rate():
    runs = [{"policy": "fixed:2", "concurrency": 4, "throughput_tok_s": t, "k_switches_per_1000": 0.0} for t in (1, 3)]
    assert combine(runs)["k_switches_per_1000"] == 0.0 and combine(runs)["throughput_tok_s"] == 2.0


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ([], "at least one run"),
        ([{"policy": "bandit", "concurrency": 2}, {"policy": "bandit", "concurrency": 4}], "share policy"),
    ],
)
def test_runs_of_different_points_are_refused(runs, message):
    with pytest.raises(ValueError, match=message):
        combine(runs)
