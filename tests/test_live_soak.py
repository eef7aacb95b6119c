"""The live soak (experiments/live_soak.py, lab/live/soak/): its pure pieces, the client
against a fake SSE server, and a short real run of the governed `vllm serve` on CPU."""

import importlib.util
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from lab.live.soak import faults, memory, probes, traffic
from lab.live.soak.memory import rss_slope_mb_per_hour
from lab.live.soak.traffic import Arrival, SoakConfig, poisson_schedule

ROOT = Path(__file__).resolve().parents[1]


# ---- pure pieces ------------------------------------------------------------------------------


def test_poisson_schedule_is_reproducible_by_seed_and_shaped_as_configured():
    cfg = SoakConfig(rate=4.0, seed=7, long_fraction=0.3, stream_fraction=0.6, abort_fraction=0.3)
    a, b = poisson_schedule(cfg, 600.0), poisson_schedule(cfg, 600.0)
    assert a == b
    assert a != poisson_schedule(SoakConfig(rate=4.0, seed=8), 600.0)
    t = np.array([x.t for x in a])
    assert np.all(np.diff(t) > 0) and t[0] >= 0 and t[-1] < 600
    assert abs(len(a) / 600.0 - 4.0) < 0.4  # 2400 arrivals expected; sd ~49
    gaps = np.diff(t)
    assert abs(gaps.mean() - 0.25) < 0.02 and abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # exponential: CV 1
    longs = [x for x in a if x.kind == "long"]
    assert abs(len(longs) / len(a) - 0.3) < 0.05
    assert {len(x.prompt) for x in a} == {cfg.short_len, cfg.long_len}
    assert all(traffic.FIRST_TOKEN <= tok < cfg.vocab_size for x in a[:50] for tok in x.prompt)
    assert all(cfg.min_tokens <= x.max_tokens <= cfg.max_tokens for x in a)
    assert max(len(x.prompt) + x.max_tokens for x in a) <= 512
    aborts = [x for x in a if x.abort_after is not None]
    assert all(x.stream and 1 <= x.abort_after < x.max_tokens for x in aborts)
    assert abs(len(aborts) / len(a) - 0.6 * 0.3) < 0.04
    # A shorter run is a prefix of a longer one with the same seed.
    short = poisson_schedule(cfg, 60.0)
    assert a[: len(short)] == short


def test_slope_is_exact_on_a_line_and_uses_the_second_half_only():
    t = np.arange(0, 1801, 5.0)
    assert rss_slope_mb_per_hour(t, 500 + 0.01 * t) == pytest.approx(36.0, abs=1e-9)
    # Steep growth in the first half (warm-up), flat after: the second half's slope is 0.
    y = np.where(t < 900, 400 + 0.1 * t, 490.0)
    assert rss_slope_mb_per_hour(t, y) == pytest.approx(0.0, abs=1e-9)
    assert rss_slope_mb_per_hour(t, y, second_half=False) > 0
    y_nan = (500 + 0.01 * t).copy()
    y_nan[-3] = np.nan  # a missed sample is skipped
    assert rss_slope_mb_per_hour(t, y_nan) == pytest.approx(36.0, abs=1e-9)
    assert rss_slope_mb_per_hour([0, 1], [1, 2]) is None


def test_probe_comparison_and_prompts_are_fixed():
    cfg = SoakConfig(probe_count=4)
    assert probes.probe_prompts(cfg) == probes.probe_prompts(SoakConfig(probe_count=4, seed=99))
    assert [len(p) for p in probes.probe_prompts(cfg)] == [32, 384, 32, 384]
    assert probes.compare_probes(["a", "b"], ["a", "b"]) == {"identical": 2, "different": 0, "failed": 0, "total": 2}


def test_telemetry_faults_reads_rotated_parts(tmp_path):
    log = tmp_path / "t.jsonl"
    head = json.dumps({"trace": "banditk/trace", "version": 1}) + "\n"
    (tmp_path / "t.jsonl.1").write_text(head + '{"k": 1}\n{"event": "fallback", "kind": "slow", "k": 0}\n')
    log.write_text(head + '{"k": 2}\n{"k": 3}\n{"trunc')
    got = faults.telemetry_faults(log)
    assert got == {"steps": 3, "fallbacks": 1, "fallback_kinds": {"slow": 1}, "malformed_lines": 1, "files": 2}


def test_server_log_errors_and_orphans(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(EngineCore pid=1) INFO 12-02 10:50:15 [runtime.py:337] banditk steps=516 errors={'slow': 1}\n"
        "(EngineCore pid=1) ERROR 12-02 10:50:07 [runtime.py:367] banditk: select failed (ValueError: x); "
        "using fallback K=0.\n"
        "(EngineCore pid=1) Traceback (most recent call last):\n"
    )
    got = faults.server_log_errors(log)
    assert got["banditk_error_lines"] == 1 and got["tracebacks"] == 1 and got["by_kind"] == {"select": 1}
    (tmp_path / ".snapshot.json.123.abc.tmp").write_text("{")
    (tmp_path / "snapshot.json").write_text("{}")
    assert faults.orphaned_tmp_files(tmp_path) == [".snapshot.json.123.abc.tmp"]
    assert faults.persistent_tmp_files(tmp_path, wait_s=0.01) == [".snapshot.json.123.abc.tmp"]
    assert faults.describe_orphans(tmp_path, [".snapshot.json.123.abc.tmp"], tmp_path / "snapshot.json") == [
        {"name": ".snapshot.json.123.abc.tmp", "writer_pid": 123, "loadable": False, "same_as_snapshot": False}
    ]


def test_rss_of_this_process_and_the_proc_fallback(monkeypatch):
    mine = memory.rss_mb(os.getpid())
    assert mine is not None and mine > 1
    import builtins

    real_import = builtins.__import__

    def no_psutil(name, *args, **kw):
        if name == "psutil":
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_psutil)
    via_proc = memory.rss_mb(os.getpid())
    assert via_proc == pytest.approx(mine, rel=0.2)
    assert memory.rss_mb(2**22 + 12345) is None


def test_snapshot_watcher_counts_rewrites_and_bad_files(tmp_path):
    path = tmp_path / "snapshot.json"
    w = faults.SnapshotWatcher(path)
    w.check()
    assert w.writes_seen == 0
    path.write_text("{not json")
    w.check()
    w.check()  # unchanged: not counted again
    assert (w.writes_seen, w.load_failures) == (1, 1)


# ---- the client against a fake streaming server ------------------------------------------------


class FakeCompletions(BaseHTTPRequestHandler):
    disconnects = 0

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["max_tokens"] == 13:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b'{"error": "bad"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body.get("stream") else "application/json")
        self.end_headers()
        if not body.get("stream"):
            self.wfile.write(json.dumps({"choices": [{"text": "abc", "token_ids": [1, 2, 3]}]}).encode())
            return
        try:
            for i in range(body["max_tokens"]):
                self.wfile.write(f"data: {json.dumps({'choices': [{'text': str(i)}]})}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.02)
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            type(self).disconnects += 1


@pytest.fixture
def fake_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompletions)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_send_completes_aborts_and_reports_errors(fake_server):
    p = (5, 6, 7)
    assert traffic.send(fake_server, "m", Arrival(0, p, 5, stream=True, abort_after=None)) == "completed"
    assert traffic.send(fake_server, "m", Arrival(0, p, 5, stream=False, abort_after=None)) == "completed"
    assert traffic.send(fake_server, "m", Arrival(0, p, 13, stream=False, abort_after=None)) == "error"
    before = FakeCompletions.disconnects
    t = time.monotonic()
    assert traffic.send(fake_server, "m", Arrival(0, p, 200, stream=True, abort_after=3)) == "aborted"
    assert time.monotonic() - t < 2.0  # hung up early, did not read the 200 chunks
    deadline = time.monotonic() + 5
    while FakeCompletions.disconnects == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert FakeCompletions.disconnects == before + 1  # the server saw the connection close
    assert traffic.complete(fake_server, "m", p, 5) == {"text": "abc", "token_ids": [1, 2, 3]}


def test_traffic_plays_a_schedule_open_loop(fake_server):
    cfg = SoakConfig(rate=20.0, seed=3, max_tokens=20, abort_fraction=0.5)
    schedule = poisson_schedule(cfg, 2.0)
    load = traffic.Traffic(fake_server, "m", schedule, workers=64).start(time.monotonic())
    time.sleep(2.0)
    load.finish(timeout_s=30)
    c = load.counts
    assert c.sent == len(schedule) and c.http_errors == 0 and c.in_flight == 0
    assert c.aborted == sum(a.abort_after is not None for a in schedule) > 0
    assert c.completed == len(schedule) - c.aborted
    d = c.as_dict()
    assert d["sent"] == c.sent and d["in_flight"] == 0 and sum(d["sent_by_kind"].values()) == c.sent


# ---- a short real run -------------------------------------------------------------------------


@pytest.mark.vllm
def test_short_live_soak_of_the_governed_server(tmp_path):
    pytest.importorskip("vllm")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("live_soak", ROOT / "experiments" / "live_soak.py")
    live_soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(live_soak)
    models = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path / "models")
    out = tmp_path / "soak"
    argv = ["--minutes", "1.5", "--out", str(out), "--models", models, "--rate", "2"]
    argv += ["--probe-interval", "20", "--rss-interval", "1", "--progress", "30"]
    assert live_soak.main(argv) == 0
    check_short_soak(out)


def check_short_soak(out: Path) -> None:
    """What a short soak's report must show (also usable on a report from a manual run)."""
    r = json.loads((out / "report.json").read_text())
    assert (out / "rss.png").stat().st_size > 0
    s, req, probes, faults, snaps = r["summary"], r["requests"], r["probes"], r["faults"], r["snapshots"]
    # Traffic: all of it answered, some cancelled mid-stream, no HTTP error, nothing left running.
    assert req["sent"] == req["scheduled"] > 50
    assert req["http_errors"] == 0 and req["in_flight"] == 0
    assert req["completed"] + req["aborted"] == req["sent"]
    assert req["aborted"] > 0 and req["sent_by_kind"]["long"] > 0 and req["sent_by_kind"]["short"] > 0
    assert r["server_after_traffic"] == {**r["server_after_traffic"], "final_probes_answered": True, "drained": True}
    # Greedy probes amid the traffic: the same texts as vLLM's own static K.
    assert probes["reference_stable"]
    assert probes["reference_oracle_identical"] == r["setup"]["probe_count"]  # the cyclic model's greedy chain
    assert probes["oracle_identical"] == probes["total"]
    assert probes["rounds"] >= 3 and probes["failed"] == 0
    assert s["probes_identical"] == s["probes_total"] > 0, probes["mismatches"]
    assert probes["all_identical"]
    # The governor ran without a fault or a fallback, and its snapshots stayed loadable. A `slow`
    # fault is one step's wall time over slow_call_ms, which an oversubscribed CI machine can cause
    # on its own: it is tolerated as long as the breaker never opened (no fallback step). The
    # governor's speed is measured in experiments/bench_overhead.py, not here.
    assert faults["telemetry_steps"] > 100
    assert s["fallbacks"] == 0, faults
    assert {kind: n for kind, n in s["faults_by_kind"].items() if kind != "slow" and n} == {}, faults
    assert faults["server_log_tracebacks"] == 0, faults["server_log_examples"]  # while serving
    assert faults["server_log_banditk_error_lines_at_shutdown"] == 0
    assert snaps["writes_seen"] >= 20 and snaps["load_failures"] == 0, snaps
    assert snaps["governor_observations_at_last_load"] > 0
    # No write was left half-done while the server ran. At shutdown vLLM SIGKILLs the engine core
    # soon after SIGTERM, which can land inside the final snapshot's write: that one write may stay
    # behind under its temporary name (the next writer removes it); snapshot.json itself stays whole.
    assert snaps["orphaned_tmp_files_before_stop"] == [], snaps
    assert len(snaps["orphans"]) <= 1, snaps["orphans"]
    from banditk.governor.snapshot import load_snapshot

    load_snapshot(out / "runs" / "soak" / "snapshot" / "snapshot.json")
    # Memory: the engine core was found and sampled all along.
    rss = r["rss"]
    assert "engine_core" in rss["pids"]
    assert len(rss["samples"]) >= 60 and all(x.get("engine_core_mb") for x in rss["samples"])
    assert isinstance(rss["slope_mb_per_hour_second_half"]["engine_core"], float)
    assert r["provenance"]["sources_sha256"] and r["provenance"]["commit"]
    assert r["setup"]["speculative_config"]["governor"] == "bandit"
    assert "governor" not in r["setup"]["reference_speculative_config"]
    assert r["durations"]["traffic_s"] >= 90
