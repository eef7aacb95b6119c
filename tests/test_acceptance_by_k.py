"""experiments/acceptance_by_k.py on a hand-made trace: acceptance per K, counted exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import acceptance_by_k as abk  # noqa: E402

HEADER = {"trace": "banditk/trace", "version": 1, "drafter": {"class": "draft_model"}, "k_max": 3, "source": "vllm"}


def write_trace(path: Path, rows: list[tuple]) -> None:
    """rows: (B, k, acc_s, acc_f, prefill)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(HEADER)]
    for i, (b, k, s, f, prefill) in enumerate(rows):
        lines.append(
            json.dumps(
                {"step": i, "B": b, "k": k, "bucket": 0, "step_s": 0.02, "acc_s": s, "acc_f": f, "prefill": prefill}
            )
        )
    path.write_text("\n".join(lines) + "\n")


def test_rates_are_counted_per_k_and_prompt_chunk_steps_are_left_out(tmp_path):
    write_trace(
        tmp_path / "runs" / "bandit" / "telemetry.jsonl",
        [
            (2, 2, [2, 1, 0], [0, 1, 0], 0),  # K=2: both requests accept position 1, one position 2
            (2, 2, [1, 0, 0], [1, 1, 0], 0),
            (1, 3, [1, 1, 1], [0, 0, 0], 0),  # K=3: one request, all accepted
            (1, 3, [0, 0, 0], [1, 0, 0], 0),
            (1, 3, [0, 0, 0], [1, 0, 0], 64),  # a prompt chunk rode along: not counted
            (1, 0, [0, 0, 0], [0, 0, 0], 0),  # K=0 verifies nothing
        ],
    )
    runs = abk.analyse(tmp_path)
    pooled = runs["bandit"]["pooled"]
    assert set(pooled) == {"2", "3"} and runs["bandit"]["decode_steps"] == 5
    assert [(p["successes"], p["failures"]) for p in pooled["2"]["positions"]] == [(3, 1), (1, 2)]
    assert [(p["successes"], p["failures"]) for p in pooled["3"]["positions"]] == [(1, 1), (1, 0), (1, 0)]
    assert pooled["2"]["positions"][0]["alpha"] == 0.75
    lo, hi = pooled["2"]["positions"][0]["ci95"]
    assert lo < 0.75 < hi
    (gap,) = runs["bandit"]["first_position_gaps"]
    assert gap["k"] == 2 and gap["versus_k"] == 3 and gap["gap"] == pytest.approx(0.25)
    # pooled p = 4/6, se = sqrt(p (1 - p) (1/4 + 1/2))
    assert gap["z"] == pytest.approx(0.25 / ((4 / 6) * (2 / 6) * 0.75) ** 0.5)
    assert set(runs["bandit"]["by_batch"]) == {"1", "2"} and set(runs["bandit"]["by_batch"]["2"]) == {"2"}


def test_no_governed_telemetry_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="run experiments/live_sweep.py first"):
        abk.analyse(tmp_path)
