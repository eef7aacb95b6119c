"""PNG plots of a protocol report (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_report(report: dict, out_dir: str | Path) -> list[str]:
    """Write throughput/p99 TPOT vs concurrency, regret curves and the K trace; return the paths."""
    plt = _plt()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[str] = []
    res = report["results"]
    labels = [p for p in res if p.startswith("c") and p[1:].isdigit()]
    cs = [int(p[1:]) for p in labels]
    pols = report["protocol"]["policies"]
    modes = {p: (m or {}).get("server_mode") for p, m in report.get("server_modes", {}).items()}
    for metric, fname, ylabel in (
        ("throughput_tok_s", "throughput_vs_concurrency.png", "output tok/s"),
        ("tpot_p99_s", "p99_tpot_vs_concurrency.png", "p99 TPOT (s)"),
    ):
        if not labels:
            break
        fig, ax = plt.subplots(figsize=(8, 5))
        for p in pols:
            if any(p not in res[lab] for lab in labels):
                continue
            med = [res[lab][p][metric]["median"] for lab in labels]
            lo = [res[lab][p][metric]["min"] for lab in labels]
            hi = [res[lab][p][metric]["max"] for lab in labels]
            if any(m is None for m in med):
                continue
            twin = "@" in p  # a mode twin (bandit@PIECEWISE): informational
            style = ":" if twin else ("-" if p in ("bandit", "bandit+prior", "oracle") else "--")
            lw = 2.5 if p.startswith("bandit") else 1.2
            label = f"{p} ({modes[p]})" if modes.get(p) else p
            ax.plot(cs, med, style, lw=lw, marker="o", ms=3, label=label)
            ax.fill_between(cs, lo, hi, alpha=0.12)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{report['scenario_name']}: {ylabel} (median, min-max over seeds)")
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        paths.append(str(out / fname))
    if report.get("regret"):
        fig, ax = plt.subplots(figsize=(8, 5))
        for p, d in report["regret"].items():
            for i, r in enumerate(d["runs"]):
                ax.plot(
                    r["step"],
                    [100 * v for v in r["regret_fraction"]],
                    lw=1.2,
                    alpha=0.8,
                    color=f"C{list(report['regret']).index(p)}",
                    label=p if i == 0 else None,
                )
        ax.axhline(3.0, color="k", ls=":", lw=1, label="3% threshold (flat prior)")
        ax.set_xlabel("step")
        ax.set_ylabel("cumulative regret, % of oracle tokens")
        ax.set_title(f"{report['scenario_name']}: regret against the oracle")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "regret_curves.png", dpi=110)
        plt.close(fig)
        paths.append(str(out / "regret_curves.png"))
    if report.get("convergence"):
        conv = report["convergence"]
        fig, axes = plt.subplots(len(conv), 1, figsize=(10, 2.2 * len(conv) + 0.6), sharex=True, squeeze=False)
        for ax, (p, d) in zip(axes[:, 0], conv.items()):
            ax.plot(d["k_star"], lw=0.6, color="0.6", label="oracle K")
            ax.plot(d["k"], lw=0.8, label=f"{p} K")
            ax2 = ax.twinx()
            ax2.plot(d["n_dec"], lw=0.6, color="C3", alpha=0.5)
            ax2.set_ylabel("decoding", color="C3", fontsize=7)
            ax.set_ylabel("K")
            ax.set_title(f"{p}: settle {d['steps_to_settle']} steps", fontsize=8)
            ax.legend(fontsize=7, loc="upper left")
        axes[-1, 0].set_xlabel("step")
        fig.tight_layout()
        fig.savefig(out / "k_trace.png", dpi=110)
        plt.close(fig)
        paths.append(str(out / "k_trace.png"))
    return paths
