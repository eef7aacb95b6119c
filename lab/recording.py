"""Record any policy's steps as a trace (:mod:`banditk.io.trace`) while it runs."""

from __future__ import annotations

import json
import os

from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.io.trace import header, step_record


class RecordingPolicy:
    """Wraps a policy; every observed step is appended to a JSONL trace.

    Args:
        policy: the policy that decides.
        path: trace file (created with its header line).
        drafter_class, k_max: for the header.
        header_extra: more header fields (hardware, model, source, ...).
    """

    def __init__(self, policy, path: str | os.PathLike, *, drafter_class: str, k_max: int, **header_extra) -> None:
        self.policy = policy
        self.name = getattr(policy, "name", "policy")
        self.disables_speculation = getattr(policy, "disables_speculation", False)
        self.k_max = k_max
        self._fh = open(path, "w", encoding="utf-8")
        self._fh.write(
            json.dumps(header(drafter_class, k_max, header_extra.pop("source", "sim"), **header_extra)) + "\n"
        )
        self._last_context: StepContext | None = None

    def select(self, context: StepContext) -> Decision:
        self._last_context = context
        return self.policy.select(context)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        self.policy.observe(decision, outcome)
        if decision.num_decoding > 0:
            ctx = self._last_context
            extra = (
                {} if ctx is None else {"ctx": ctx.context_tokens, "kv": round(ctx.kv_usage, 4), "queue": ctx.queue_len}
            )
            self._fh.write(
                json.dumps(step_record(decision, outcome, self.k_max, **extra), separators=(",", ":")) + "\n"
            )

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordingPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
