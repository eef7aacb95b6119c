"""Start small vLLM engines on CPU and reach inside them (tests and live benchmarks).

The settings are the ones measured to work on a 2-core CPU machine
(../shared/VLLM_ON_CPU.md): fp32, eager, max_model_len 512, a small KV cache,
both cores. :func:`cpu_env` must run before vLLM is imported.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
from collections.abc import Iterator
from typing import Any

#: Environment for vLLM on a small CPU box; ``in_process`` selects the single-process layout.
CPU_ENV = {"OMP_NUM_THREADS": "2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "TOKENIZERS_PARALLELISM": "false"}


def cpu_env(in_process: bool = True, cache_root: str | None = None) -> dict[str, str]:
    """Set (and return) the environment variables vLLM on CPU needs; call before importing vLLM."""
    env = dict(CPU_ENV)
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
    env["VLLM_CACHE_ROOT"] = cache_root or os.environ.get("VLLM_CACHE_ROOT") or tempfile.mkdtemp(prefix="vllm-cache-")
    os.environ.update(env)
    return env


def llm_kwargs(**overrides: Any) -> dict:
    """Keyword arguments for ``vllm.LLM`` that suit a tiny model on CPU."""
    kw = dict(
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        kv_cache_memory_bytes=64 << 20,
        max_num_seqs=16,
        seed=0,
        disable_log_stats=False,
    )
    kw.update(overrides)
    return kw


@contextlib.contextmanager
def tiny_llm(model: str, speculative_config: dict | None, **overrides: Any) -> Iterator[Any]:
    """An in-process ``vllm.LLM``, shut down and freed on exit (so several can run in one test session)."""
    from vllm import LLM

    llm = LLM(model=model, speculative_config=speculative_config, **llm_kwargs(**overrides))
    try:
        yield llm
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def engine_core(llm: Any) -> Any:
    """The in-process ``EngineCore`` (needs ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    return llm.llm_engine.engine_core.engine_core


def scheduler(llm: Any) -> Any:
    return engine_core(llm).scheduler


def model_runner(llm: Any) -> Any:
    return engine_core(llm).model_executor.driver_worker.worker.model_runner


def spec_metrics(llm: Any) -> dict[str, Any]:
    """vLLM's own spec-decoding counters (cumulative): drafts, draft tokens, accepted, per position."""
    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            out[m.name.removeprefix("vllm:spec_decode_")] = getattr(m, "values", None) or getattr(m, "value", None)
    return out


def metrics_delta(before: dict, after: dict) -> dict:
    """``after - before`` for the counters of :func:`spec_metrics` (lists element-wise)."""
    delta = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, list):
            b = b or [0] * len(v)
            delta[k] = [x - y for x, y in zip(v, b)]
        else:
            delta[k] = v - (b or 0)
    return delta


def greedy_chain(next_token, start: int, n: int) -> list[int]:
    """The n tokens a cyclic model generates greedily after token ``start``."""
    out, t = [], int(start)
    for _ in range(n):
        t = int(next_token[t])
        out.append(t)
    return out
