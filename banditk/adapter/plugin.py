"""vLLM general plugin: makes stock vLLM accept ``"governor"`` in its speculative config.

Installed as the ``vllm.general_plugins`` entry point ``banditk`` (see
pyproject.toml); vLLM calls :func:`register` in every process it starts (front
end, engine core, workers). In the front end it wraps
``EngineArgs.create_engine_config`` so that:

1. ``governor`` and ``governor_config`` are taken out of the speculative-config
   dict before vLLM's ``SpeculativeConfig`` (which forbids extra keys) sees them,
   and validated (:mod:`banditk.adapter.settings`, :mod:`.policy_factory`): a bad
   value raises :class:`~banditk.core.errors.ConfigError` here, before any model loads;
2. vLLM's dynamic-K mode is switched on with a table the governor overrides every step. On
   a GPU it lists every K of the arm set, so Model Runner V2 captures a FULL decode ladder
   for each (:mod:`.graph_mode`; on 0.34 each up to ``max_num_seqs`` through
   :func:`~banditk.adapter.vllm_compat.install_full_graphs_for_every_k`); on CPU it is one
   row, ``[[1, max_num_seqs, K_max]]``. The log then says once which runner and graph mode
   serve, and why;
3. the validated settings ride to the engine-core process in
   ``VllmConfig.additional_config["banditk"]`` (pickled with the config in the
   multi-process layout, the same object in-process);
4. ``scheduler_cls`` selects :class:`~banditk.adapter.scheduler.GovernedScheduler`
   (or its async twin when vLLM chose async scheduling), or with
   ``governor_config.per_request`` the per-request twins of :mod:`.per_request`.

Without ``"governor"`` (or with ``"governor": "off"``) the wrapper passes
everything through untouched. In worker processes :func:`register` installs the
forward timers (:mod:`.worker_timing` on CPU, :mod:`.event_timing` on MRv2) and the
graph-ladder mend (:mod:`.graph_mode`) when the front end asked for them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os

from banditk.adapter import data_parallel, vllm_compat
from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY, AdapterSettings, split_speculative_config
from banditk.core.errors import ConfigError

logger = logging.getLogger("vllm.banditk")

#: Set in the front end when a governor is on; spawned workers inherit it and time forwards.
WORKER_TIMING_ENV = "BANDITK_WORKER_TIMING"
#: Set in the front end when adaptive verification trims the governor's drafts; workers then
#: read back what it admitted (:mod:`.admitted_drafts`).
ADMITTED_DRAFTS_ENV = "BANDITK_ADMITTED_DRAFTS"

#: The scheduler vLLM is handed, by (per-request verification, async scheduling).
SCHEDULER_QUALNAMES = {
    (False, False): "banditk.adapter.scheduler.GovernedScheduler",
    (False, True): "banditk.adapter.scheduler.GovernedAsyncScheduler",
    (True, False): "banditk.adapter.per_request.PerRequestScheduler",
    (True, True): "banditk.adapter.per_request.PerRequestAsyncScheduler",
}

_registered = False


def register() -> None:
    """Entry point called by vLLM in each of its processes; safe to call repeatedly."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        engine_args = vllm_compat.engine_args_class()
        original = engine_args.create_engine_config
        if not getattr(original, "_banditk_wrapped", False):
            engine_args.create_engine_config = _wrap_create_engine_config(original)
    except Exception as e:  # never break a vLLM that does not use the governor
        logger.error(
            'banditk: cannot hook vLLM %s (%s: %s); "governor" will not be accepted.',
            vllm_compat.vllm_version(),
            type(e).__name__,
            e,
        )
        return
    try:
        data_parallel.install()  # a governed dense model keeps dynamic K on every rank
    except Exception as e:  # vLLM's own rule then stands: dynamic K off under data parallelism
        logger.warning("banditk: cannot keep dynamic K under data parallelism (%s: %s).", type(e).__name__, e)
    try:
        vllm_compat.install_full_graphs_for_every_k()  # 0.34: in every process that plans graphs
    except Exception as e:  # the governed server then captures vLLM's own plan
        logger.warning("banditk: full graphs for every K unavailable (%s: %s).", type(e).__name__, e)
    if os.environ.get(WORKER_TIMING_ENV) == "1":
        _install_worker_hooks()


def _install_worker_hooks() -> None:
    """The forward timers (CPU clocks or MRv2's CUDA events), the graph-ladder mend and, under
    adaptive verification, the admitted-draft counts; never fatal."""
    from banditk.adapter import admitted_drafts, event_timing, graph_mode, worker_timing

    hooks = [
        ("forward timers", worker_timing.install),
        ("CUDA-event timers", event_timing.install),
        ("graph-ladder mend", graph_mode.install),
    ]
    if os.environ.get(ADMITTED_DRAFTS_ENV) == "1":
        hooks.append(("admitted-draft counts", admitted_drafts.install))
    for what, install in hooks:
        try:
            install()
        except Exception as e:
            logger.warning("banditk: worker %s unavailable (%s: %s).", what, type(e).__name__, e)


def _wrap_create_engine_config(original):
    @functools.wraps(original)
    def create_engine_config(self, *args, **kwargs):
        clean, settings = split_speculative_config(self.speculative_config)
        if settings is None:
            return original(self, *args, **kwargs)
        self.speculative_config = clean
        if not settings.enabled:
            logger.info("banditk: governor is 'off'; vLLM runs unchanged.")
            return original(self, *args, **kwargs)
        _prepare_engine_args(self, clean, settings)
        vllm_config = original(self, *args, **kwargs)
        apply_to_vllm_config(vllm_config, settings)
        return vllm_config

    create_engine_config._banditk_wrapped = True  # type: ignore[attr-defined]
    return create_engine_config


def _prepare_engine_args(engine_args, clean: dict, settings: AdapterSettings) -> None:
    """Check what can be checked from the raw dict, and switch on dynamic K."""
    vllm_compat.check_vllm_shape()
    norm = {str(k).replace("-", "_"): v for k, v in clean.items()}
    if norm.get("num_speculative_tokens_per_batch_size") is not None:
        raise ConfigError(
            "speculative_config sets both `governor` and `num_speculative_tokens_per_batch_size` "
            f"({norm['num_speculative_tokens_per_batch_size']!r}); the governor chooses K itself. "
            'Use "governor": "table:[[lo,hi,K],...]" to run a table through banditk.'
        )
    if norm.get("enable_adaptive_verification") and settings.per_request:
        raise per_request_with_adaptive_verification(norm["enable_adaptive_verification"])
    k_max = norm.get("num_speculative_tokens")
    method = norm.get("method")
    if isinstance(k_max, int) and not isinstance(k_max, bool) and k_max > 0:
        if settings.drafter_class is not None or method in _known_methods():
            from banditk.adapter.policy_factory import validate

            validate(settings.resolve(method=method, k_max=k_max))  # fail fast, before any config I/O
        clean["num_speculative_tokens_per_batch_size"] = vllm_compat.dynamic_k_table(
            table_ks(settings, k_max), getattr(engine_args, "max_num_seqs", None)
        )
    # Marks the config as governed while vLLM builds it: 0.34 plans its graphs then
    # (vllm_compat.install_full_graphs_for_every_k); apply_to_vllm_config fills it in.
    engine_args.additional_config = {
        **(getattr(engine_args, "additional_config", None) or {}),
        ADDITIONAL_CONFIG_KEY: {},
    }


def per_request_with_adaptive_verification(value: object) -> ConfigError:
    """Why per-request verification and vLLM's adaptive verification do not run together."""
    return ConfigError(
        f"governor_config.per_request is true and enable_adaptive_verification={value!r}: both choose which "
        "of each request's drafts are verified within one budget a step, so one would undo the other. Run "
        "banditk's K with adaptive verification (drop `per_request`), or per-request verification alone (drop "
        "`enable_adaptive_verification`) (docs/operations.md, 'banditk and vLLM's adaptive verification')."
    )


def table_ks(settings: AdapterSettings, k_max: int) -> tuple[int, ...]:
    """The K the dynamic table lists: the whole arm set where graphs are captured (a ladder
    each), else only its largest (no graphs on CPU: one row, as vLLM's own tables)."""
    arms = dataclasses.replace(settings, k_max=k_max).arm_set()
    return arms if vllm_compat.platform_has_cuda_graphs() else (max(arms),)


def _settle_server_mode(vllm_config, resolved: AdapterSettings) -> None:
    """Pin MRv2 where vLLM chose it, and say once which mode serves and which K lack a ladder."""
    from banditk.adapter import graph_mode

    mode = graph_mode.server_mode_of(vllm_config)
    if mode.runner == "v2" and mode.cudagraph != "NONE":
        vllm_compat.pin_model_runner_v2()
    arms = resolved.arm_set()
    graph_mode.log_server_mode(mode, arms)
    if mode.cudagraph == "FULL":
        table = vllm_config.speculative_config.num_speculative_tokens_per_batch_size or []
        laddered = vllm_compat.laddered_ks(table, int(vllm_config.scheduler_config.max_num_seqs))
        unladdered = sorted(set(arms) - set(laddered))
        if unladdered:
            logger.warning(
                "banditk: K=%s get no full-graph ladder: the dynamic table needs a batch size per K and "
                "max_num_seqs=%d is too small; those K run PIECEWISE. Set governor_config.k_set to at most "
                "max_num_seqs values.",
                unladdered,
                vllm_config.scheduler_config.max_num_seqs,
            )


def _known_methods() -> set[str]:
    from banditk.core.drafters import VLLM_METHOD_TO_CLASS

    return set(VLLM_METHOD_TO_CLASS)


def apply_to_vllm_config(vllm_config, settings: AdapterSettings) -> AdapterSettings:
    """Resolve settings against the built config, carry them to the engine core, pick the scheduler."""
    from banditk.adapter.policy_factory import validate

    if vllm_config.speculative_config is None:
        raise ConfigError("speculative_config.governor is set but vLLM built no speculative config.")
    k_max = vllm_compat.speculative_k_max(vllm_config)
    resolved = settings.resolve(method=vllm_compat.speculative_method(vllm_config), k_max=k_max)
    validate(resolved)
    if not vllm_compat.dynamic_k_enabled(vllm_config):
        if vllm_compat.data_parallel_size(vllm_config) > 1:
            # A MoE model's ranks step in lockstep and must draft one K: vLLM keeps its switch-off
            # there (banditk.adapter.data_parallel), and the governed scheduler leaves K alone.
            logger.warning(
                "banditk: vLLM disables dynamic K with data parallelism on a MoE model (its ranks run in "
                "lockstep and must draft the same K); the governor will observe only."
            )
        else:
            # num_speculative_tokens came from the draft model's config, not the dict:
            # switch dynamic K on now (the scheduler reads the table when it starts).
            vllm_compat.enable_dynamic_k(vllm_config, table_ks(resolved, k_max))
            logger.warning(
                "banditk: dynamic K switched on after config creation (num_speculative_tokens=%d was "
                "not in speculative_config); on GPU prefer setting it explicitly.",
                k_max,
            )
    if vllm_compat.adaptive_verification_enabled(vllm_config):
        if resolved.per_request:  # switched on by another route than the dict
            raise per_request_with_adaptive_verification(True)
        vllm_compat.check_adaptive_verification_shape()  # before any model loads
        os.environ[ADMITTED_DRAFTS_ENV] = "1"
    _settle_server_mode(vllm_config, resolved)
    dp = vllm_compat.data_parallel_size(vllm_config)
    vllm_compat.additional_config(vllm_config)[ADDITIONAL_CONFIG_KEY] = {
        **resolved.to_dict(),
        data_parallel.DP_SIZE_KEY: dp,
    }
    if dp > 1 and vllm_compat.dynamic_k_enabled(vllm_config):
        logger.info(
            "banditk: %d data-parallel ranks, each an independent engine (a dense model): each rank's governor "
            "steers its own K; snapshots and telemetry logs are written per rank (<name>.rank<i><suffix>).",
            dp,
        )
    qualname = SCHEDULER_QUALNAMES[resolved.per_request, bool(vllm_compat.async_scheduling(vllm_config))]
    vllm_compat.set_scheduler_cls(vllm_config, qualname)
    os.environ[WORKER_TIMING_ENV] = "1"
    _install_worker_hooks()  # the in-process layout runs the model here
    logger.info(
        "banditk: governor=%s drafter_class=%s K_max=%d scheduler=%s",
        resolved.governor,
        resolved.drafter_class_for(),
        k_max,
        qualname,
    )
    return resolved
