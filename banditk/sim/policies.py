"""Policy specs as the simulator runs them, with the server mode each implies.

``nospec`` runs a server without speculation (no drafter, FULL cudagraphs);
``fixed:K`` is vLLM's static K (FULL cudagraphs for decode-only batches);
every policy that changes K per step needs vLLM's dynamic-K mode, which runs
the scenario's ``dynamic_cudagraph`` (PIECEWISE by default).

``bandit+context`` is the bandit with context buckets
(:data:`banditk.core.buckets.DEFAULT_CONTEXT_EDGES`): K follows the batch's mean context too.

``peer:vllm-adaptive-k`` is capped by the table a governed server installs to
enable dynamic K (``[[1, max_num_seqs, K_max]]``, i.e. no cap), not by the
scenario's ``table``: that table's collapse is measured by the ``table`` policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from banditk.core.errors import ConfigError
from banditk.policies.base import Policy
from banditk.sim.oracle import OraclePolicy
from banditk.sim.scenario import Scenario

SIM_POLICY_SPECS = (
    "bandit",
    "bandit+prior",
    "bandit+context",
    "nospec",
    "fixed:K",
    "table",
    "table:[[lo,hi,K],...]",
    "table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]",
    "ucb",
    "peer:sglang",
    "peer:vllm-adaptive-k",
    "oracle",
)


@dataclass
class SimPolicy:
    """A built policy and the server mode it runs in."""

    spec: str
    policy: Policy
    speculation: bool
    dynamic: bool


REPO_PRIORS = Path(__file__).resolve().parents[2] / "priors"


def find_shipped_prior(scn: Scenario, root: str | Path | None = None) -> Path | None:
    """The shipped prior for the scenario's drafter class and hardware, if one exists.

    Looks in ``root`` (default: the repository's ``priors/``) for a ``*.json``
    whose name contains the drafter class (``_`` and ``-`` alike) and ends with the
    hardware name, e.g. ``priors/mtp-qwen3.6-gb10.json``. A class name that is a prefix
    of another (``mtp`` of ``mtp-step``) only matches when followed by the
    hardware or a separator other than the longer class's suffix; a hardware name
    matches whole (``h200`` is not ``8xh200``).
    """
    d = Path(root) if root is not None else REPO_PRIORS
    if not d.is_dir():
        return None
    cls = scn.drafter_class.replace("_", "-")
    longer = [c.replace("_", "-") for c in ("mtp-step", "mtp-external") if c != cls and c.startswith(cls)]
    for p in sorted(d.glob("*.json")):
        n = p.name.replace("_", "-")
        stem = n[: -len(".json")]
        if (
            cls in stem
            and (stem == scn.hardware or stem.endswith("-" + scn.hardware))
            and not any(c in n for c in longer)
        ):
            return p
    return None


def build_policy(spec: str, scn: Scenario, *, seed: int = 0, prior_path: str | Path | None = None) -> SimPolicy:
    """Build the policy named ``spec`` for scenario ``scn``.

    ``table`` alone uses the scenario's table. ``bandit+prior`` needs
    ``prior_path`` (or a shipped prior found by :func:`find_shipped_prior`).

    >>> from banditk.sim.scenario import parse_scenario
    >>> s = parse_scenario({"hardware": "gb10", "model": "qwen3.5-122b-a10b-int4",
    ...     "drafter": {"class": "mtp", "k_max": 2, "acceptance": [0.8, 0.6]},
    ...     "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180}})
    >>> b = build_policy("fixed:2", s)
    >>> (b.policy.name, b.speculation, b.dynamic)
    ('fixed:2', True, False)
    """
    from banditk.policies import make_policy  # the core's factory

    k_max, cls = scn.k_max, scn.drafter_class
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"`--policy`={spec!r} must be one of: {', '.join(SIM_POLICY_SPECS)}.")
    if spec == "oracle":
        return SimPolicy(spec, OraclePolicy(k_max), True, True)
    if spec.startswith("peer:"):
        from banditk.policies.peers import make_peer

        try:
            peer = make_peer(spec.split(":", 1)[1], k_max=k_max)
        except ConfigError as e:
            raise ConfigError(f"`--policy`={spec!r}: {e}") from None
        return SimPolicy(spec, peer, True, True)
    if spec == "table":
        spec = "table:" + json.dumps(scn.table, separators=(",", ":"))
    if spec == "bandit+prior" and prior_path is None:
        prior_path = find_shipped_prior(scn)
        if prior_path is None:
            raise ConfigError(
                f"`--policy`='bandit+prior': no prior given (--prior) and none shipped for "
                f"drafter class {cls!r} on {scn.hardware!r} under priors/."
            )
    prior = None
    if prior_path is not None and spec in ("bandit", "bandit+prior", "bandit+context"):
        from banditk.io.priorfile import load_prior

        prior = load_prior(prior_path, drafter_class=cls, k_max=k_max)
    config = None
    if spec == "bandit+context":
        from banditk.core.buckets import DEFAULT_CONTEXT_EDGES

        config = {"context_edges": DEFAULT_CONTEXT_EDGES}
    base = "bandit" if spec in ("bandit+prior", "bandit+context") else spec
    pol = make_policy(base, k_max=k_max, drafter_class=cls, seed=seed, prior=prior, config=config)
    if spec != base:
        pol.name = spec
    nospec = bool(getattr(pol, "disables_speculation", False))
    static = base.startswith("fixed:") or nospec
    return SimPolicy(spec, pol, not nospec, not static)
