"""banditk-governed vLLM 0.34.0 on CPU, through the overlay (cpu_overlay.py); prints one JSON line.

Run in a subprocess under ``cpu_overlay.env(overlay)``. Starts in-process ``vllm.LLM`` on a tiny
local target/draft pair (``draft_model``, K_max = 3), greedy:

1. ungoverned (static K = 3, no governor): the reference outputs;
2. governed (``governor="bandit"``): the same prompts, then a scripted policy cycling K through
   3, 1, 0, 2 so that K really changes, recording per step the K the governor wrote into the
   scheduler output and the number of draft tokens each request then verified;
3. ``fixed:0``: whether the drafter's forward still runs at K = 0;
4. the snapshot written at shutdown, and a second governed engine started from it.

Usage: ``python overlay_governed_run.py MODELS_ROOT OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

K_MAX = 3
PROMPTS = ["def main(argv):", "import os\nimport sys", "return None"]  # distinct last tokens
MAX_TOKENS = 16
CYCLE = [3, 1, 0, 2]


def generate(llm, prompts, max_tokens=MAX_TOKENS):
    from vllm import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, sp, use_tqdm=False)]


class Cycle:
    """A policy writing K = CYCLE[i % len] at its i-th call."""

    name = "cycle"

    def __init__(self):
        self.n = 0

    def select(self, ctx):
        from banditk.core.types import Decision

        k = CYCLE[self.n % len(CYCLE)]
        self.n += 1
        return Decision(k=k, bucket=0, num_decoding=ctx.num_decoding, step_id=self.n)

    def observe(self, decision, outcome):
        pass


def record_steps(sch):
    """Wrap ``sch.schedule``: per step that runs the model, the K written and the draft counts verified."""
    steps = []
    orig = sch.schedule

    def schedule(*a, **kw):
        out = orig(*a, **kw)
        if out.total_num_scheduled_tokens > 0:
            steps.append(
                {
                    "k_written": int(out.num_spec_tokens_to_schedule),
                    "verified": sorted(len(v) for v in out.scheduled_spec_decode_tokens.values()),
                    "num_reqs": len(out.num_scheduled_tokens),
                }
            )
        return out

    sch.schedule = schedule
    return steps, lambda: sch.__dict__.pop("schedule", None)


def find_drafter_model(llm):
    """The drafter's torch module (path differs between V1 and Model Runner V2)."""
    from banditk.testing.engines import engine_core

    ex = engine_core(llm).model_executor
    worker = getattr(ex, "driver_worker", None)
    worker = getattr(worker, "worker", worker)
    runner = worker.model_runner
    for name in ("drafter", "speculator"):
        d = getattr(runner, name, None)
        if d is not None and getattr(d, "model", None) is not None:
            return f"{type(runner).__name__}.{name}", d.model
    return f"{type(runner).__name__} (no drafter found: {sorted(vars(runner))[:60]})", None


def main(models_root: str, out_dir: str) -> dict:
    import vllm
    from transformers import AutoTokenizer
    from vllm.triton_utils import HAS_TRITON

    from banditk.policies import make_policy
    from banditk.testing.engines import greedy_chain, metrics_delta, scheduler, spec_metrics, tiny_llm
    from banditk.testing.tiny_models import build_pair

    res: dict = {"vllm_version": vllm.__version__, "vllm_file": vllm.__file__, "timings_s": {}}
    res["has_triton"] = bool(HAS_TRITON)
    res["triton_interpret"] = os.environ.get("TRITON_INTERPRET")
    t = res["timings_s"]
    pair = build_pair(models_root, agreement=0.8)
    tok = AutoTokenizer.from_pretrained(pair.target)
    # The cyclic target's greedy continuation, computed without vLLM.
    res["expected"] = [greedy_chain(pair.next_token, tok(p)["input_ids"][-1], MAX_TOKENS) for p in PROMPTS]
    out = Path(out_dir)
    spec = {"method": "draft_model", "model": pair.draft, "num_speculative_tokens": K_MAX}

    t0 = time.perf_counter()
    with tiny_llm(pair.target, spec) as llm:
        t["start_ungoverned"] = time.perf_counter() - t0
        res["runner"] = find_drafter_model(llm)[0].split(".")[0]
        res["ungoverned_scheduler_cls"] = llm.llm_engine.vllm_config.scheduler_config.scheduler_cls
        res["ungoverned_has_banditk"] = "banditk" in llm.llm_engine.vllm_config.additional_config
        t1 = time.perf_counter()
        m0 = spec_metrics(llm)
        res["ungoverned"] = generate(llm, PROMPTS)
        res["ungoverned_metrics"] = metrics_delta(m0, spec_metrics(llm))
        t["gen_ungoverned"] = time.perf_counter() - t1

    cfg = {
        "snapshot_path": str(out / "snapshot.json"),
        "snapshot_interval_s": 0,
        "telemetry_log": str(out / "steps.jsonl"),
        "state_log_interval_s": 0,
        "seed": 0,
        "fallback_k": 2,
    }
    t0 = time.perf_counter()
    with tiny_llm(pair.target, {**spec, "governor": "bandit", "governor_config": cfg}) as llm:
        t["start_governed"] = time.perf_counter() - t0
        vc = llm.llm_engine.vllm_config
        sch = scheduler(llm)
        rt = sch.banditk
        res["scheduler"] = f"{type(sch).__module__}.{type(sch).__name__}"
        res["k_table"] = [list(x) for x in vc.speculative_config.num_speculative_tokens_per_batch_size or []]
        res["server_mode"] = rt.server_mode
        # (a) the bandit governs: exact output.
        t1 = time.perf_counter()
        m0 = spec_metrics(llm)
        steps, unwrap = record_steps(sch)
        try:
            res["governed"] = generate(llm, PROMPTS)
        finally:
            unwrap()
        res["governed_steps"] = steps
        res["governed_metrics"] = metrics_delta(m0, spec_metrics(llm))
        res["select_calls"] = rt.select_calls
        res["errors"] = dict(rt.telemetry.errors)
        res["timed_steps"] = rt.telemetry.timed_steps
        res["time_shares"] = rt.telemetry.time_shares()
        t["gen_governed"] = time.perf_counter() - t1
        # (b) K cycles: each step's K written vs the drafts verified in the next step.
        bandit, rt.policy = rt.policy, Cycle()
        steps, unwrap = record_steps(sch)
        tel0 = (rt.telemetry.num_drafts, rt.telemetry.num_draft_tokens, rt.telemetry.accepted_per_position.copy())
        m0 = spec_metrics(llm)
        t1 = time.perf_counter()
        try:
            res["cycled"] = generate(llm, PROMPTS)
        finally:
            unwrap()
            rt.policy = bandit
        t["gen_cycled"] = time.perf_counter() - t1
        res["cycled_steps"] = steps
        res["cycled_metrics"] = metrics_delta(m0, spec_metrics(llm))
        res["cycled_telemetry"] = {
            "num_drafts": rt.telemetry.num_drafts - tel0[0],
            "num_draft_tokens": rt.telemetry.num_draft_tokens - tel0[1],
            "accepted_per_position": (rt.telemetry.accepted_per_position - tel0[2]).tolist(),
        }
        # (c) K = 0: does the drafter's forward still run (cache sync)?
        where, model = find_drafter_model(llm)
        res["drafter_module"] = where
        if model is not None:
            rt.policy = make_policy("fixed:0", k_max=K_MAX, drafter_class="draft_model")
            calls = []
            hook = model.register_forward_hook(lambda *a: calls.append(1))
            try:
                generate(llm, PROMPTS[:1], 4)  # the first step still drafts with the previous K
                calls.clear()
                m0 = spec_metrics(llm)
                t1 = time.perf_counter()
                res["k0"] = generate(llm, PROMPTS[:1])
                t["gen_k0"] = time.perf_counter() - t1
                res["k0_metrics"] = metrics_delta(m0, spec_metrics(llm))
                res["k0_drafter_forwards"] = len(calls)
            finally:
                hook.remove()
                rt.policy = bandit
        # (d) telemetry log as banditk fit reads it.
        rt.log.flush()
        lines = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
        rows = [r for r in lines[1:] if "event" not in r]
        res["log_head"] = {k: lines[0].get(k) for k in ("trace", "source", "k_max")}
        res["log_ks"] = sorted({r["k"] for r in rows})
        res["log_rows"] = len(rows)
        res["observations"] = bandit.observations
        sch.shutdown()
    snap = out / "snapshot.json"
    res["snapshot_exists"] = snap.exists()
    # (e) a second engine starts from the snapshot.
    if snap.exists():
        t0 = time.perf_counter()
        s2 = {**spec, "governor": "bandit", "governor_config": {"prior": str(snap), "state_log_interval_s": 0}}
        with tiny_llm(pair.target, s2) as llm2:
            pol = scheduler(llm2).banditk.policy
            res["prior_source"] = (pol.prior.provenance or {}).get("source") if pol.prior is not None else None
            res["from_snapshot"] = generate(llm2, PROMPTS[:1])
        t["snapshot_engine"] = time.perf_counter() - t0
    return res


if __name__ == "__main__":
    t_all = time.perf_counter()
    try:
        result = main(sys.argv[1], sys.argv[2])
    except BaseException:
        result = {"error": traceback.format_exc()[-6000:]}
    result["total_s"] = time.perf_counter() - t_all
    sys.stdout.flush()
    print("\n" + json.dumps(result, default=str), flush=True)
