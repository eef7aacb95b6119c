"""The protocol's policies as vLLM ``--speculative-config`` values.

``nospec`` runs no drafter at all; ``fixed:K`` is vLLM's own static K; ``table:SPEC`` is
vLLM's own batch-size table; ``pinned:K`` is banditk's plugin pinned to K (vLLM's dynamic-K
mode and the governed scheduler, no learning: it prices the mode against ``fixed:K``);
``bandit`` is banditk through its plugin (one flag), with
``bandit+prior`` starting from a prior file and ``bandit+context`` with context buckets
(:data:`banditk.core.buckets.DEFAULT_CONTEXT_EDGES`); ``random`` draws every K at random, to record
telemetry a prior is fitted from. A suffix ``@v1`` runs a governed policy on vLLM's V1 model
runner (``VLLM_USE_V2_MODEL_RUNNER=0``: PIECEWISE graphs on a GPU), next to the default, which
on a GPU is Model Runner V2 with a FULL decode ladder per K (:data:`server_env_for`).
"""

from __future__ import annotations

import json
from pathlib import Path

from banditk.core.errors import ConfigError


def speculative_config(
    policy: str,
    *,
    draft: str,
    k_max: int,
    method: str = "draft_model",
    work_dir: Path | None = None,
    prior: Path | None = None,
    seed: int = 0,
) -> dict | None:
    """The ``--speculative-config`` for ``policy``; None for ``nospec``.

    >>> speculative_config("bandit@v1", draft="/d", k_max=3)["governor"]
    'bandit'

    >>> speculative_config("fixed:2", draft="/d", k_max=3)["num_speculative_tokens"]
    2
    >>> speculative_config("bandit", draft="/d", k_max=3)["governor"]
    'bandit'
    """
    if policy.endswith(V1_SUFFIX):
        inner = policy[: -len(V1_SUFFIX)]
        if inner not in GOVERNED:
            raise ConfigError(f"live policy {policy!r}: {V1_SUFFIX} applies to {', '.join(GOVERNED)}.")
        policy = inner
    base = {"method": method, "num_speculative_tokens": k_max}
    if method == "draft_model":
        base["model"] = draft
    if policy == "nospec":
        return None
    if policy.startswith("fixed:"):
        return {**base, "num_speculative_tokens": _k_of(policy, k_max, low=1)}
    if policy.startswith("pinned:"):
        k = _k_of(policy, k_max, low=0)
        return {**base, "governor": f"fixed:{k}"}
    if policy.startswith("table:"):
        return {**base, "num_speculative_tokens_per_batch_size": json.loads(policy.split(":", 1)[1])}
    if policy == "random":
        # Every K at random (banditk's exploration policy): telemetry for fitting a prior.
        gc = {"seed": seed}
        if work_dir is not None:
            gc["telemetry_log"] = str(work_dir / "telemetry.jsonl")
        return {**base, "governor": "random", "governor_config": gc}
    if policy in ("bandit", "bandit+prior", "bandit+context"):
        gc: dict = {"seed": seed, "state_log_interval_s": 10}
        if work_dir is not None:
            gc["telemetry_log"] = str(work_dir / "telemetry.jsonl")
            gc["snapshot_path"] = str(work_dir / "snapshot.json")
            gc["snapshot_interval_s"] = 30
        if policy == "bandit+prior":
            if prior is None:
                raise ConfigError("live policy 'bandit+prior' needs a prior file.")
            gc["prior"] = str(prior)
        if policy == "bandit+context":
            from banditk.core.buckets import DEFAULT_CONTEXT_EDGES

            gc["context_edges"] = list(DEFAULT_CONTEXT_EDGES)
        return {**base, "governor": "bandit", "governor_config": gc}
    raise ConfigError(
        f"Unknown live policy {policy!r}; expected nospec, fixed:K, pinned:K, table:[[lo,hi,K],...], bandit, "
        "bandit+prior, bandit+context, random (a governed one with @v1: on vLLM's V1 runner)."
    )


V1_SUFFIX = "@v1"
GOVERNED = ("bandit", "bandit+prior", "bandit+context")


def server_env_for(policy: str) -> dict[str, str]:
    """Environment variables ``policy``'s server needs beyond the machine's.

    >>> server_env_for("bandit@v1"), server_env_for("bandit")
    ({'VLLM_USE_V2_MODEL_RUNNER': '0'}, {})
    """
    return {"VLLM_USE_V2_MODEL_RUNNER": "0"} if policy.endswith(V1_SUFFIX) else {}


def _k_of(policy: str, k_max: int, low: int) -> int:
    """K of ``fixed:K`` / ``pinned:K``, or an error naming the policy (vLLM's fixed mode needs K >= 1;
    a pinned governor may play K = 0).

    >>> _k_of("pinned:0", 3, low=0)
    0
    >>> _k_of("fixed:x", 3, low=1)
    Traceback (most recent call last):
    banditk.core.errors.ConfigError: live policy 'fixed:x': K must be an integer in [1, 3].
    """
    text = policy.split(":", 1)[1]
    if not text.strip().isdigit() or not low <= int(text) <= k_max:
        raise ConfigError(f"live policy {policy!r}: K must be an integer in [{low}, {k_max}].")
    return int(text)
