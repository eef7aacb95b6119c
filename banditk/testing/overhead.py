"""Governor overhead relative to vLLM's own scheduler work, on real vLLM objects.

Runs an in-process engine with ``"governor": "bandit"``, wraps timers around the
scheduler's ``schedule()`` / ``update_from_output()`` and around the governor's
``select`` / ``observe`` and the adapter hooks, and reports, per batch size B:

- ``policy_ratio``: (select + observe) / (vLLM's schedule + update_from_output,
  adapter time excluded);
- ``adapter_ratio``: all banditk time in the scheduler (hooks, telemetry, crediting,
  policy) over the same vLLM time.

Times are medians per call times calls per step (robust to preemption on a busy box).

Usage: ``python -m banditk.testing.overhead [--batch 1 8 64]`` (needs the ``cpu`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict

import numpy as np


class _Timer:
    """Per-call wall times per key; medians resist the preemptions of a busy 2-core box."""

    def __init__(self) -> None:
        self.s = defaultdict(float)
        self.n = defaultdict(int)
        self.calls = defaultdict(list)

    def per_step(self, key: str, steps: int) -> float:
        """Median call time x calls per step (seconds)."""
        xs = self.calls[key]
        return float(np.median(xs)) * len(xs) / max(steps, 1) if xs else 0.0

    def wrap(self, obj, name: str, key: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t0
                self.s[key] += dt
                self.n[key] += 1
                self.calls[key].append(dt)

        setattr(obj, name, timed)


def measure(batches=(1, 8, 64), max_tokens: int = 48, rounds: int = 3) -> list[dict]:
    from banditk.testing.engines import cpu_env

    root = tempfile.mkdtemp(prefix="banditk-overhead-")
    cpu_env(in_process=True, cache_root=os.path.join(root, "cache"))
    from vllm import SamplingParams

    from banditk.testing.engines import scheduler, tiny_llm
    from banditk.testing.tiny_models import build_pair

    pair = build_pair(os.path.join(root, "models"), agreement=0.8)
    spec = {
        "method": "draft_model",
        "model": pair.draft,
        "num_speculative_tokens": 4,
        "governor": "bandit",
        "governor_config": {"state_log_interval_s": 0},
    }
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    rows = []
    with tiny_llm(pair.target, spec, max_num_seqs=max(batches), kv_cache_memory_bytes=256 << 20) as llm:
        sch = scheduler(llm)
        rt = sch.banditk
        llm.generate(["warm up"] * max(batches), sp, use_tqdm=False)
        for b in batches:
            t = _Timer()
            t.wrap(sch, "schedule", "schedule")
            t.wrap(sch, "update_from_output", "update")
            for name in ("on_schedule_start", "on_schedule", "on_verified", "on_output_start", "on_output"):
                t.wrap(rt, name, name)
            t.wrap(rt.policy, "select", "select")
            t.wrap(rt.policy, "observe", "observe")
            for r in range(rounds):
                llm.generate([f"def f_{i}_{r}(x):" for i in range(b)], sp, use_tqdm=False)
            for name in ("schedule", "update_from_output"):
                delattr(sch, name)
            for name in ("on_schedule_start", "on_schedule", "on_verified", "on_output_start", "on_output"):
                delattr(rt, name)
            delattr(rt.policy, "select")
            delattr(rt.policy, "observe")
            steps = t.n["schedule"]
            hooks = ("on_schedule_start", "on_schedule", "on_verified", "on_output_start", "on_output")
            adapter = sum(t.per_step(h, steps) for h in hooks)  # includes the policy calls
            policy = t.per_step("select", steps) + t.per_step("observe", steps)
            vllm = t.per_step("schedule", steps) + t.per_step("update", steps) - adapter
            rows.append(
                {
                    "B": b,
                    "steps": steps,
                    "vllm_sched_ms_per_step": 1e3 * vllm,
                    "policy_ms_per_step": 1e3 * policy,
                    "adapter_ms_per_step": 1e3 * adapter,
                    "adapter_excl_policy_ms_per_step": 1e3 * (adapter - policy),
                    "policy_ratio": policy / vllm,
                    "adapter_ratio": adapter / vllm,
                }
            )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    for row in measure(tuple(a.batch), rounds=a.rounds):
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
