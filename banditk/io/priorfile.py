"""Prior and snapshot files: versioned JSON, parsed strictly, written atomically.

A **prior** file (``"schema": "banditk/prior"``) holds pseudo-observations for one
drafter class. A **snapshot** (``"schema": "banditk/snapshot"``) holds a live governor:
its prior, its configuration and its full state (data statistics, random-generator
state, counters), so that a restored governor continues with the same decisions.
Files are data only: JSON, never pickle; size is capped before parsing.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np

from banditk import __version__
from banditk.core.buckets import check_context_edges
from banditk.core.config import GovernorConfig
from banditk.core.errors import ConfigError, DrafterClassMismatchError, PriorFormatError
from banditk.io.atomic import atomic_write_text
from banditk.io.prior import DrafterKey, Prior
from banditk.posterior.latency_model import FEATURES
from banditk.posterior.stats import SufficientStats

SCHEMA_VERSION = 1
PRIOR_SCHEMA = "banditk/prior"
SNAPSHOT_SCHEMA = "banditk/snapshot"
#: Largest file read; real priors are a few hundred KB.
MAX_FILE_BYTES = 16 * 1024 * 1024
#: Default prior-strength cap (observations per cell) of imported priors.
DEFAULT_STRENGTH = 200.0
#: A prior's `strength_cap` must be below this (observations per cell and position).
MAX_STRENGTH = 1e12


# ---- reading ----------------------------------------------------------------------


def read_json(path: str | os.PathLike) -> dict:
    """Read a JSON object from a regular file, at most ``MAX_FILE_BYTES`` whatever ``st_size``
    says (``/dev/zero`` reports 0); errors name the file."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError as e:
        raise PriorFormatError(f"Cannot read {str(p)!r}: {e.strerror}.") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        if stat.S_ISREG(st.st_mode):
            raise PriorFormatError(
                f"{str(p)!r} is {st.st_size} bytes, over the {MAX_FILE_BYTES}-byte limit for prior files."
            )
        raise PriorFormatError(f"{str(p)!r} is not a regular file, so it is not a prior file.")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise PriorFormatError(f"Cannot read {str(p)!r}: {e.strerror}.") from None
    if len(data) > MAX_FILE_BYTES:
        raise PriorFormatError(f"{str(p)!r} is over the {MAX_FILE_BYTES}-byte limit for prior files.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PriorFormatError(f"{str(p)!r} is not UTF-8 text, so it is not a prior file.") from None
    return parse_json(text, str(p))


def parse_json(text: str, name: str = "<input>") -> dict:
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise PriorFormatError(f"{name!r} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}.") from None
    except RecursionError:
        raise PriorFormatError(f"{name!r} is nested too deeply to be a prior file.") from None
    if not isinstance(doc, dict):
        raise PriorFormatError(f"{name!r} is not a prior file: the top level is a {type(doc).__name__}, not an object.")
    return doc


def _reject_constant(name: str) -> None:
    raise PriorFormatError(f"JSON constant {name} is not allowed in prior files (values must be finite).")


def _check_header(doc: dict, name: str) -> str:
    schema = doc.get("schema")
    if schema not in (PRIOR_SCHEMA, SNAPSHOT_SCHEMA):
        raise PriorFormatError(
            f"{name!r} is not a banditk prior or snapshot: `schema` is {schema!r}, expected "
            f"{PRIOR_SCHEMA!r} or {SNAPSHOT_SCHEMA!r}."
        )
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PriorFormatError(
            f"{name!r} has unknown `schema_version`={version!r}; this banditk ({__version__}) reads version {SCHEMA_VERSION}."
        )
    return schema


def prior_from_dict(doc: dict, name: str = "<input>") -> Prior:
    """Parse the prior part of a prior or snapshot document."""
    _check_header(doc, name)
    try:
        drafter = doc.get("drafter")
        if not isinstance(drafter, dict):
            raise PriorFormatError(f"`drafter` must be an object, got {drafter!r}.")
        fields = {}
        for src, dst in (
            ("method", "method"),
            ("target_model", "target_model"),
            ("draft_model", "draft_model"),
            ("hardware", "hardware"),
        ):
            v = drafter.get(src, "")
            if not isinstance(v, str):
                raise PriorFormatError(f"`drafter.{src}` must be a string, got {v!r}.")
            fields[dst] = v
        key = DrafterKey(drafter_class=drafter.get("class"), **fields)
        k_max = doc.get("k_max")
        if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= 64:
            raise PriorFormatError(f"`k_max` must be an integer in [1, 64], got {k_max!r}.")
        try:
            edges = GovernorConfig(
                drafter_class=key.drafter_class, k_max=k_max, bucket_edges=tuple(doc.get("bucket_edges") or ())
            ).bucket_edges
        except (ConfigError, TypeError):
            raise PriorFormatError(
                f"`bucket_edges` must be increasing positive integers from 1, got {doc.get('bucket_edges')!r}."
            ) from None
        # Files from before context buckets have none: one context bucket, as they were learnt.
        raw_ctx = doc.get("context_edges", [0])
        try:
            ctx_edges = check_context_edges(raw_ctx)
        except ConfigError:
            raise PriorFormatError(
                f"`context_edges` must be increasing integers from 0 (at most 8), got {raw_ctx!r}."
            ) from None
        cap = doc.get("strength_cap", DEFAULT_STRENGTH)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < MAX_STRENGTH:
            raise PriorFormatError(f"`strength_cap` must be a positive number, got {cap!r}.")
        model = doc.get("latency_model", {})
        if not isinstance(model, dict):
            raise PriorFormatError(f"`latency_model` must be an object, got {model!r}.")
        weights = model.get("weights")
        if weights is not None:
            w = np.asarray(weights, dtype=float) if _is_number_list(weights) else None
            if w is None or w.shape != (len(FEATURES),) or not np.all(np.isfinite(w)):
                raise PriorFormatError(
                    f"`latency_model.weights` must be {len(FEATURES)} finite numbers, got {weights!r}."
                )
            weights = w
        provenance = doc.get("provenance", {})
        if not isinstance(provenance, dict):
            raise PriorFormatError(f"`provenance` must be an object, got {provenance!r}.")
        stats = SufficientStats.from_dict(doc.get("stats"), k_max, len(edges) * len(ctx_edges), "stats")
    except PriorFormatError as e:
        raise PriorFormatError(f"{name!r}: {e}") from None
    return Prior(key, k_max, tuple(edges), stats, float(cap), weights, provenance, ctx_edges)


def _is_number_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def read_document(path: str | os.PathLike) -> tuple[dict, str]:
    """A prior or snapshot file's JSON and its schema, checked (size, header, version).

    Raises:
        PriorFormatError: the file is malformed or of an unknown schema.
    """
    doc = read_json(path)
    return doc, _check_header(doc, str(path))


def check_fits(prior: Prior, name: str, *, drafter_class: str | None = None, k_max: int | None = None) -> Prior:
    """``prior`` where it serves ``drafter_class`` and covers ``k_max`` (either may be None).

    Raises:
        DrafterClassMismatchError: ``drafter_class`` differs from the prior's.
        IncompatiblePriorError: the prior covers a smaller K_max.
    """
    if drafter_class is not None and prior.key.drafter_class != drafter_class:
        raise DrafterClassMismatchError(
            f"{name!r} is a prior for drafter class {prior.key.drafter_class!r}, not {drafter_class!r}: "
            "parameters never transfer across drafter classes."
        )
    if k_max is not None and prior.k_max < k_max:
        from banditk.core.errors import IncompatiblePriorError

        raise IncompatiblePriorError(f"{name!r} covers k_max={prior.k_max}, below the server's k_max={k_max}.")
    return prior


def load_prior_file(path: str | os.PathLike, *, drafter_class: str | None = None, k_max: int | None = None) -> Prior:
    """Load a prior file (``"schema": "banditk/prior"``). A snapshot is a governor's state:
    :func:`banditk.governor.snapshot.load_prior` reads either.

    Raises:
        PriorFormatError: the file is malformed, of an unknown schema, or a snapshot.
        DrafterClassMismatchError, IncompatiblePriorError: as :func:`check_fits`.
    """
    doc, schema = read_document(path)
    if schema == SNAPSHOT_SCHEMA:
        raise PriorFormatError(
            f"{str(path)!r} is a snapshot, not a prior file: read it with banditk.load_prior "
            "(banditk.governor.snapshot.load_prior), which turns a snapshot's posterior into a prior."
        )
    return check_fits(prior_from_dict(doc, str(path)), str(path), drafter_class=drafter_class, k_max=k_max)


# ---- writing ----------------------------------------------------------------------


def prior_to_dict(prior: Prior) -> dict:
    return {
        "schema": PRIOR_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "drafter": prior.key.to_dict(),
        "k_max": prior.k_max,
        "bucket_edges": list(prior.bucket_edges),
        # Written only when there are context buckets: a file without them reads as one.
        **({"context_edges": list(prior.context_edges)} if len(prior.context_edges) > 1 else {}),
        "strength_cap": prior.strength_cap,
        "latency_model": {
            "features": list(FEATURES),
            "weights": None if prior.latency_weights is None else np.asarray(prior.latency_weights).tolist(),
        },
        "stats": prior.stats.to_dict(),
        "provenance": prior.provenance,
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def save_prior(path: str | os.PathLike, prior: Prior) -> None:
    atomic_write_text(path, dumps(prior_to_dict(prior)))


# ---- snapshots --------------------------------------------------------------------
