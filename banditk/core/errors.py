"""Errors raised by banditk.

Every error derives from :class:`BanditkError` and also from the built-in it
specialises, so callers can catch either. Messages name the field and show the
offending value.
"""

from __future__ import annotations


class BanditkError(Exception):
    """Base class of every error banditk raises on purpose."""


class InvalidContextError(BanditkError, ValueError):
    """A :class:`~banditk.core.types.StepContext` field is out of range."""


class InvalidOutcomeError(BanditkError, ValueError):
    """A :class:`~banditk.core.types.StepOutcome` field is out of range or inconsistent."""


class InvalidDecisionError(BanditkError, ValueError):
    """A decision does not belong to this governor (unknown bucket or K)."""


class UnknownDrafterClassError(BanditkError, ValueError):
    """The drafter class is not one banditk knows."""


class DrafterClassMismatchError(BanditkError, ValueError):
    """A prior or context of one drafter class was offered to another class.

    Parameters are never transferred across drafter classes.
    """


class ConfigError(BanditkError, ValueError):
    """A governor or policy configuration field is invalid."""


class PriorFormatError(BanditkError, ValueError):
    """A prior or snapshot file is malformed, of an unknown schema, or not a prior."""


class IncompatiblePriorError(BanditkError, ValueError):
    """A prior does not fit the governor (K_max or bucket edges differ)."""
