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
from banditk.core.config import GovernorConfig
from banditk.core.errors import BanditkError, ConfigError, DrafterClassMismatchError, PriorFormatError
from banditk.governor import BanditGovernor
from banditk.io.atomic import atomic_write_text
from banditk.io.prior import DrafterKey, Prior, now_iso
from banditk.posterior.latency_model import FEATURES
from banditk.posterior.stats import SufficientStats

SCHEMA_VERSION = 1
PRIOR_SCHEMA = "banditk/prior"
SNAPSHOT_SCHEMA = "banditk/snapshot"
#: Largest file read; real priors are a few hundred KB.
MAX_FILE_BYTES = 16 * 1024 * 1024
#: Default prior-strength cap (observations per cell) of imported priors.
DEFAULT_STRENGTH = 200.0


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
        cap = doc.get("strength_cap", DEFAULT_STRENGTH)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < 1e12:
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
        stats = SufficientStats.from_dict(doc.get("stats"), k_max, len(edges), "stats")
    except PriorFormatError as e:
        raise PriorFormatError(f"{name!r}: {e}") from None
    return Prior(key, k_max, tuple(edges), stats, float(cap), weights, provenance)


def _is_number_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def load_prior(path: str | os.PathLike, *, drafter_class: str | None = None, k_max: int | None = None) -> Prior:
    """Load a prior (or a snapshot, taken as a prior of its posterior) from ``path``.

    Raises:
        PriorFormatError: the file is malformed, of an unknown schema, or not a prior.
        DrafterClassMismatchError: ``drafter_class`` is given and differs from the prior's.
    """
    doc = read_json(path)
    schema = _check_header(doc, str(path))
    prior = prior_from_snapshot(doc, name=str(path)) if schema == SNAPSHOT_SCHEMA else prior_from_dict(doc, str(path))
    if drafter_class is not None and prior.key.drafter_class != drafter_class:
        raise DrafterClassMismatchError(
            f"{str(path)!r} is a prior for drafter class {prior.key.drafter_class!r}, not {drafter_class!r}: "
            "parameters never transfer across drafter classes."
        )
    if k_max is not None and prior.k_max < k_max:
        from banditk.core.errors import IncompatiblePriorError

        raise IncompatiblePriorError(f"{str(path)!r} covers k_max={prior.k_max}, below the server's k_max={k_max}.")
    return prior


# ---- writing ----------------------------------------------------------------------


def prior_to_dict(prior: Prior) -> dict:
    return {
        "schema": PRIOR_SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "drafter": prior.key.to_dict(),
        "k_max": prior.k_max,
        "bucket_edges": list(prior.bucket_edges),
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


def governor_prior(governor: BanditGovernor) -> Prior:
    """The prior a governor runs on (a flat one if it was built without)."""
    cfg = governor.config
    if governor.prior is not None:
        p = governor.prior
        return Prior(
            p.key,
            cfg.k_max,
            cfg.bucket_edges,
            governor.posterior.prior_loaded.copy(),
            p.strength_cap,
            p.latency_weights,
            dict(p.provenance),
        )
    return Prior(
        DrafterKey(cfg.drafter_class),
        cfg.k_max,
        cfg.bucket_edges,
        governor.posterior.prior_loaded.copy(),
        DEFAULT_STRENGTH,
        None,
        {"source": "flat"},
    )


def snapshot_dict(governor: BanditGovernor, provenance: dict | None = None) -> dict:
    """A snapshot document of ``governor``: restoring it continues with the same decisions."""
    doc = prior_to_dict(governor_prior(governor))
    # A flat governor's key names its class only; the server's provenance knows the rest.
    for field in ("method", "target_model", "draft_model", "hardware"):
        if not doc["drafter"].get(field) and isinstance((provenance or {}).get(field), str):
            doc["drafter"][field] = provenance[field]
    doc["schema"] = SNAPSHOT_SCHEMA
    doc["governor"] = {"config": governor.config.to_dict(), "state": governor.get_state()}
    doc["snapshot"] = {"written": now_iso(), "banditk_version": __version__, **(provenance or {})}
    return doc


def save_snapshot(path: str | os.PathLike, governor: BanditGovernor, provenance: dict | None = None) -> None:
    """Write a snapshot of ``governor`` atomically."""
    atomic_write_text(path, dumps(snapshot_dict(governor, provenance)))


def governor_from_snapshot(doc: dict, name: str = "<input>") -> BanditGovernor:
    """Rebuild the governor a snapshot was taken of."""
    if _check_header(doc, name) != SNAPSHOT_SCHEMA:
        raise PriorFormatError(f"{name!r} is a prior, not a snapshot: it has no governor state.")
    prior = prior_from_dict(doc, name)
    gov_doc = doc.get("governor")
    if not isinstance(gov_doc, dict) or not isinstance(gov_doc.get("state"), dict):
        raise PriorFormatError(f"{name!r}: `governor` must be an object with `config` and `state`.")
    try:
        config = GovernorConfig.from_dict(gov_doc.get("config"))
    except ConfigError as e:
        raise PriorFormatError(f"{name!r}: governor.config: {e}") from None
    try:
        governor = BanditGovernor(config, prior)
    except BanditkError as e:
        raise PriorFormatError(f"{name!r}: the snapshot's prior does not fit its own config: {e}") from None
    try:
        governor.set_state(gov_doc["state"])
    except BanditkError as e:
        raise PriorFormatError(f"{name!r}: governor.state: {e}") from None
    return governor


def load_snapshot(path: str | os.PathLike) -> BanditGovernor:
    return governor_from_snapshot(read_json(path), str(path))


def prior_from_snapshot(doc: dict, *, strength: float | None = None, name: str = "<input>", source: str = "") -> Prior:
    """Turn a snapshot's posterior into a prior for another deployment.

    The posterior's statistics (prior plus live data) become the new prior's
    pseudo-observations, capped at ``strength`` observations per position, cell and
    regression so that the new deployment's live data can overrule them.
    """
    governor = governor_from_snapshot(doc, name)
    old = prior_from_dict(doc, name)
    governor.posterior.fold_pending()
    cap = float(strength) if strength is not None else old.strength_cap
    stats = (governor.posterior.prior_stats + governor.data).capped(cap)
    provenance = {
        "source": "snapshot",
        "snapshot": source or name,
        "imported": now_iso(),
        "observations": governor.observations,
        "snapshot_written": (doc.get("snapshot") or {}).get("written")
        if isinstance(doc.get("snapshot"), dict)
        else None,
        "previous_prior": old.provenance,
    }
    return Prior(old.key, old.k_max, old.bucket_edges, stats, cap, governor.latency_weights(), provenance)


def _key_text(key) -> str:
    return (
        f"class={key.drafter_class} method={key.method or '-'} target={key.target_model or '-'} "
        f"draft={key.draft_model or '-'} hardware={key.hardware or '-'}"
    )


def merge_documents(docs: list[tuple[str, dict]]) -> dict:
    """Merge priors, or snapshots from several replicas, by adding sufficient statistics.

    Snapshots: data statistics and counters add up; prior, configuration and random
    state come from the first. Priors: their statistics add up.
    """
    if len(docs) < 2:
        raise PriorFormatError(f"merge needs at least two files, got {len(docs)}.")
    schemas = {_check_header(doc, name) for name, doc in docs}
    if len(schemas) != 1:
        raise PriorFormatError("merge takes either all priors or all snapshots, not a mix.")
    priors = [(name, prior_from_dict(doc, name)) for name, doc in docs]
    first_name, first = priors[0]
    seen: dict[str, str] = {}
    for name, doc in docs:
        same = seen.setdefault(dumps(doc), name)
        if same != name:
            raise PriorFormatError(
                f"{name!r} is the same file as {same!r}: merging a file with itself counts it twice."
            )
    for name, p in priors[1:]:
        if p.key != first.key and p.key.drafter_class == first.key.drafter_class:
            raise PriorFormatError(
                f"cannot merge {name!r} (drafter {_key_text(p.key)}) with {first_name!r} ({_key_text(first.key)}): "
                "a merge adds statistics of the same drafter, target model and hardware."
            )
        if p.key.drafter_class != first.key.drafter_class:
            raise DrafterClassMismatchError(
                f"cannot merge {name!r} (drafter class {p.key.drafter_class!r}) with {first_name!r} "
                f"({first.key.drafter_class!r}): parameters never transfer across drafter classes."
            )
        if p.k_max != first.k_max or p.bucket_edges != first.bucket_edges:
            from banditk.core.errors import IncompatiblePriorError

            raise IncompatiblePriorError(
                f"cannot merge {name!r} (k_max={p.k_max}, bucket_edges={list(p.bucket_edges)}) with {first_name!r} "
                f"(k_max={first.k_max}, bucket_edges={list(first.bucket_edges)})."
            )
    names = [name for name, _ in docs]
    if schemas == {PRIOR_SCHEMA}:
        stats = first.stats
        for _, p in priors[1:]:
            stats = stats + p.stats
        merged = Prior(
            first.key,
            first.k_max,
            first.bucket_edges,
            stats,
            max(p.strength_cap for _, p in priors),
            first.latency_weights,
            {"source": "merge", "merged": names, "created": now_iso()},
        )
        return prior_to_dict(merged)
    governors = [governor_from_snapshot(doc, name) for name, doc in docs]
    base = governors[0]
    for g in governors:
        g.posterior.fold_pending()
    data = base.data
    for g in governors[1:]:
        data = data + g.data
        base.steps += g.steps
        base.observations += g.observations
        base.switches += g.switches
        base.k_counts = base.k_counts + g.k_counts
    base.posterior.data = data
    base.posterior.refresh()
    return snapshot_dict(base, {"merged": names})
