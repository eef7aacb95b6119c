"""Target and draft forward timers, measured where the forwards run.

Wraps three methods of vLLM's model runner (``GPUModelRunner``, which the CPU
runner subclasses): ``execute_model`` (the target forward, verify included),
``propose_draft_token_ids`` (the drafter, K = 0 cache-sync forward included) and
``sample_tokens``, which returns the step's ``ModelRunnerOutput``. The timings
ride on that output as the attribute :data:`TIMING_ATTR`; the output is a plain
dataclass, pickled to the engine core in the multi-process layout and passed
as is in-process, so the attribute reaches the scheduler either way.

Timers are CPU wall clocks. They are only meaningful where forwards are
synchronous, i.e. on the CPU backend; elsewhere (CUDA, async outputs) no timing
is attached and the scheduler says once that it falls back to step time.
"""

from __future__ import annotations

import functools
import time

from banditk.adapter import vllm_compat

#: Attribute set on ``ModelRunnerOutput``: ``(target_s, draft_s)``.
TIMING_ATTR = "banditk_timing"

_installed = False


def install() -> bool:
    """Wrap the runner methods once per process; return whether timers are active."""
    global _installed
    if _installed:
        return True
    if not vllm_compat.platform_is_cpu():
        return False
    runner = vllm_compat.model_runner_class()
    runner.execute_model = _timed_execute(runner.execute_model)
    runner.propose_draft_token_ids = _timed_propose(runner.propose_draft_token_ids)
    runner.sample_tokens = _attach(runner.sample_tokens)
    _installed = True
    return True


def _timed_execute(fn):
    @functools.wraps(fn)
    def execute_model(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(self, *args, **kwargs)
        self._banditk_target_s = time.perf_counter() - t0
        self._banditk_draft_s = 0.0
        if out is not None and hasattr(out, "__dict__") and hasattr(out, "sampled_token_ids"):
            # Some paths return the output from execute_model directly.
            try:
                setattr(out, TIMING_ATTR, (self._banditk_target_s, 0.0))
            except Exception:
                pass
        return out

    return execute_model


def _timed_propose(fn):
    @functools.wraps(fn)
    def propose_draft_token_ids(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._banditk_draft_s = getattr(self, "_banditk_draft_s", 0.0) + time.perf_counter() - t0

    return propose_draft_token_ids


def _attach(fn):
    @functools.wraps(fn)
    def sample_tokens(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        target = getattr(self, "_banditk_target_s", None)
        if target is not None and type(out).__name__ == "ModelRunnerOutput":
            try:
                setattr(out, TIMING_ATTR, (float(target), float(getattr(self, "_banditk_draft_s", 0.0))))
            except Exception:
                pass
        self._banditk_target_s = None
        return out

    return sample_tokens


def read(model_runner_output) -> tuple[float, float] | None:
    """The ``(target_s, draft_s)`` attached by the worker, or None."""
    t = getattr(model_runner_output, TIMING_ATTR, None)
    if isinstance(t, tuple) and len(t) == 2:
        return float(t[0]), float(t[1])
    return None
