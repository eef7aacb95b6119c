"""`k_set` bounds the arms: the governor never plays, explores or restores a K outside it."""

import numpy as np
import pytest

from banditk.adapter.policy_factory import validate
from banditk.adapter.settings import parse_settings
from banditk.core.config import GovernorConfig
from banditk.core.errors import ConfigError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.governor.snapshot import governor_from_snapshot, snapshot_dict

# Step time per K at B = 8: K = 3 is the best of 0..4 by a wide margin, so a governor that may
# play it finds it; one bounded to {0, 1, 2, 4} must settle elsewhere without ever trying it.
TIMES = np.array([0.030, 0.034, 0.037, 0.039, 0.060])


def _run(g: BanditGovernor, steps: int, batch: int = 8, acc: float = 0.8, prefill_every: int = 0) -> list[int]:
    rng, ks = np.random.default_rng(1), []
    for step in range(steps):
        prefill = 256 if prefill_every and step % prefill_every == 0 else 0
        d = g.select(StepContext(batch, 4, "mtp", prefill_tokens=prefill))
        ks.append(d.k)
        accepted = np.array([int(np.argmin(np.append(rng.random(d.k) < acc, False))) for _ in range(batch)])
        t = TIMES[d.k] * (1 + 0.1 * rng.standard_normal()) + (0.02 if prefill else 0.0)
        g.observe(d, StepOutcome(np.full(batch, d.k), np.minimum(accepted, d.k), max(t, 1e-3), prefill_tokens=prefill))
    return ks


def test_the_full_arm_set_finds_the_k_that_the_bounded_one_must_never_play():
    assert np.bincount(_run(BanditGovernor(GovernorConfig("mtp", 4)), 3000)[-500:]).argmax() == 3


@pytest.mark.parametrize("prefill_every", [0, 7])
def test_a_bounded_governor_never_plays_a_k_outside_its_set(prefill_every):
    g = BanditGovernor(GovernorConfig("mtp", 4, k_set=(0, 1, 2, 4)))
    ks = _run(g, 3000, prefill_every=prefill_every)
    assert 3 not in ks
    assert np.bincount(ks[-500:], minlength=5).argmax() == 2  # the best K it may play
    assert g.k_counts[3] == 0


def test_k_set_is_checked_and_names_the_field():
    assert GovernorConfig("mtp", 4, k_set=[4, 0]).k_set == (0, 4)
    for bad in ([], [5], [1, 1], [True], "0,1", [-1]):
        with pytest.raises(ConfigError, match="`k_set`"):
            GovernorConfig("mtp", 4, k_set=bad)


def test_k_set_round_trips_a_snapshot_and_is_absent_where_unset():
    assert "k_set" not in GovernorConfig("mtp", 4).to_dict()
    g = BanditGovernor(GovernorConfig("mtp", 4, k_set=(0, 2, 4)))
    _run(g, 200)
    back = governor_from_snapshot(snapshot_dict(g))
    assert back.config.k_set == (0, 2, 4) and back.prev_k == g.prev_k


def test_state_restored_into_a_smaller_arm_set_drops_its_outside_incumbents():
    g = BanditGovernor(GovernorConfig("mtp", 4))
    _run(g, 3000)
    assert g.prev_k == 3
    doc = snapshot_dict(g)
    doc["governor"]["config"]["k_set"] = [0, 1, 2, 4]
    back = governor_from_snapshot(doc)
    assert back.prev_k == -1 and 3 not in back.bucket_k.tolist()
    assert 3 not in _run(back, 300)


def _settings(governor: str, k_set, **kw):
    return parse_settings(governor, {"k_set": k_set, **kw}).resolve(method="mtp", k_max=4)


def test_the_adapter_checks_k_set_against_k_max_and_the_policy():
    assert _settings("bandit", [0, 2, 4]).arm_set() == (0, 2, 4)
    validate(_settings("bandit", [0, 2, 4]))
    validate(_settings("fixed:2", [0, 2, 4]))
    validate(_settings("table:[[1,4,4],[5,64,2]]", [0, 2, 4]))
    with pytest.raises(ConfigError, match=r"governor_config\.k_set"):
        _settings("bandit", [0, 5])
    with pytest.raises(ConfigError, match=r"fallback_k=3 is not in governor_config\.k_set"):
        _settings("bandit", [0, 2, 4], fallback_k=3)
    with pytest.raises(ConfigError, match=r"chooses K=\[3\], outside governor_config\.k_set"):
        validate(_settings("fixed:3", [0, 2, 4]))
    with pytest.raises(ConfigError, match=r"chooses K=\[1\]"):
        validate(_settings("table:[[1,4,4],[5,64,1]]", [0, 2, 4]))
    with pytest.raises(ConfigError, match="may choose any K"):
        validate(_settings("ucb", [0, 2, 4]))


def test_the_fallback_k_defaults_to_the_largest_k_of_the_set():
    assert _settings("bandit", [0, 1, 2]).effective_fallback_k == 2
    assert parse_settings("bandit", {}).resolve(method="mtp", k_max=4).effective_fallback_k == 4
