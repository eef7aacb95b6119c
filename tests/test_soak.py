"""Shortened soak: bounded memory and bounded per-request state over many requests.

The full form (1M steps, 100k requests) is `python experiments/soak.py` (`make soak`).
"""

import pytest

from lab.synthetic_soak import run_soak


def test_soak_short_keeps_state_bounded():
    r = run_soak(steps=60_000, requests=6_000, concurrency=8)
    assert r["requests"] >= 5_000
    start, middle, end = r["memory"]
    # Per-request history is evicted: only live requests are tracked.
    assert end["tracked_requests"] <= 8 and r["telemetry_tracked_requests_end"] <= 8
    # The regression buffer is folded every `regression_refresh` observations.
    assert max(m["pending_regression_rows"] for m in r["memory"]) < 32
    # Resident memory does not grow with requests served (a leak of ~1 KB per request would show as 3 MB).
    assert end["rss_mb"] - middle["rss_mb"] < 3.0


@pytest.mark.slow
def test_soak_full():
    r = run_soak()
    assert r["memory"][-1]["rss_mb"] - r["memory"][0]["rss_mb"] < 10.0
