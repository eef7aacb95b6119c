"""The interface every K-choosing policy implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from banditk.core.types import Decision, StepContext, StepOutcome


@runtime_checkable
class Policy(Protocol):
    """A policy is two calls: ``select`` once per step, ``observe`` when its outcome arrives."""

    name: str

    def select(self, context: StepContext) -> Decision:
        """Choose K for the step described by ``context``."""
        ...

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """Credit ``outcome`` to the ``decision`` that produced it."""
        ...
