"""Telemetry counters, bounded histories and the rotated JSONL log (no vLLM needed)."""

import json
import logging

import numpy as np

from banditk.adapter.telemetry import RotatingJsonl, Telemetry


def test_per_position_counts_match_vllm_convention():
    t = Telemetry(k_max=3)
    t.observe_request("a", 3, 3)
    t.observe_request("b", 3, 1)
    t.observe_request("c", 2, 0)
    t.observe_request("d", 0, 0)  # no drafts: not a draft
    assert t.num_drafts == 3 and t.num_draft_tokens == 8 and t.num_accepted_tokens == 4
    assert t.accepted_per_position.tolist() == [2, 1, 1]  # vLLM's num_accepted_tokens_per_pos
    np.testing.assert_allclose(t.acceptance_per_position(), [2 / 3, 1 / 2, 1 / 1])


def test_request_history_is_bounded_and_evicted():
    t = Telemetry(k_max=2, request_history=3)
    for i in range(10):
        t.observe_request("a", 2, i % 3)
    t.observe_request("b", 1, 1)
    assert len(t.request_history("a")) == 3 and t.num_tracked_requests == 2
    t.evict(live={"b"})
    assert t.request_history("a") == [] and t.num_tracked_requests == 1


def test_time_shares():
    t = Telemetry(k_max=2)
    assert t.time_shares() is None
    t.observe_step(0.010, target_s=0.006, draft_s=0.003)
    sh = t.time_shares()
    assert abs(sh["verify"] - 0.6) < 1e-9 and abs(sh["draft"] - 0.3) < 1e-9 and abs(sh["other"] - 0.1) < 1e-9


def test_jsonl_log_rotates_and_stays_bounded(tmp_path):
    path = tmp_path / "steps.jsonl"
    log = RotatingJsonl(str(path), max_bytes=2048, backups=2)
    for i in range(500):
        log.write({"step": i, "k": i % 4})
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["steps.jsonl", "steps.jsonl.1", "steps.jsonl.2"]
    for p in tmp_path.iterdir():
        assert p.stat().st_size <= 2048
    last = [json.loads(x) for x in path.read_text().splitlines()][-1]
    assert last["step"] == 499 and log.errors == 0


def test_log_write_failures_are_logged_once_and_again_when_they_recover(tmp_path, caplog):
    log = RotatingJsonl("/proc/banditk-steps.jsonl", max_bytes=1 << 20, backups=1)
    with caplog.at_level(logging.WARNING, logger="vllm.banditk"):
        for i in range(5):
            log.write({"step": i})
        assert log.errors == 5
        assert [r.levelname for r in caplog.records] == ["ERROR"]
        assert "cannot be written" in caplog.records[0].getMessage()
        log.path = str(tmp_path / "steps.jsonl")  # the operator fixes the folder
        log.write({"step": 5})
        log.write({"step": 6})
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "written again after 5 failed writes" in caplog.records[1].getMessage()
    log.close()
    assert [json.loads(x)["step"] for x in (tmp_path / "steps.jsonl").read_text().splitlines()] == [5, 6]


def test_per_position_counts_are_the_position_by_position_tally():
    """Counting each verification once by (drafted, accepted) gives what a tally of every
    position of every verification gives."""
    import numpy as np

    rng = np.random.default_rng(0)
    k = 4
    t = Telemetry(k_max=k, request_history=2)
    drafted_pp, accepted_pp, reached_pp = [0] * k, [0] * k, [0] * k
    for _ in range(300):
        verified = []
        for r in range(int(rng.integers(1, 9))):
            d = int(rng.integers(0, k + 3))  # above K_max too: counted up to K_max
            a = int(rng.integers(0, d + 1))
            verified.append((f"r{r}", d, a))
            if d <= 0:
                continue
            dd, aa = min(d, k), min(a, min(d, k))
            for i in range(dd):
                drafted_pp[i] += 1
            for i in range(aa):
                accepted_pp[i] += 1
            for i in range(aa + 1 if aa < dd else dd):
                reached_pp[i] += 1
        t.observe_requests(verified)
    assert t.drafted_per_position.tolist() == drafted_pp
    assert t.accepted_per_position.tolist() == accepted_pp
    assert t.reached_per_position.tolist() == reached_pp


def test_request_history_is_off_by_default_and_the_counts_still_add_up():
    t = Telemetry(k_max=2)
    t.observe_requests([("a", 2, 1), ("b", 1, 1)])
    assert t.num_tracked_requests == 0 and t.request_history("a") == []
    assert (t.num_drafts, t.num_draft_tokens, t.num_accepted_tokens) == (2, 3, 2)
    assert t.accepted_per_position.tolist() == [2, 0]


def test_a_step_counted_per_pair_adds_up_as_its_requests_do():
    """The runtime hands a large batch over as (drafted, accepted) counts: every total and
    per-position count is what the same requests give one by one."""
    rng = np.random.default_rng(3)
    k = 4
    steps = [[(f"r{i}", int(d), int(rng.integers(0, d + 1))) for i, d in enumerate(rng.integers(0, k + 1, 20))]]
    steps.append([("x", 0, 0), ("y", 4, 4)])
    by_request, by_pairs = Telemetry(k), Telemetry(k)
    for verified in steps:
        by_request.observe_requests(verified)
        pairs = [0] * (k + 1) ** 2
        for _, d, a in verified:
            pairs[d * (k + 1) + a] += 1
        by_pairs.observe_pairs(tuple(pairs))
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert getattr(by_pairs, name) == getattr(by_request, name) > 0
    for name in ("drafted_per_position", "accepted_per_position", "reached_per_position"):
        assert getattr(by_pairs, name).tolist() == getattr(by_request, name).tolist()
