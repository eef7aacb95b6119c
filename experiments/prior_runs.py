"""The runs the shipped priors' report and the CPU prior share: fitting a trace, the governed
server's simulator arguments, a governed run's regret, and its plot. One module, so that
experiments/make_priors.py and experiments/cpu_prior.py import it and not each other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.governor import BanditGovernor  # noqa: E402
from banditk.io.priorfile import load_prior_file  # noqa: E402


def governed_server(scn) -> dict:
    """Simulator arguments of the server banditk's plugin gives a governed policy on the
    scenario's hardware (MRv2 FULL on a GPU): priors are fitted to, and judged on, the step
    times ``bandit+prior`` will meet."""
    from banditk.sim.policies import build_policy

    built = build_policy("bandit", scn)
    return {
        "speculation": True,
        "dynamic": True,
        "graph_mode": built.graph_mode,
        "graph_ladders": built.graph_ladders,
    }


def fit(trace: Path, out: Path, hardware: str, log: Path) -> tuple[bool, str, bool]:
    """Fit; when the diagnostics refuse, fit again with --force and say so (returns ok, log tail, forced).

    The simulator's roofline (max of memory and compute time, MoE experts touched) is not
    linear in the latency model's features, so its posterior predictive check can fail:
    the prior's cells still carry the measured means per (bucket, K), which is what the
    governor uses where it has them; the forced flag lands in the prior's provenance.
    """
    cmd = [sys.executable, "-m", "banditk.tools.cli", "fit", str(trace), "--hardware", hardware, "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    forced = False
    if r.returncode != 0 and "refused" in r.stderr:
        first = r.stderr[r.stderr.rfind("refused") :][:600]
        r = subprocess.run([*cmd, "--force"], capture_output=True, text=True)
        forced = True
        log.write_text(f"first fit refused: {first}\n\n" + r.stdout + r.stderr)
    else:
        log.write_text(r.stdout + r.stderr)
    tail = r.stderr[r.stderr.rfind("refused") :][:600] if forced else (r.stdout + r.stderr)[-600:]
    return r.returncode == 0, tail, forced


def governed_regret(scn, prior_path: Path | None, seed: int, steps: int, governor_config: dict | None = None) -> dict:
    """Bandit (flat, or from ``prior_path``) on a scenario: regret fraction against the
    oracle over ``steps`` steps, and its cumulative curve at 200 points."""
    from banditk.sim.engine import Simulator

    prior = load_prior_file(prior_path, drafter_class=scn.drafter_class, k_max=scn.k_max) if prior_path else None
    cfg = GovernorConfig.from_dict(
        {**(governor_config or {}), "drafter_class": scn.drafter_class, "k_max": scn.k_max, "seed": seed}
    )
    trace, _ = Simulator(scn, BanditGovernor(cfg, prior), seed=seed, **governed_server(scn)).run(steps)
    gap = np.cumsum(trace.oracle_tokens - trace.expected_tokens)
    total = float(np.sum(trace.oracle_tokens))
    return {"regret_fraction": float(gap[-1] / total), "curve": (gap[:: steps // 200] / total).tolist()}


def plot_curves(ax, curves: dict, title: str, prior_label: str, steps: int = 20000) -> None:
    """Cumulative regret of the flat and the prior run on one axis."""
    x = np.linspace(0, steps, len(curves["flat"]))
    ax.plot(x, 100 * np.array(curves["flat"]), label="flat prior")
    ax.plot(x, 100 * np.array(curves["prior"]), label=prior_label)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("cum. regret, % of oracle tokens")
    ax.grid(alpha=0.3)
