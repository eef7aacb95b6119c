"""Governed schedulers that verify each request's drafts up to its own allotment (issue 16).

On top of :mod:`.scheduler`'s hooks, each ``schedule()`` first asks the policy for an allotment
per running request and cuts the drafts above it (:mod:`.draft_trim`), so vLLM schedules,
verifies and counts only what is kept; each verification feeds the policy's per-request book.
The bandit governor is wrapped in :class:`~banditk.governor.per_request.PerRequestGovernor`;
any other policy verifies every draft, as in :mod:`.scheduler`.

An allotment that fails is logged once and counted, and that step verifies every draft: the
engine never stops for it.
"""

from __future__ import annotations

import logging

import numpy as np

from banditk.adapter.draft_trim import trim_drafts
from banditk.adapter.scheduler import GovernedAsyncScheduler, GovernedScheduler
from banditk.governor.bandit import BanditGovernor
from banditk.governor.per_request import PerRequestGovernor

logger = logging.getLogger("vllm.banditk")


class _PerRequestMixin:
    """The allotment and the book's feed; mixed in before a governed scheduler."""

    def __init__(self, vllm_config, *args, **kwargs) -> None:
        super().__init__(vllm_config, *args, **kwargs)
        rt = self.banditk
        if isinstance(rt.policy, BanditGovernor):
            rt.set_policy(PerRequestGovernor(rt.policy, seed=rt.policy.config.seed or 0))
            logger.info("banditk: drafts verified per request (%s).", rt.policy.name)
        else:
            logger.warning(
                "banditk: per-request verification needs the bandit governor; %s verifies every draft.",
                getattr(rt.policy, "name", type(rt.policy).__name__),
            )

    def schedule(self, *args, **kwargs):
        self._banditk_allot()
        return super().schedule(*args, **kwargs)

    def _banditk_allot(self) -> None:
        policy = self.banditk.policy
        if not isinstance(policy, PerRequestGovernor):
            return
        try:
            policy.forget_finished(self.requests)
            drafting = [r for r in self.running if r.spec_token_ids]
            if not drafting:
                return
            ids = [r.request_id for r in drafting]
            keep = policy.allot(ids, np.array([len(r.spec_token_ids) for r in drafting]))
            trim_drafts(drafting, dict(zip(ids, keep.tolist(), strict=True)))
        except Exception as e:  # never stop the engine: this step verifies every draft
            self._banditk_fault("allot", e)

    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        out = super().make_spec_decoding_stats(
            spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
        )
        policy = self.banditk.policy
        if isinstance(policy, PerRequestGovernor) and not self.banditk.is_padding(request_id):
            try:
                invalid = (num_invalid_spec_tokens or {}).get(request_id, 0)
                policy.on_verified(request_id, max(num_draft_tokens - invalid, 0), num_accepted_tokens)
            except Exception as e:
                self._banditk_fault("request_book", e)
        return out

    def _banditk_fault(self, kind: str, exc: BaseException) -> None:
        if self.banditk.telemetry.count_error(kind) == 1:
            logger.error(
                "banditk: %s failed (%s: %s); those steps verify every draft. Further %s errors are counted, "
                "not logged.",
                kind,
                type(exc).__name__,
                exc,
                kind,
            )


class PerRequestScheduler(_PerRequestMixin, GovernedScheduler):
    """vLLM's synchronous ``Scheduler`` with a governed K and per-request verification."""


class PerRequestAsyncScheduler(_PerRequestMixin, GovernedAsyncScheduler):
    """vLLM's ``AsyncScheduler`` with a governed K and per-request verification."""
