"""Policies that choose K: the bandit governor and its baselines, behind one interface.

``make_policy("bandit" | "nospec" | "fixed:K" | "table:[[lo,hi,K],...]"
| "table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]" | "ucb" | "peer:...")`` builds any of them.
"""

from __future__ import annotations

from banditk.core.config import GovernorConfig
from banditk.core.errors import ConfigError
from banditk.policies.base import Policy
from banditk.policies.static import ContextTablePolicy, FixedPolicy, NoSpecPolicy, TablePolicy
from banditk.policies.ucb import UCBPolicy

__all__ = [
    "Policy",
    "ContextTablePolicy",
    "FixedPolicy",
    "NoSpecPolicy",
    "TablePolicy",
    "UCBPolicy",
    "make_policy",
    "POLICY_SPECS",
]

POLICY_SPECS = (
    "bandit",
    "nospec",
    "fixed:K",
    "table:[[lo,hi,K],...]",
    "table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]",
    "ucb",
    "peer:sglang",
    "peer:vllm-adaptive-k",
    "random",
)


def make_policy(
    spec: str, *, k_max: int, drafter_class: str, seed: int = 0, config: dict | None = None, prior=None
) -> Policy:
    """Build a policy from its name.

    Args:
        spec: ``bandit``, ``nospec``, ``fixed:K``, ``table:[[lo,hi,K],...]``,
            ``table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]`` (batch size x mean context,
            see :class:`~banditk.policies.static.ContextTablePolicy`), ``ucb``,
            ``peer:sglang`` or ``peer:vllm-adaptive-k``.
        k_max: the server's largest K.
        drafter_class: the drafter class.
        seed: random seed (bandit).
        config: extra :class:`~banditk.core.config.GovernorConfig` fields (bandit).
        prior: a :class:`~banditk.io.prior.Prior` (bandit).

    Raises:
        ConfigError: unknown spec or bad parameters, naming the spec.

    >>> make_policy("fixed:2", k_max=4, drafter_class="mtp").name
    'fixed:2'
    """
    if not isinstance(spec, str):
        raise ConfigError(f"policy must be a string, got {spec!r}.")
    if spec == "bandit":
        from banditk.governor import BanditGovernor

        fields = {"drafter_class": drafter_class, "k_max": k_max, "seed": seed, **(config or {})}
        return BanditGovernor(GovernorConfig.from_dict(fields), prior)
    if spec == "nospec":
        return NoSpecPolicy()
    if spec.startswith("fixed:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"policy {spec!r}: K must be an integer, as in fixed:2.") from None
        return FixedPolicy(k, k_max=k_max)
    if spec.startswith("table:"):
        return TablePolicy(spec.split(":", 1)[1], k_max=k_max)
    if spec.startswith("table-ctx:"):
        return ContextTablePolicy(spec.split(":", 1)[1], k_max=k_max)
    if spec == "ucb":
        return UCBPolicy(k_max=k_max)
    if spec == "random":
        from banditk.policies.explore import RandomKPolicy

        return RandomKPolicy(k_max=k_max, seed=seed)
    if spec.startswith("peer:"):
        try:
            from banditk.policies import peers
        except ImportError:
            raise ConfigError(f"policy {spec!r}: the peer policies are not available in this build.") from None
        return peers.make_peer(spec.split(":", 1)[1], k_max=k_max)
    raise ConfigError(f"Unknown policy {spec!r}; expected one of: {', '.join(POLICY_SPECS)}.")
