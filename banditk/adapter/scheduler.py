"""vLLM ``Scheduler`` subclasses that let a banditk governor choose K each step.

The plugin selects one of these through ``scheduler_cls``. They change exactly
one thing: ``SchedulerOutput.num_spec_tokens_to_schedule`` (the number of
drafts proposed after this step), written before ``_update_after_schedule``
so that ``AsyncScheduler`` sizes its placeholders with it. Everything else,
sampling, rejection and the drafters included, is vLLM's own; K = 0 still runs
the drafter's cache-sync forward (vLLM's proposers do it themselves). A new
decode request is padded to the step's 1 + K rows as vLLM pads it at a static K
(:func:`~banditk.adapter.vllm_compat.static_decode_padding`); its placeholder
drafts are credited to no decision.

The hooks only forward to :class:`~banditk.adapter.runtime.GovernorRuntime`, and
hand its counters to vLLM's scheduler stats for ``/metrics`` (:mod:`.metrics`).
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from banditk.adapter import vllm_compat
from banditk.adapter.metrics import Publisher
from banditk.adapter.runtime import GovernorRuntime


class _GovernedMixin:
    """The hooks; mixed in before a vLLM scheduler class."""

    banditk: GovernorRuntime

    def __init__(self, vllm_config, *args, **kwargs) -> None:
        # Build (and validate) the governor before vLLM allocates anything.
        self.banditk = GovernorRuntime.from_vllm_config(vllm_config)
        self.banditk_metrics = Publisher.for_this_vllm()
        super().__init__(vllm_config, *args, **kwargs)

    def schedule(self, *args, **kwargs):
        self.banditk.on_schedule_start()
        with vllm_compat.static_decode_padding(self, self.banditk.padding_k()):
            return super().schedule(*args, **kwargs)

    def _update_after_schedule(self, scheduler_output) -> None:
        self.banditk.on_schedule(self, scheduler_output)
        super()._update_after_schedule(scheduler_output)

    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        self.banditk.on_verified(request_id, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens)
        return super().make_spec_decoding_stats(
            spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
        )

    def update_from_output(self, scheduler_output, model_runner_output):
        self.banditk.on_output_start(scheduler_output)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.banditk.on_output(self, scheduler_output, model_runner_output)
        # After on_output, so the payload includes this step's credit (banditk:* on /metrics).
        self.banditk_metrics.publish(self.banditk, self, outputs)
        return outputs

    def shutdown(self) -> None:
        self.banditk.close()
        super().shutdown()


class GovernedScheduler(_GovernedMixin, Scheduler):
    """vLLM's synchronous ``Scheduler`` with a governed K."""


class GovernedAsyncScheduler(_GovernedMixin, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with a governed K (credit follows execution order)."""
