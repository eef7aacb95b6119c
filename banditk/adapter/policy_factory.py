"""Build the K-choosing policy an engine core runs, from validated adapter settings.

Used twice: in the front-end process to validate everything before the model
loads (:func:`validate`), and in the engine core to build the live policy
(:func:`build_policy`). Both paths raise :class:`~banditk.core.errors.ConfigError`
(or another :class:`~banditk.core.errors.BanditkError`) naming the field and value.
"""

from __future__ import annotations

from typing import Any

from banditk.adapter.settings import AdapterSettings
from banditk.core.errors import BanditkError, ConfigError


def governor_config_dict(settings: AdapterSettings) -> dict:
    """The dict handed to ``GovernorConfig.from_dict``: the user's keys plus class and K_max."""
    return {**settings.governor_config, "drafter_class": settings.drafter_class_for(), "k_max": settings.k_max}


def policy_spec(settings: AdapterSettings) -> str:
    """The ``make_policy`` spec: ``"fixed"`` alone means K_max."""
    if settings.governor == "fixed":
        return f"fixed:{settings.k_max}"
    return settings.governor


def load_prior(settings: AdapterSettings) -> Any:
    """Load ``settings.prior`` for this drafter class and K_max, or return None."""
    if settings.prior is None:
        return None
    try:
        from banditk.governor.snapshot import load_prior as _load
    except ImportError as e:  # the core's prior file module is not there yet
        raise ConfigError(
            f"governor_config.prior={settings.prior!r} needs banditk.governor.snapshot, which failed to import: {e}."
        ) from e
    try:
        return _load(settings.prior, drafter_class=settings.drafter_class_for(), k_max=settings.k_max)
    except BanditkError as e:
        raise ConfigError(f"governor_config.prior={settings.prior!r}: {e}") from e


def build_policy(settings: AdapterSettings) -> Any:
    """Return a policy (``select``/``observe``/``name``) for ``settings``.

    Raises:
        ConfigError: a governor hyperparameter, the prior, or the spec is invalid.
    """
    if settings.k_max is None:
        raise ConfigError("internal: settings.k_max is not resolved; call AdapterSettings.resolve first.")
    from banditk.core.config import GovernorConfig
    from banditk.governor import BanditGovernor

    gcfg = GovernorConfig.from_dict(governor_config_dict(settings))
    prior = load_prior(settings)
    spec = policy_spec(settings)
    try:
        from banditk.policies import make_policy
    except ImportError:
        make_policy = None
    if make_policy is None:
        if spec != "bandit":
            raise ConfigError(
                f"speculative_config.governor={settings.governor!r} needs banditk.policies.make_policy, which is not available."
            )
        try:
            return BanditGovernor(gcfg, prior=prior)
        except BanditkError as e:
            raise ConfigError(f"governor_config: {e}") from e
    try:
        return make_policy(
            spec,
            k_max=settings.k_max,
            drafter_class=gcfg.drafter_class,
            seed=0 if gcfg.seed is None else gcfg.seed,
            config=settings.governor_config,
            prior=prior,
        )
    except ConfigError:
        raise
    except BanditkError as e:
        raise ConfigError(f"speculative_config.governor={settings.governor!r}: {e}") from e


def validate(settings: AdapterSettings) -> None:
    """Build (and discard) the policy, so a bad config fails in the front end, before model load."""
    check_arm_set(build_policy(settings), settings)


def ks_played(policy: Any) -> set[int] | None:
    """Every K ``policy`` can choose, where that is known from its spec; None otherwise."""
    from banditk.policies.static import ContextTablePolicy, FixedPolicy, NoSpecPolicy, TablePolicy

    if isinstance(policy, NoSpecPolicy):
        return {0}
    if isinstance(policy, FixedPolicy):
        return {policy.k}
    if isinstance(policy, (TablePolicy, ContextTablePolicy)):
        return {int(row[-1]) for row in policy.table}
    k_set = getattr(getattr(policy, "config", None), "k_set", None)
    return set(k_set) if k_set is not None else None


def check_arm_set(policy: Any, settings: AdapterSettings) -> None:
    """With ``governor_config.k_set``, the policy must never ask for a K outside it: on a GPU that
    K has no captured full-graph ladder."""
    if settings.governor_config.get("k_set") is None:
        return
    arms = set(settings.arm_set())
    played = ks_played(policy)
    if played is None:
        raise ConfigError(
            f"governor_config.k_set={sorted(arms)} bounds the bandit, fixed and table governors; "
            f"governor={settings.governor!r} may choose any K. Drop k_set or pick one of those."
        )
    if not played <= arms:
        raise ConfigError(
            f"governor={settings.governor!r} chooses K={sorted(played - arms)}, outside "
            f"governor_config.k_set={sorted(arms)}."
        )
