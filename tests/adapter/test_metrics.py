"""banditk:* on vLLM's /metrics: the runtime-to-samples mapping (exact values), the carrier in
vLLM's scheduler stats, the stat-logger plugin, and a live ``vllm serve`` scraped against its
telemetry log."""

import json
import logging
import time
import urllib.request
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from banditk.adapter import metrics
from banditk.adapter.policy_factory import build_policy
from banditk.adapter.runtime import GovernorRuntime
from banditk.adapter.settings import parse_settings
from banditk.core.types import StepContext, StepOutcome


def bandit_runtime(k_max=3, **cfg):
    s = parse_settings("bandit", {"bucket_edges": [1, 2, 4, 8], "seed": 0, **cfg}).resolve(
        method="draft_model", k_max=k_max
    )
    return GovernorRuntime(s, build_policy(s))


def by_name(samples, name):
    return {
        tuple(sorted((k, v) for k, v in lab.items() if k not in ("model_name", "engine"))): v
        for n, lab, v in samples
        if n == name
    }


LABELS = {"model_name": "m", "engine": "0"}


def test_mapping_of_telemetry_counts_is_exact():
    rt = bandit_runtime()
    for k in (0, 2, 2, 3, 3, 3):
        rt.telemetry.observe_decision(k, 0.1, 0)
    # positions reached: a (1 of 3 accepted) -> 0, 1; b (3 of 3) -> 0, 1, 2; c (0 of 2) -> 0
    rt.telemetry.observe_requests([("a", 3, 1), ("b", 3, 3), ("c", 2, 0)])
    rt.telemetry.count_error("select")
    rt.telemetry.count_error("select")
    rt.telemetry.count_error("slow")
    rt.last_k = 2
    s = metrics.samples(json.loads(json.dumps(metrics.payload(rt))), LABELS, {"runner": "v1", "cudagraph": "none"})

    assert by_name(s, "banditk:k_chosen_bucket") == {
        (("le", "0.0"),): 1,
        (("le", "1.0"),): 1,
        (("le", "2.0"),): 3,
        (("le", "3.0"),): 6,
        (("le", "+Inf"),): 6,
    }
    assert by_name(s, "banditk:k_chosen_count") == {(): 6}
    assert by_name(s, "banditk:k_chosen_sum") == {(): 0 + 2 + 2 + 3 + 3 + 3}
    assert by_name(s, "banditk:decisions") == {(): 6}
    assert by_name(s, "banditk:k_current") == {(): 2}
    assert by_name(s, "banditk:faults") == {(("kind", "select"),): 2, (("kind", "slow"),): 1}
    assert by_name(s, "banditk:fallback_steps") == {}  # Telemetry.fallbacks not kept (yet): no samples
    rt.telemetry.fallbacks = {"breaker_open": 4, "select": 2}
    s2 = metrics.samples(metrics.payload(rt), LABELS)
    assert by_name(s2, "banditk:fallback_steps") == {(("reason", "breaker_open"),): 4, (("reason", "select"),): 2}
    assert by_name(s, "banditk:drafts_reached") == {
        (("position", "0"),): 3,
        (("position", "1"),): 2,
        (("position", "2"),): 1,
    }
    assert by_name(s, "banditk:drafts_accepted") == {
        (("position", "0"),): 2,
        (("position", "1"),): 1,
        (("position", "2"),): 1,
    }
    assert by_name(s, "banditk:acceptance") == {
        (("position", "0"),): 2 / 3,
        (("position", "1"),): 0.5,
        (("position", "2"),): 1.0,
    }
    info = [lab for n, lab, v in s if n == "banditk:info"]
    assert info == [
        {
            **LABELS,
            "governor": "bandit",
            "drafter_class": "draft_model",
            "k_max": "3",
            "runner": "v1",
            "cudagraph": "none",
        }
    ]
    assert all(lab["model_name"] == "m" and lab["engine"] == "0" for _, lab, _ in s)


def test_mapping_of_the_posterior_matches_the_governor():
    rt = bandit_runtime()
    gov = rt.policy
    for b in (1, 5):  # batch 1 (bucket "1"), then batch 5 (bucket "4-7"): bucket dwell needs a run
        for _ in range(40):
            d = gov.select(StepContext(num_decoding=b, k_max=3, drafter_class="draft_model"))
            gov.observe(d, StepOutcome(np.full(b, d.k), np.full(b, min(d.k, 1)), 0.01 + 0.002 * d.k))
    s = metrics.samples(json.loads(json.dumps(metrics.payload(rt))), LABELS)
    g = gov.mean_goodput()
    assert by_name(s, "banditk:best_k") == {
        (("bucket", "1"),): int(np.argmax(g[0])),
        (("bucket", "4-7"),): int(np.argmax(g[2])),
    }
    good = by_name(s, "banditk:goodput_tokens_per_second")
    assert good == {
        (("bucket", bl), ("k", str(k))): float(g[i, k]) for i, bl in ((0, "1"), (2, "4-7")) for k in range(4)
    }
    a, b = gov.acceptance_params()
    post = by_name(s, "banditk:posterior_acceptance")
    assert post == {(("position", str(i)),): float(a[i] / (a[i] + b[i])) for i in range(3)}
    c = gov.counters()
    assert by_name(s, "banditk:observations") == {(): c["observations"]} and c["observations"] == 80
    assert by_name(s, "banditk:k_changes") == {(): c["switches"]}
    assert by_name(s, "banditk:oscillations") == {(): c["oscillations"]}


def test_policies_without_a_posterior_or_oscillations_leave_those_metrics_out():
    s = parse_settings("fixed:2", {}).resolve(method="ngram", k_max=3)
    rt = GovernorRuntime(s, build_policy(s))
    names = {n for n, _, _ in metrics.samples(metrics.payload(rt), LABELS)}
    assert "banditk:decisions" in names and "banditk:k_chosen_count" in names
    assert not names & {"banditk:best_k", "banditk:goodput_tokens_per_second", "banditk:posterior_acceptance"}
    assert "banditk:oscillations" not in names

    class WithOscillations:
        name = "osc"

        def counters(self):
            return {"switches": 7, "oscillations": 3}

    rt.policy = WithOscillations()
    s = metrics.samples(metrics.payload(rt), LABELS)
    assert by_name(s, "banditk:oscillations") == {(): 3} and by_name(s, "banditk:k_changes") == {(): 7}


def test_bucket_labels():
    edges = [1, 2, 3, 4, 6, 8, 256]
    assert [metrics.bucket_label(edges, i) for i in range(len(edges))] == ["1", "2", "3", "4-5", "6-7", "8-255", "256+"]


def test_grafana_dashboard_reads_only_metrics_banditk_exposes():
    import pathlib
    import re

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "grafana-banditk.json"
    dash = json.loads(path.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {re.sub(r"_(total|bucket|sum|count)$", "", n) for e in exprs for n in re.findall(r"banditk:[a-z_]+", e)}
    assert names and names <= set(metrics.METRICS), names - set(metrics.METRICS)
    shown = {"banditk:k_chosen", "banditk:k_changes", "banditk:oscillations", "banditk:faults"}
    assert shown | {"banditk:goodput_tokens_per_second", "banditk:drafts_accepted"} <= names


# ---- the carrier in vLLM's scheduler stats ------------------------------------------------


def test_payload_survives_vllms_engine_to_frontend_encoding_and_is_taken_out(vllm_cpu):
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    data = metrics.payload(bandit_runtime())
    stats = SchedulerStats(num_kv_fetch_reqs_by_stage={"waiting_to_start": 2})
    metrics.attach(stats, data)
    metrics.attach(stats, data)  # a second attach replaces, never piles up
    got = MsgpackDecoder(EngineCoreOutputs).decode(MsgpackEncoder().encode(EngineCoreOutputs(scheduler_stats=stats)))
    assert metrics.take(got.scheduler_stats) == data
    assert got.scheduler_stats.num_kv_fetch_reqs_by_stage == {"waiting_to_start": 2}  # vLLM's own value untouched
    assert metrics.take(got.scheduler_stats) is None


def test_vllms_logging_logger_ignores_a_payload_it_was_not_meant_to_see(vllm_cpu):
    """Where the banditk logger is not loaded (VLLM_PLUGINS), the payload reaches vLLM's loggers: harmless."""
    from vllm.config import VllmConfig
    from vllm.v1.metrics.loggers import LoggingStatLogger
    from vllm.v1.metrics.stats import SchedulerStats

    stats = SchedulerStats()
    metrics.attach(stats, metrics.payload(bandit_runtime()))
    log = LoggingStatLogger(VllmConfig(), 0)
    log.record(stats, None)
    log.log()  # would raise for a payload in a connector field; the KV-fetch part shows only non-zero values
    assert not any(stats.num_kv_fetch_reqs_by_stage.values())


class FakeScheduler:
    def __init__(self):
        self.busy = True

    def has_unfinished_requests(self):
        return self.busy


def outputs_with_stats():
    return {0: SimpleNamespace(scheduler_stats=SimpleNamespace(num_kv_fetch_reqs_by_stage={}))}


def test_publisher_sends_at_most_every_interval_and_when_idle():
    now = [0.0]
    pub = metrics.Publisher(interval_s=1.0, clock=lambda: now[0])
    rt, sched = bandit_runtime(), FakeScheduler()
    sent = []
    for t in (0.0, 0.3, 0.9, 1.0, 1.5, 2.2):
        now[0] = t
        out = outputs_with_stats()
        pub.publish(rt, sched, out)
        sent.append(metrics.take(out[0].scheduler_stats) is not None)
    assert sent == [True, False, False, True, False, True]
    now[0], sched.busy = 2.3, False  # the engine ran dry: the final state goes out at once
    out = outputs_with_stats()
    pub.publish(rt, sched, out)
    assert metrics.take(out[0].scheduler_stats)["decisions"] == 0
    pub.publish(rt, sched, {})  # stats off: nothing to attach, nothing raised


def test_publisher_is_off_where_vllm_cannot_carry_the_payload(vllm_cpu, monkeypatch, caplog):
    assert metrics.carrier_supported()  # vLLM 0.32: dict[str, int]
    assert metrics.Publisher.for_this_vllm().enabled
    monkeypatch.setattr(metrics, "CARRIER_FIELD", "kv_connector_stats")  # dict[str, Any]: refused
    assert not metrics.carrier_supported()
    monkeypatch.setattr(metrics, "CARRIER_FIELD", "no_such_field")
    with caplog.at_level(logging.WARNING, logger="vllm.banditk"):
        pub = metrics.Publisher.for_this_vllm()
    assert not pub.enabled and "banditk:* metrics are off" in caplog.text
    out = outputs_with_stats()
    pub.publish(bandit_runtime(), FakeScheduler(), out)
    assert out[0].scheduler_stats.num_kv_fetch_reqs_by_stage == {}


def test_publisher_never_raises_and_logs_once(caplog):
    pub = metrics.Publisher(interval_s=0.0)
    broken = SimpleNamespace(telemetry=None)
    with caplog.at_level(logging.ERROR, logger="vllm.banditk"):
        for _ in range(3):
            pub.publish(broken, FakeScheduler(), outputs_with_stats())
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "metrics payload failed" in caplog.records[0].getMessage()


# ---- the stat-logger plugin ---------------------------------------------------------------


@pytest.fixture(autouse=True)
def _unregister_collector():
    """Leave the process-wide Prometheus registry as it was (later tests start engines here)."""
    yield
    if metrics._collector is not None:
        from prometheus_client import REGISTRY

        REGISTRY.unregister(metrics._collector)
        metrics._collector = None


def fake_vllm_config(governed=True):
    return SimpleNamespace(
        additional_config={"banditk": {"governor": "bandit"}} if governed else {},
        model_config=SimpleNamespace(served_model_name="tiny"),
        compilation_config=SimpleNamespace(cudagraph_mode=SimpleNamespace(name="PIECEWISE")),
        use_v2_model_runner=False,
    )


def test_stat_logger_exposes_the_payload_on_the_default_registry(vllm_cpu):
    from prometheus_client import REGISTRY, generate_latest
    from vllm.v1.metrics.loggers import AggregateStatLoggerBase, load_stat_logger_plugin_factories

    cls = metrics.BanditkStatLogger
    assert cls in load_stat_logger_plugin_factories()  # the installed entry point resolves to it
    assert issubclass(cls, AggregateStatLoggerBase)
    log = cls(fake_vllm_config(), [0])
    rt = bandit_runtime()
    for k in (1, 3, 3):
        rt.telemetry.observe_decision(k, 0.0, 0)
    stats = SimpleNamespace(num_kv_fetch_reqs_by_stage={"in_progress": 1})
    metrics.attach(stats, metrics.payload(rt))
    log.record(stats, None, engine_idx=0)
    assert stats.num_kv_fetch_reqs_by_stage == {"in_progress": 1}
    text = generate_latest(REGISTRY).decode()
    assert 'banditk:decisions_total{engine="0",model_name="tiny"} 3.0' in text
    assert 'banditk:k_chosen_bucket{engine="0",le="2.0",model_name="tiny"} 1.0' in text
    assert 'banditk:k_chosen_count{engine="0",model_name="tiny"} 3.0' in text
    assert "# TYPE banditk:k_chosen histogram" in text
    assert 'cudagraph="piecewise"' in text and 'runner="v1"' in text
    log.record(SimpleNamespace(num_kv_fetch_reqs_by_stage={"banditk:{not json": 0}), None)  # logged, not raised
    cls(fake_vllm_config(), [0])  # a second logger in one process replaces the first collector
    assert "banditk:decisions_total" not in generate_latest(REGISTRY).decode()


def test_stat_logger_is_inert_without_a_governor(vllm_cpu):
    log = metrics.BanditkStatLogger(fake_vllm_config(governed=False), [0])
    assert log.collector is None
    stats = SimpleNamespace(num_kv_fetch_reqs_by_stage={})
    metrics.attach(stats, metrics.payload(bandit_runtime()))
    log.record(stats, None)
    assert len(stats.num_kv_fetch_reqs_by_stage) == 1  # untouched


# ---- live: vllm serve on CPU, /metrics against the telemetry log --------------------------


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("banditk:", "vllm:spec_decode")):
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels] = float(value)
    return out


def metric(m, name, **labels):
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total, found = 0.0, False
    for key, v in m.items():
        n, _, lab = key.partition("{")
        if n == name and all(f'{k}="{v2}"' in lab for k, v2 in labels.items()):
            total, found = total + v, True
    return total if found else None


@pytest.mark.vllm
def test_live_server_metrics_agree_with_the_telemetry_log(vllm_cpu, tiny_pair, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from banditk.testing.engines import CPU_ENV
    from lab.live.server import VllmServer

    log_path = tmp_path / "steps.jsonl"
    spec = {
        "method": "draft_model",
        "model": tiny_pair.draft,
        "num_speculative_tokens": 3,
        "governor": "bandit",
        "governor_config": {"telemetry_log": str(log_path), "seed": 0},
    }
    env = {**CPU_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512"]
    args += ["--kv-cache-memory-bytes", str(64 << 20), "--max-num-seqs", "8", "--seed", "0"]
    server = VllmServer(tiny_pair.target, tmp_path / "server.log", spec, env=env, args=args)
    prompts = ["def main(argv):", "import os", "class A:", "x = 1", "for i in range(3):", "return None"]

    def complete(prompt):
        body = {"model": tiny_pair.target, "prompt": prompt, "max_tokens": 32, "temperature": 0.0, "ignore_eos": True}
        req = urllib.request.Request(
            f"{server.base_url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    with server:
        with ThreadPoolExecutor(3) as pool:  # batches of 1..3: more than one bucket
            list(pool.map(complete, prompts))
        complete(prompts[0])
        # The engine ran dry, so its last payload is the final state; wait until it is in.
        deadline, m = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            prev, m = m, scrape(f"{server.base_url}/metrics")
            if m and m == prev:
                break
            time.sleep(1.0)
    rows = [json.loads(x) for x in log_path.read_text().splitlines()[1:]]
    rows = [r for r in rows if "event" not in r]
    assert rows, server.log_tail()

    decisions = metric(m, "banditk:decisions_total")
    assert decisions is not None, f"no banditk:* metrics on /metrics:\n{server.log_tail()}"
    # Every credited step is a log line and an observation; every decision is one histogram count.
    assert metric(m, "banditk:observations_total") == len(rows)
    assert metric(m, "banditk:k_chosen_count") == decisions
    assert metric(m, "banditk:k_chosen_bucket", le="+Inf") == decisions
    assert 0 <= decisions - len(rows) <= 2 * (len(prompts) + 1)  # decisions still in flight when a burst ended
    hist = Counter(r["k"] for r in rows)
    ks = [metric(m, "banditk:k_chosen_bucket", le=f"{k}.0") for k in range(4)]
    per_k = [ks[0]] + [b - a for a, b in zip(ks, ks[1:])]
    assert all(per_k[k] >= hist.get(k, 0) for k in range(4)), (per_k, hist)
    assert metric(m, "banditk:k_chosen_sum") == sum(k * n for k, n in enumerate(per_k))
    # Acceptance: the same counts as vLLM's own spec-decoding metrics, and close to the log's.
    compared = 0
    for pos in range(3):
        ours = metric(m, "banditk:drafts_accepted_total", position=str(pos))
        assert ours == metric(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(pos))
        succ = sum(r["acc_s"][pos] for r in rows)
        fail = sum(r["acc_f"][pos] for r in rows)
        if succ + fail >= 20:
            compared += 1
            assert abs(metric(m, "banditk:acceptance", position=str(pos)) - succ / (succ + fail)) < 0.1, (pos, m)
    assert compared >= 1, (rows[:5], m)
    assert metric(m, "banditk:info", runner="v1", cudagraph="none", governor="bandit") == 1.0
    assert metric(m, "banditk:best_k") is not None and metric(m, "banditk:goodput_tokens_per_second") > 0
    assert metric(m, "banditk:faults_total") is None  # a healthy run has no fault samples
