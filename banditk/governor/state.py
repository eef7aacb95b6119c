"""The governor's state in a snapshot: one declared schema, read and checked from it.

``SCHEMA`` names every field the governor writes, with the check that turns the JSON value
back into the governor's value. A field the governor writes without an entry here fails a
test (``tests/governor/test_state.py``); a bad value raises :class:`PriorFormatError` naming
the field and the value, never a bare ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.core.errors import PriorFormatError
from banditk.posterior.latency_model import FEATURES
from banditk.posterior.prior_conflict import MAX_TAU2
from banditk.posterior.stats import DECODE_ONLY_KEYS, SufficientStats

#: Fields of older snapshots that the governor no longer keeps; they are ignored on load.
OBSOLETE = frozenset({"mixed_share", "mixed_chunk"})
_BIG = 2**62


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _integer(lo: Callable[[GovernorConfig], int] | int, hi: Callable[[GovernorConfig], int] | int):
    def check(value: object, cfg: GovernorConfig, name: str) -> int:
        a = lo(cfg) if callable(lo) else lo
        b = hi(cfg) if callable(hi) else hi
        if isinstance(value, bool) or not isinstance(value, int) or not a <= value <= b:
            raise PriorFormatError(f"`{name}` must be an integer in [{a}, {b}], got {_short(value)}.")
        return value

    return check


def _number(lo: float, hi: float):
    def check(value: object, cfg: GovernorConfig, name: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not lo <= value < hi
        ):
            raise PriorFormatError(f"`{name}` must be a finite number in [{lo:g}, {hi:g}), got {_short(value)}.")
        return float(value)

    return check


def _numbers(
    shape: Callable[[GovernorConfig], tuple[int, ...]],
    lo: float,
    hi: float | Callable[[GovernorConfig], float],
    *,
    positive: bool = False,
    integral: bool = False,
):
    def check(value: object, cfg: GovernorConfig, name: str) -> np.ndarray:
        want, top = shape(cfg), hi(cfg) if callable(hi) else hi
        ok_type = isinstance(value, list) and all(
            isinstance(v, list) if len(want) > 1 else (isinstance(v, (int, float)) and not isinstance(v, bool))
            for v in value
        )
        try:
            arr = np.asarray(value, dtype=float) if ok_type else None
        except (TypeError, ValueError, OverflowError):
            arr = None
        if (
            arr is None
            or arr.shape != want
            or not np.all(np.isfinite(arr))
            or np.any(arr < lo)
            or np.any(arr > top)
            or (positive and np.any(arr <= 0))
            or (integral and np.any(arr != np.round(arr)))
        ):
            kind = "positive" if positive else f"in [{lo:g}, {top:g}]"
            raise PriorFormatError(
                f"`{name}` must be {'integers' if integral else 'finite numbers'} {kind} "
                f"of shape {list(want)}, got {_short(value)}."
            )
        return arr.astype(np.int64) if integral else arr

    return check


def _flag(value: object, cfg: GovernorConfig, name: str) -> bool:
    if not isinstance(value, bool):
        raise PriorFormatError(f"`{name}` must be true or false, got {_short(value)}.")
    return value


def _rng(value: object, cfg: GovernorConfig, name: str) -> dict:
    if not isinstance(value, dict) or value.get("bit_generator") != "PCG64":
        raise PriorFormatError(f"`{name}` must be a PCG64 generator state, got {_short(value)}.")
    try:
        np.random.PCG64().state = value
    except (TypeError, ValueError, KeyError, OverflowError):
        raise PriorFormatError(f"`{name}` is not a valid PCG64 state: {_short(value)}.") from None
    return value


def _stats(value: object, cfg: GovernorConfig, name: str) -> SufficientStats:
    return SufficientStats.from_dict(value, cfg.k_max, cfg.num_buckets, f"governor.state.{name}")


def _decode_only(value: object, cfg: GovernorConfig, name: str) -> tuple[np.ndarray, ...]:
    if not isinstance(value, dict) or set(value) - set(DECODE_ONLY_KEYS):
        raise PriorFormatError(f"`{name}` must be an object with keys {list(DECODE_ONLY_KEYS)}, got {_short(value)}.")
    cells = _numbers(lambda c: (c.num_buckets, c.k_max + 1), 0.0, 1e300)
    shape = (cfg.num_buckets, cfg.k_max + 1)
    return tuple(
        cells(value[key], cfg, f"{name}.{key}") if key in value else np.zeros(shape) for key in DECODE_ONLY_KEYS
    )


def _clock(value: object, cfg: GovernorConfig, name: str) -> dict:
    """The clock's correlation state (:mod:`banditk.governor.clock_weight`)."""
    ok = isinstance(value, dict) and set(value) == {"sxy", "sxx", "pairs", "cell", "resid"}
    if ok:
        nums = [value["sxy"], value["sxx"], value["pairs"]] + ([] if value["resid"] is None else [value["resid"]])
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in nums)
        ok = ok and value["sxx"] >= 0 and value["pairs"] >= 0 and abs(value["sxy"]) < 1e300
        cell = value["cell"]
        ok = ok and (
            cell is None
            or (
                isinstance(cell, list)
                and len(cell) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in cell)
                and 0 <= cell[0] < cfg.num_buckets
                and 0 <= cell[1] <= cfg.k_max
            )
        )
    if not ok:
        raise PriorFormatError(
            f"`{name}` must be an object with finite sxy, sxx >= 0, pairs >= 0, cell null or "
            f"[bucket, K] and resid null or a number, got {_short(value)}."
        )
    cell = value["cell"]
    return {
        "sxy": float(value["sxy"]),
        "sxx": float(value["sxx"]),
        "pairs": float(value["pairs"]),
        "cell": None if cell is None else (cell[0], cell[1]),
        "resid": None if value["resid"] is None else float(value["resid"]),
    }


def _fresh_clock(cfg: GovernorConfig) -> dict:
    return {"sxy": 0.0, "sxx": 0.0, "pairs": 0.0, "cell": None, "resid": None}


_cells = lambda c: (c.num_buckets, c.k_max + 1)  # noqa: E731
_buckets = lambda c: (c.num_buckets,)  # noqa: E731

#: field -> (check, default for snapshots written before the field existed; None: required).
SCHEMA: dict[str, tuple[Callable, Callable[[GovernorConfig], object] | None]] = {
    "data": (_stats, None),
    "cell_prior_mean": (_numbers(_cells, 0.0, 1e6, positive=True), None),
    "weights": (_numbers(lambda c: (len(FEATURES),), 0.0, 1e6), None),
    "prefill_price": (_number(0.0, 1e6), lambda c: 0.0),
    "prior_tau2": (_numbers(_buckets, 0.0, MAX_TAU2), lambda c: np.zeros(c.num_buckets)),
    "prior_tau2_mixed": (_numbers(_buckets, 0.0, MAX_TAU2), None),  # default: prior_tau2
    "decode_only_cells": (_decode_only, lambda c: _decode_only({}, c, "")),
    "scale_pending": (_flag, None),
    "rng": (_rng, None),
    "prev_k": (_integer(-1, lambda c: c.k_max), None),
    "prev_bucket": (_integer(-1, lambda c: c.num_buckets - 1), None),
    "held": (_integer(0, 1_000_000), None),
    "epoch": (_integer(1, 1_000_000), lambda c: c.decision_interval),
    "bucket_k": (
        _numbers(_buckets, -1.0, lambda c: float(c.k_max), integral=True),
        lambda c: np.full(c.num_buckets, -1, dtype=np.int64),
    ),
    "bucket_epoch": (
        _numbers(_buckets, 1.0, 1e6, integral=True),
        lambda c: np.full(c.num_buckets, c.decision_interval, dtype=np.int64),
    ),
    "bucket_since_explore": (
        _numbers(_buckets, 0.0, 1e6, integral=True),
        lambda c: np.full(c.num_buckets, c.revisit_spacing, dtype=np.int64),
    ),
    "bucket_played": (
        _numbers(_cells, 0.0, float(_BIG), integral=True),
        lambda c: np.zeros((c.num_buckets, c.k_max + 1), dtype=np.int64),
    ),
    "chunk_k": (
        _numbers(_buckets, -1.0, lambda c: float(c.k_max), integral=True),
        lambda c: np.full(c.num_buckets, -1, dtype=np.int64),
    ),
    "chunk_since_explore": (
        _numbers(_buckets, 0.0, 1e6, integral=True),
        lambda c: np.full(c.num_buckets, c.revisit_spacing, dtype=np.int64),
    ),
    "chunk_hold": (_integer(0, 1_000_000), lambda c: 0),
    "chunk_explore_k": (_integer(0, lambda c: c.k_max), lambda c: 0),
    "chunk_explore_bucket": (_integer(-1, lambda c: c.num_buckets - 1), lambda c: -1),
    "chunk_run": (_integer(0, 1_000_000), lambda c: 0),
    "running_chunk_share": (_number(0.0, 1.000001), lambda c: 0.0),
    "running_chunk_size": (_number(0.0, 1e9), lambda c: 0.0),
    "expecting_chunks": (_flag, lambda c: False),
    "last_k": (_integer(-1, lambda c: c.k_max), lambda c: -1),
    "last_bucket": (_integer(-1, lambda c: c.num_buckets - 1), lambda c: -1),
    "last_chunk": (_flag, lambda c: False),
    "candidate_bucket": (_integer(-1, lambda c: c.num_buckets - 1), None),
    "candidate_steps": (_integer(0, 10_000), None),
    "outlier_run": (_integer(0, _BIG), lambda c: 0),
    "clock": (_clock, _fresh_clock),
    "steps": (_integer(0, _BIG), None),
    "observations": (_integer(0, _BIG), None),
    "switches": (_integer(0, _BIG), None),
    "oscillations": (_integer(0, _BIG), lambda c: 0),
    "outliers": (_integer(0, _BIG), lambda c: 0),
    "mixed_steps": (_integer(0, _BIG), lambda c: 0),
    "k_counts": (_numbers(lambda c: (c.k_max + 1,), 0.0, float(_BIG), integral=True), None),
}


def read_state(state: object, cfg: GovernorConfig) -> dict:
    """Check a snapshot's ``governor.state`` against :data:`SCHEMA`; return the governor's values."""
    if not isinstance(state, dict):
        raise PriorFormatError(f"`governor.state` must be a JSON object, got {_short(state)}.")
    unknown = sorted(set(state) - set(SCHEMA) - OBSOLETE)
    if unknown:
        raise PriorFormatError(f"`governor.state` has unknown field(s) {unknown}; known: {sorted(SCHEMA)}.")
    out = {}
    for name, (check, default) in SCHEMA.items():
        if name in state:
            out[name] = check(state[name], cfg, name)
        elif name == "prior_tau2_mixed":
            out[name] = out["prior_tau2"]
        elif default is not None:
            out[name] = default(cfg)
        else:
            raise PriorFormatError(f"`governor.state.{name}` is missing.")
    return out


def jsonable_rng_state(state: dict) -> dict:
    """A bit generator's state with numpy integers made plain ints (JSON types)."""
    return {
        k: (jsonable_rng_state(v) if isinstance(v, dict) else int(v) if not isinstance(v, str) else v)
        for k, v in state.items()
    }


def dump(gov) -> dict:
    """A :class:`~banditk.governor.bandit.BanditGovernor`'s state as JSON types, one key per
    :data:`SCHEMA` field."""
    post = gov.posterior
    post.fold_pending()
    return {
        "data": post.data.to_dict(),
        "cell_prior_mean": post.cell_prior_mean.tolist(),
        "weights": post.weights.tolist(),
        "prefill_price": post.prefill_price,
        "prior_tau2": post.prior_tau2.tolist(),
        "prior_tau2_mixed": post.prior_tau2_mixed.tolist(),
        "decode_only_cells": {key: a.tolist() for key, a in zip(DECODE_ONLY_KEYS, post.decode_only)},
        "scale_pending": post.scale_pending,
        "rng": jsonable_rng_state(gov._rng.bit_generator.state),
        "prev_k": gov.prev_k,
        "prev_bucket": gov.prev_bucket,
        "held": gov._held,
        "epoch": gov._epoch,
        "bucket_k": gov.bucket_k.tolist(),
        "bucket_epoch": gov.bucket_epoch.tolist(),
        "bucket_since_explore": gov.bucket_since_explore.tolist(),
        "bucket_played": gov.bucket_played.tolist(),
        "chunk_k": gov.chunk_k.tolist(),
        "chunk_since_explore": gov.chunk_since_explore.tolist(),
        "chunk_hold": gov.chunk_hold,
        "chunk_explore_k": gov.chunk_explore_k,
        "chunk_explore_bucket": gov.chunk_explore_bucket,
        "chunk_run": gov.chunk_run,
        "running_chunk_share": gov.running_chunk_share,
        "running_chunk_size": gov.running_chunk_size,
        "expecting_chunks": gov.expecting_chunks,
        "last_k": gov.last_k,
        "last_bucket": gov.last_bucket,
        "last_chunk": gov.last_chunk,
        "candidate_bucket": gov._candidate_bucket,
        "candidate_steps": gov._candidate_steps,
        "outlier_run": post.outlier_run,
        "clock": {**post.clock, "cell": None if post.clock["cell"] is None else list(post.clock["cell"])},
        **gov.counters(),
    }


def restore(gov, raw: object) -> None:
    """Put a checked :func:`dump` back into ``gov``: it continues with the same decisions."""
    s, post = read_state(raw, gov.config), gov.posterior
    post.data, post.decode_only, post.pending = s["data"], s["decode_only_cells"], []
    post.set_model(s["weights"], s["cell_prior_mean"], s["prefill_price"], s["scale_pending"])
    post.outliers, post.outlier_run, post.clock = s["outliers"], s["outlier_run"], s["clock"]
    post.set_prior_tau2(s["prior_tau2"], s["prior_tau2_mixed"])
    post.update_cache()
    gov._rng.bit_generator.state = s["rng"]
    gov.prev_k, gov.prev_bucket, gov._held, gov._epoch = s["prev_k"], s["prev_bucket"], s["held"], s["epoch"]
    gov._candidate_bucket, gov._candidate_steps = s["candidate_bucket"], s["candidate_steps"]
    gov.steps, gov.observations, gov.switches = s["steps"], s["observations"], s["switches"]
    gov.oscillations = s["oscillations"]
    gov.bucket_k, gov.bucket_epoch = s["bucket_k"], s["bucket_epoch"]
    gov.bucket_since_explore, gov.bucket_played = s["bucket_since_explore"], s["bucket_played"]
    gov.chunk_k, gov.chunk_since_explore, gov.chunk_hold = s["chunk_k"], s["chunk_since_explore"], s["chunk_hold"]
    gov.chunk_explore_k, gov.chunk_explore_bucket = s["chunk_explore_k"], s["chunk_explore_bucket"]
    gov.chunk_run = s["chunk_run"]
    gov.running_chunk_share, gov.running_chunk_size = s["running_chunk_share"], s["running_chunk_size"]
    gov.expecting_chunks = s["expecting_chunks"]
    gov.last_k, gov.last_bucket, gov.last_chunk = s["last_k"], s["last_bucket"], s["last_chunk"]
    gov.mixed_steps, gov.k_counts = s["mixed_steps"], s["k_counts"]
    gov.forget_blocked_k()
