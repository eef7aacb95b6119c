"""Hyperparameters of the bandit governor, apart from anything it learns."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from banditk.core.buckets import DEFAULT_BUCKET_EDGES, NO_CONTEXT_EDGES, check_bucket_edges, check_context_edges
from banditk.core.drafters import check_drafter_class
from banditk.core.errors import ConfigError


@dataclass(frozen=True)
class GovernorConfig:
    """Configuration of :class:`banditk.governor.BanditGovernor`.

    Every field has a default except the drafter class and K_max, which come from
    the server's speculative config.
    """

    drafter_class: str
    """Drafter class (see :data:`banditk.core.drafters.DRAFTER_CLASSES`)."""

    k_max: int
    """Largest K: vLLM's ``num_speculative_tokens``."""

    bucket_edges: tuple[int, ...] = DEFAULT_BUCKET_EDGES
    """Lower edges of the batch-size buckets; must start at 1."""

    context_edges: tuple[int, ...] = NO_CONTEXT_EDGES
    """Lower edges of the context buckets, in tokens of context per decoding request (the
    batch's mean); must start at 0. Each batch bucket gets a cell per context bucket, so K
    can follow context as well as B. One edge (the default) ignores context: a context
    bucket is a new state to learn, worth it where the best K moves with context
    (docs/model.md). ``[0, 2048, 8192]`` is the shipped choice for long-context serving."""

    k_set: tuple[int, ...] | None = None
    """The K the governor may play, sorted (None: every K in 0..K_max). On a GPU each K
    costs a captured FULL decode-graph ladder, so a smaller set saves capture memory and
    start-up time; the governor never plays, explores or falls back to a K outside it."""

    switch_penalty: float = 0.02
    """Relative advantage a sampled K needs over the current K before the governor
    switches: larger means fewer switches but slower reaction (docs/decisions.md)."""

    decision_interval: int = 8
    """Steps a sampled K is held in the same bucket before the posterior is sampled
    again (a bucket change or KV pressure resamples at once). Holding turns a sampled
    advantage into several observations instead of a switch and a switch back, and
    makes most steps nearly free."""

    max_decision_interval: int = 32
    """Longest decision epoch. Each time a sampled decision keeps the current K, the
    next epoch doubles (up to this); a switch, a bucket change or KV pressure resets
    it to ``decision_interval``. A settled governor thus samples less often, so
    near-tied Ks stop trading places on posterior noise (lazy Thompson sampling, the
    switching-cost bandits' epoch schedule), while a change of load still resamples at
    once. Equal to ``decision_interval`` turns the doubling off (docs/decisions.md)."""

    settle_confidence: float = 0.75
    """Posterior probability (with the switching bonus) that the current K is the best
    one, above which a kept decision doubles the epoch. Below it the epoch stays as it
    is: an uncertain governor keeps sampling often enough to learn."""

    switch_confidence: float = 0.9
    """Share of posterior draws in which a K the bucket knows must beat the current K, with
    its switching bonus, before the governor switches to it. A single Thompson draw of two
    near-tied Ks favours each in turn on a noisy clock; this share does not (docs/decisions.md)."""

    explore_steps: int = 32
    """A K whose cell in the bucket has fewer observations than this is explored when the
    Thompson draw picks it: played for this many steps, so one visit measures it."""

    revisit_spacing: int = 500
    """Steps a bucket plays after an exploration before it may revisit a K it has already
    measured (``explore_steps`` observations or more). A noisy clock keeps near-tied Ks
    plausible for long, and each revisit is two K changes; spaced by the discount's memory,
    revisits add at most two per this many steps (docs/decisions.md). First looks at a K are
    not spaced."""

    bucket_dwell: int = 4
    """Steps B must stay in another bucket before the governor moves there: a one-step
    dip in B (a request finishing while its successor prefills) keeps the bucket."""

    bucket_hysteresis: float = 0.1
    """Fraction of a bucket's range by which B may stray past its edges before the
    governor moves to the neighbouring bucket."""

    discount: float = 0.998
    """Forgetting factor applied to a bucket's latency data (and to acceptance data)
    each time it is observed: memory of about 1 / (1 - discount) steps. Closer to 1
    means a sharper posterior but slower tracking of drift."""

    model_discount: float = 0.9998
    """Forgetting factor of the parametric latency model, per observation. Slower than
    ``discount``: the model's job is the shape of cost over B and K across all cells,
    which needs data from many batch sizes and changes only with hardware or model."""

    model_prior_strength: float = 20.0
    """Weight, in observations per feature, of the latency model's prior weights (the
    default shape, or a prior file's fit). Keeps the model sane while the batches seen
    span too few B and K to identify every weight."""

    kv_pressure_threshold: float = 0.85
    """KV-cache usage above which deep K is penalised, when ``kv_pressure_weight`` > 0."""

    kv_pressure_weight: float = 0.0
    """Strength of the KV penalty: goodput of K is scaled by
    exp(-weight * K / K_max * excess), excess going 0..1 from the threshold to a full cache.
    Off by default: vLLM reserves lookahead slots for ``num_speculative_tokens`` (K_max)
    whatever K a step drafts, so K does not change what the cache holds or when vLLM
    preempts. For an engine that reserves per step's K (docs/decisions.md)."""

    latency_cv: float = 0.1
    """Prior guess of step-time noise as a fraction of the mean (scale-free)."""

    cell_prior_count: float = 0.1
    """Weight, in observations, of the parametric model's estimate in a latency cell."""

    regression_refresh: int = 32
    """Refit the parametric latency model every this many observations (it is cheap
    but not free; cells carry the fine detail)."""

    max_step_s: float = 600.0
    """Step durations above this are clipped before learning, so a stalled clock or a
    suspended process cannot poison the posterior."""

    outlier_factor: float = 10.0
    """A step this many times slower than its cell's posterior mean is not credited: a
    clock jump, a GC or swap pause, a first-time shape warming up. Eight such steps in a
    row are credited (the machine did get slower)."""

    stall_clip: float = 1.5
    """A step slower than this multiple of its cell's posterior mean (and not an outlier) is
    credited at that multiple. A shared machine's clock stalls (the OS, a garbage collector, a
    client on the same cores): stalls hit every K alike, and the Normal cells would read a
    few of them as a difference between Ks (docs/decisions.md)."""

    seed: int | None = 0
    """Seed of the Thompson sampler's random generator; None draws one from the OS."""

    def __post_init__(self) -> None:
        check_drafter_class(self.drafter_class, "drafter_class")
        _int(self.k_max, "k_max", 1, 64)
        object.__setattr__(self, "bucket_edges", check_bucket_edges(self.bucket_edges))
        object.__setattr__(self, "context_edges", check_context_edges(self.context_edges))
        if self.k_set is not None:
            object.__setattr__(self, "k_set", check_k_set(self.k_set, self.k_max, "k_set"))
        _float(self.switch_penalty, "switch_penalty", 0.0, 10.0)
        _int(self.decision_interval, "decision_interval", 1, 10_000)
        _int(self.max_decision_interval, "max_decision_interval", 1, 1_000_000)
        if self.max_decision_interval < self.decision_interval:
            raise ConfigError(
                f"`max_decision_interval` must be >= `decision_interval` ({self.decision_interval}), "
                f"got {self.max_decision_interval}."
            )
        _float(self.switch_confidence, "switch_confidence", 0.0, 1.0)
        _int(self.explore_steps, "explore_steps", 1, 1_000_000)
        _int(self.revisit_spacing, "revisit_spacing", 1, 1_000_000)
        _int(self.bucket_dwell, "bucket_dwell", 1, 10_000)
        _float(self.bucket_hysteresis, "bucket_hysteresis", 0.0, 1.0)
        _float(self.settle_confidence, "settle_confidence", 0.0, 1.0)
        _float(self.discount, "discount", 0.5, 1.0)
        _float(self.model_discount, "model_discount", 0.5, 1.0)
        _float(self.model_prior_strength, "model_prior_strength", 0.0, 1e9)
        _float(self.kv_pressure_threshold, "kv_pressure_threshold", 0.0, 0.999)
        _float(self.kv_pressure_weight, "kv_pressure_weight", 0.0, 100.0)
        _float(self.latency_cv, "latency_cv", 1e-4, 10.0)
        _float(self.cell_prior_count, "cell_prior_count", 1e-6, 1e6)
        _int(self.regression_refresh, "regression_refresh", 1, 1_000_000)
        _float(self.max_step_s, "max_step_s", 1e-6, 1e6)
        _float(self.outlier_factor, "outlier_factor", 1.5, 1e9)
        _float(self.stall_clip, "stall_clip", 1.0, 1e9)
        if self.seed is not None:
            _int(self.seed, "seed", 0, 2**63 - 1)

    @property
    def num_batch_buckets(self) -> int:
        return len(self.bucket_edges)

    @property
    def num_context_buckets(self) -> int:
        return len(self.context_edges)

    @property
    def num_buckets(self) -> int:
        """Cells per K: a batch bucket times a context bucket (:mod:`banditk.core.buckets`)."""
        return len(self.bucket_edges) * len(self.context_edges)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bucket_edges"] = list(self.bucket_edges)
        d["context_edges"] = list(self.context_edges)
        if self.k_set is None:
            del d["k_set"]  # files from before the option read the same
        else:
            d["k_set"] = list(self.k_set)
        return d

    @classmethod
    def from_dict(cls, d: object) -> GovernorConfig:
        """Build from a JSON-like dict; unknown or ill-typed fields raise :class:`ConfigError`.

        >>> GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4}).switch_penalty
        0.02
        >>> GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4, "discount": 2})
        Traceback (most recent call last):
        ...
        banditk.core.errors.ConfigError: `discount` must be in [0.5, 1.0], got 2.
        """
        if not isinstance(d, dict):
            raise ConfigError(f"governor config must be a JSON object, got {type(d).__name__}: {d!r}.")
        names = {f.name for f in dataclasses.fields(cls)}
        if "prefill_aware" in d:
            raise ConfigError(
                f"`prefill_aware` was removed (got {d['prefill_aware']!r}): a step next to a prompt "
                "chunk always gets its own K. Drop the field."
            )
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"Unknown governor config field(s) {unknown}; known: {sorted(names)}.")
        for required in ("drafter_class", "k_max"):
            if required not in d:
                raise ConfigError(f"governor config is missing `{required}`.")
        d = dict(d)
        for name in ("bucket_edges", "context_edges", "k_set"):
            if name in d and isinstance(d[name], list):
                d[name] = tuple(d[name])
        return cls(**d)


def check_k_set(value: object, k_max: int, name: str) -> tuple[int, ...]:
    """A sorted tuple of distinct K in 0..``k_max``; a :class:`ConfigError` naming ``name`` otherwise.

    >>> check_k_set([4, 0, 2], 4, "k_set")
    (0, 2, 4)
    >>> check_k_set([1, 5], 4, "k_set")
    Traceback (most recent call last):
    ...
    banditk.core.errors.ConfigError: `k_set` must list distinct integers in [0, 4] (K_max), got [1, 5].
    """
    ok = isinstance(value, (list, tuple)) and len(value) > 0
    ok = ok and all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= k_max for k in value)
    if not ok or len(set(value)) != len(value):
        raise ConfigError(f"`{name}` must list distinct integers in [0, {k_max}] (K_max), got {value!r}.")
    return tuple(sorted(value))


def _int(value: object, name: str, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"`{name}` must be an integer in [{lo}, {hi}], got {value!r}.")


def _float(value: object, name: str, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"`{name}` must be a finite number, got {value!r}.")
    if not lo <= value <= hi:
        raise ConfigError(f"`{name}` must be in [{lo}, {hi}], got {value!r}.")
