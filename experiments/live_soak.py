"""A long live soak: the governed `vllm serve` on CPU under open-loop traffic for --minutes.

First an ungoverned reference: the tiny local model pair served with vLLM's own static K
(num_speculative_tokens = K_max, no governor) answers a fixed set of greedy probe prompts
(twice, to check it is stable). Then the same models with the governor (bandit; snapshot
every second, telemetry log) take seeded Poisson traffic for --minutes: short (~32-token)
and long (~384-token) prompts, some streamed, and some streamed ones cancelled mid-stream
by closing the connection. Every --probe-interval seconds the probes run again, greedy,
amid the traffic; their texts must equal the reference's. Meanwhile the RSS of the
engine-core process (and its worker) is sampled, and every rewrite of the snapshot is
loaded with banditk's own loader.

At the end: one more probe round and a check that the engine drained (aborted requests
released), then the server stops. Counts: requests sent / completed / aborted / HTTP
errors; probes identical / total; governor fallbacks (telemetry log "event": "fallback"),
faults (/metrics banditk:faults_total, server-log lines where banditk reports an error);
snapshot rewrites seen and load failures; *.tmp files orphaned in the snapshot folder;
RSS samples and a least-squares slope (MB/hour) over the second half. The probes are
also checked against the cyclic target's known greedy chain (an answer key no server sets).

The traffic is greedy by default. With sampled traffic (--temperature 1) in the batch,
vLLM 0.32 on CPU answered the greedy probes differently from its own quiet reference even
with its own static K and no governor (--policy fixed:3 runs that control), so a probe
mismatch there is not the governor's.

Writes <out>/report.json (atomically, with provenance) and <out>/rss.png; server logs,
telemetry and the snapshot under <out>/runs/. A progress line every ~30 s.

    python experiments/live_soak.py                       # 30 minutes (about 33 with start-up)
    python experiments/live_soak.py --minutes 1 --out /tmp/soak-try
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from lab.live.soak.run import machine, plot_rss, run_soak  # noqa: E402
from lab.live.soak.traffic import SoakConfig  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    d = SoakConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=d.minutes, help="traffic duration (default %(default)s)")
    p.add_argument(
        "--out", type=Path, default=ROOT / "results" / "live-soak", help="report folder (default %(default)s)"
    )
    p.add_argument("--rate", type=float, default=d.rate, help="Poisson arrival rate, requests/s (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="traffic seed (and the governor's) (default %(default)s)")
    p.add_argument("--long-fraction", type=float, default=d.long_fraction, help="long prompts (default %(default)s)")
    p.add_argument("--short-len", type=int, default=d.short_len, help="short prompt tokens (default %(default)s)")
    p.add_argument("--long-len", type=int, default=d.long_len, help="long prompt tokens (default %(default)s)")
    p.add_argument("--min-tokens", type=int, default=d.min_tokens, help="least max_tokens (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=d.max_tokens, help="most max_tokens (default %(default)s)")
    p.add_argument(
        "--temperature", type=float, default=d.temperature, help="traffic temperature (default %(default)s; see below)"
    )
    p.add_argument("--stream-fraction", type=float, default=d.stream_fraction, help="streamed (default %(default)s)")
    p.add_argument(
        "--abort-fraction", type=float, default=d.abort_fraction, help="of streamed, cancelled (default %(default)s)"
    )
    p.add_argument("--probe-interval", type=float, default=d.probe_interval_s, help="s between probe rounds")
    p.add_argument("--probes", type=int, default=d.probe_count, help="probe prompts (default %(default)s)")
    p.add_argument("--probe-tokens", type=int, default=d.probe_tokens, help="probe max_tokens (default %(default)s)")
    p.add_argument("--rss-interval", type=float, default=d.rss_interval_s, help="s between RSS samples")
    p.add_argument(
        "--policy",
        default="bandit",
        help="the soaked server's policy (default bandit); fixed:K_MAX runs the same soak ungoverned, as a control",
    )
    p.add_argument("--k-max", type=int, default=d.k_max, help="largest K; the reference's static K (default 3)")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--progress", type=float, default=d.progress_s, help="s between progress lines (default 30)")
    p.add_argument("--agreement", type=float, default=0.8, help="draft/target agreement of the tiny pair")
    p.add_argument("--models", type=Path, default=ROOT / ".cache" / "live-models", help="where tiny models are built")
    a = p.parse_args(argv)
    if a.long_len + a.max_tokens > 512:
        p.error(f"--long-len + --max-tokens must fit max_model_len 512, got {a.long_len + a.max_tokens}")
    if not 1 <= a.min_tokens <= a.max_tokens or a.rate <= 0 or a.minutes <= 0:
        p.error("need 1 <= --min-tokens <= --max-tokens, --rate > 0 and --minutes > 0")
    return a


def config_of(a: argparse.Namespace) -> SoakConfig:
    return SoakConfig(
        minutes=a.minutes,
        rate=a.rate,
        seed=a.seed,
        long_fraction=a.long_fraction,
        short_len=a.short_len,
        long_len=a.long_len,
        min_tokens=a.min_tokens,
        max_tokens=a.max_tokens,
        temperature=a.temperature,
        stream_fraction=a.stream_fraction,
        abort_fraction=a.abort_fraction,
        probe_interval_s=a.probe_interval,
        probe_count=a.probes,
        probe_tokens=a.probe_tokens,
        rss_interval_s=a.rss_interval,
        k_max=a.k_max,
        max_num_seqs=a.max_num_seqs,
        progress_s=a.progress,
        policy=a.policy,
    )


def main(argv=None) -> int:
    a = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C, so the servers this started are stopped.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from banditk.testing.tiny_models import build_pair

    pair = build_pair(a.models, agreement=a.agreement)
    cfg = config_of(a)
    body = run_soak(pair.target, pair.draft, cfg, a.out, log=lambda s: print(s, flush=True), next_token=pair.next_token)
    report = {
        "experiment": "live soak (issue 20, item 7)",
        **body,
        "setup": {**body["setup"], "agreement": a.agreement},
        "machine": machine(),
        "provenance": provenance(),
        "plots": ["rss.png"],
    }
    plot_rss(report, a.out / "rss.png")
    atomic_write_text(a.out / "report.json", json.dumps(report, indent=1) + "\n")
    s = report["summary"]
    print(
        f"served {s['requests_served']} requests ({s['requests_aborted']} aborted, {s['http_errors']} HTTP errors); "
        f"probes {s['probes_identical']}/{s['probes_total']} identical; fallbacks {s['fallbacks']}, "
        f"faults {s['faults']}; snapshots seen {s['snapshot_writes_seen']}, load failures "
        f"{s['snapshot_load_failures']}, orphaned tmp {s['orphaned_tmp_files']}; engine-core RSS slope "
        f"{s['engine_core_rss_slope_mb_per_hour']} MB/h (second half)"
    )
    print(f"wrote {a.out / 'report.json'} and {a.out / 'rss.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
