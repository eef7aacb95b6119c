"""A prior: what a governor starts from, as plain data.

A prior is a set of sufficient statistics (pseudo-observations) for one drafter
class, with the parametric latency weights they imply, a strength cap and
provenance. See :mod:`banditk.io.priorfile` for the JSON format.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import numpy as np

from banditk.core.buckets import NO_CONTEXT_EDGES
from banditk.core.drafters import check_drafter_class
from banditk.posterior.stats import SufficientStats


@dataclass(frozen=True, slots=True)
class DrafterKey:
    """Identifies what a prior was learned on.

    Only ``drafter_class`` must match for a prior to be used; the rest is
    provenance (a prior from other hardware is a starting point, not a fix).
    """

    drafter_class: str
    method: str = ""
    target_model: str = ""
    draft_model: str = ""
    hardware: str = ""

    def __post_init__(self) -> None:
        check_drafter_class(self.drafter_class, "drafter.class")

    def to_dict(self) -> dict:
        return {
            "class": self.drafter_class,
            "method": self.method,
            "target_model": self.target_model,
            "draft_model": self.draft_model,
            "hardware": self.hardware,
        }


@dataclass(slots=True)
class Prior:
    """Prior statistics for a governor of one drafter class.

    Attributes:
        key: the drafter class and what the prior was learned on.
        k_max: largest K covered.
        bucket_edges: batch-size bucket edges of the latency cells.
        stats: pseudo-observations (acceptance, latency cells, regression).
        strength_cap: no position, cell or the regression may weigh more than this
            many observations once loaded, so live data can overrule the prior.
        latency_weights: parametric latency-model weights the cells came from, or None.
        provenance: where the prior came from (free-form JSON object).
        context_edges: context bucket edges; the cells are (batch bucket x context bucket),
            flat (:mod:`banditk.core.buckets`). ``(0,)``: one context bucket.
    """

    key: DrafterKey
    k_max: int
    bucket_edges: tuple[int, ...]
    stats: SufficientStats
    strength_cap: float = 200.0
    latency_weights: np.ndarray | None = None
    provenance: dict = field(default_factory=dict)
    context_edges: tuple[int, ...] = NO_CONTEXT_EDGES


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
