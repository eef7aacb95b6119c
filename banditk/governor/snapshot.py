"""Snapshot files of a governor: write, read back, merge replicas, turn into a prior.

A snapshot is a prior file (``banditk/snapshot`` schema) plus the governor's config and state
(:mod:`banditk.governor.state`); a restored governor makes the same decisions. Prior files
alone are :mod:`banditk.io.priorfile`, which knows nothing of the governor; :func:`load_prior`
reads either kind, so the import goes one way, governor to io.
"""

from __future__ import annotations

import os

from banditk import __version__
from banditk.core.config import GovernorConfig
from banditk.core.errors import BanditkError, ConfigError, DrafterClassMismatchError, PriorFormatError
from banditk.governor.bandit import BanditGovernor
from banditk.io.atomic import atomic_write_text
from banditk.io.prior import DrafterKey, Prior, now_iso
from banditk.io.priorfile import (
    DEFAULT_STRENGTH,
    PRIOR_SCHEMA,
    SNAPSHOT_SCHEMA,
    _check_header,
    check_fits,
    dumps,
    prior_from_dict,
    prior_to_dict,
    read_document,
    read_json,
)


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
            cfg.context_edges,
        )
    return Prior(
        DrafterKey(cfg.drafter_class),
        cfg.k_max,
        cfg.bucket_edges,
        governor.posterior.prior_loaded.copy(),
        DEFAULT_STRENGTH,
        None,
        {"source": "flat"},
        cfg.context_edges,
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


def load_prior(path: str | os.PathLike, *, drafter_class: str | None = None, k_max: int | None = None) -> Prior:
    """Load a prior from a prior file or a snapshot (its posterior taken as the prior).

    Raises:
        PriorFormatError: the file is malformed, of an unknown schema, or not a prior.
        DrafterClassMismatchError: ``drafter_class`` is given and differs from the prior's.
        IncompatiblePriorError: ``k_max`` is given and the prior covers less.
    """
    doc, schema = read_document(path)
    prior = prior_from_snapshot(doc, name=str(path)) if schema == SNAPSHOT_SCHEMA else prior_from_dict(doc, str(path))
    return check_fits(prior, str(path), drafter_class=drafter_class, k_max=k_max)


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
    return Prior(
        old.key, old.k_max, old.bucket_edges, stats, cap, governor.latency_weights(), provenance, old.context_edges
    )


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
        if (p.k_max, p.bucket_edges, p.context_edges) != (first.k_max, first.bucket_edges, first.context_edges):
            from banditk.core.errors import IncompatiblePriorError

            def shape(q):
                return f"k_max={q.k_max}, bucket_edges={list(q.bucket_edges)}, context_edges={list(q.context_edges)}"

            raise IncompatiblePriorError(f"cannot merge {name!r} ({shape(p)}) with {first_name!r} ({shape(first)}).")
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
            first.context_edges,
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
