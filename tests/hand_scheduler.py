"""Drive a vLLM scheduler by hand: vLLM on CPU forces sync scheduling, so async-order tests build
an async scheduler from a live engine's configs and answer its steps with made-up outputs."""

from __future__ import annotations


def built_scheduler(llm, cls):
    """A ``cls`` (a governed scheduler class) built from the in-process engine ``llm``'s configs,
    beside the engine's own: it shares no state with it."""
    from banditk.testing.engines import engine_core

    core, cfg = engine_core(llm), llm.llm_engine.vllm_config
    return cls(
        vllm_config=cfg,
        kv_cache_config=core.scheduler.kv_cache_config,
        structured_output_manager=core.structured_output_manager,
        block_size=core.scheduler.block_size,
        log_stats=True,
    )


def async_scheduler(llm, cls):
    """A ``cls`` (an ``AsyncScheduler`` subclass) built from the in-process engine ``llm``'s configs."""
    cfg = llm.llm_engine.vllm_config
    cfg.scheduler_config.async_scheduling = True
    try:
        return built_scheduler(llm, cls)
    finally:
        cfg.scheduler_config.async_scheduling = False


def answer(sch, so, accept: int) -> None:
    """Answer step ``so`` as a model runner would: each request accepts ``accept`` of its drafts (fewer if it had fewer)."""
    spec = so.scheduled_spec_decode_tokens
    answer_sampled(sch, so, {r: 1 + min(accept, len(spec.get(r, ()))) for r in so.num_scheduled_tokens})


def answer_sampled(sch, so, sampled: dict[str, int]) -> None:
    """Answer step ``so``: request ``r`` samples ``sampled[r]`` tokens (1 + its accepted drafts)."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(so.num_scheduled_tokens)
    out = ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: j for j, r in enumerate(ids)},
        sampled_token_ids=[[9] * sampled[r] for r in ids],
    )
    sch.update_from_output(so, out)
