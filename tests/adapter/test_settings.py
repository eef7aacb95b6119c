"""Parsing and validation of the `governor` / `governor_config` keys (no vLLM needed)."""

import dataclasses

import pytest

from banditk.adapter.policy_factory import build_policy, validate
from banditk.adapter.settings import AdapterSettings, parse_settings, split_speculative_config
from banditk.core.errors import ConfigError

BASE = {"method": "draft_model", "model": "/x", "num_speculative_tokens": 4}


def test_without_governor_the_dict_is_untouched():
    clean, settings = split_speculative_config(dict(BASE))
    assert clean == BASE and settings is None
    assert split_speculative_config(None) == (None, None)


def test_governor_keys_are_removed_and_parsed():
    spec = {
        **BASE,
        "governor": "bandit",
        "governor_config": {
            "seed": 3,
            "switch_penalty": 0.1,
            "fallback_k": 2,
            "snapshot_interval_s": 5,
            "state_log_interval_s": 0,
        },
    }
    clean, s = split_speculative_config(spec)
    assert clean == BASE
    assert "governor" in spec  # the input is not modified
    assert s.governor == "bandit" and s.fallback_k == 2 and s.snapshot_interval_s == 5.0
    assert s.governor_config == {"seed": 3, "switch_penalty": 0.1}


def test_dashed_keys_are_accepted():
    _, s = split_speculative_config({**BASE, "governor": "fixed:1", "governor-config": {"fallback_k": 0}})
    assert s.governor == "fixed:1" and s.fallback_k == 0


@pytest.mark.parametrize(
    "governor, config, match",
    [
        ("thompson", None, r"governor='thompson' is not a policy"),
        (3, None, r"governor must be a string, got int: 3"),
        ("bandit", [1], r"governor_config must be a JSON object, got list"),
        ("bandit", {"fallback_k": -1}, r"fallback_k must be an integer in \[0, 64\], got -1"),
        ("bandit", {"fallback_k": True}, r"fallback_k must be an integer in \[0, 64\], got True"),
        ("bandit", {"snapshot_interval_s": "often"}, r"snapshot_interval_s must be a number >= 0, got 'often'"),
        ("bandit", {"prior": "/nonexistent/prior.json"}, r"prior='/nonexistent/prior.json' does not exist"),
        (
            "bandit",
            {"snapshot_path": "/nonexistent/dir/s.json"},
            r"snapshot_path='/nonexistent/dir/s.json': its directory",
        ),
        # /proc exists and not even root can create a file there: caught at start-up.
        (
            "bandit",
            {"snapshot_path": "/proc/s.json"},
            r"snapshot_path='/proc/s.json': its directory '/proc' cannot be written",
        ),
        (
            "bandit",
            {"telemetry_log": "/proc/t.jsonl"},
            r"telemetry_log='/proc/t.jsonl': its directory '/proc' cannot be written",
        ),
        ("bandit", {"k_max": 3}, r"governor_config.k_max is set by vLLM's speculative config"),
        ("bandit", {"drafter_class": "warp"}, r"Unknown governor_config.drafter_class='warp'"),
        ("bandit", {"request_history": -1}, r"request_history must be an integer in \[0, 100000\], got -1"),
    ],
)
def test_bad_settings_name_field_and_value(governor, config, match):
    with pytest.raises(ConfigError, match=match):
        parse_settings(governor, config)


def test_request_history_is_off_unless_asked_for():
    assert parse_settings("bandit", {}).request_history == 0
    assert parse_settings("bandit", {"request_history": 8}).request_history == 8


def test_governor_config_without_governor_is_an_error():
    with pytest.raises(ConfigError, match="has `governor_config` but no `governor`"):
        split_speculative_config({**BASE, "governor_config": {}})


def test_resolve_checks_k_dependent_fields():
    s = parse_settings("fixed:5", {})
    with pytest.raises(ConfigError, match=r"governor='fixed:5' asks for K above num_speculative_tokens=4"):
        s.resolve(method="draft_model", k_max=4)
    with pytest.raises(ConfigError, match=r"fallback_k must be in \[0, num_speculative_tokens=2\], got 3"):
        parse_settings("bandit", {"fallback_k": 3}).resolve(method="draft_model", k_max=2)
    with pytest.raises(ConfigError, match=r"method='medusa' has no banditk drafter class"):
        parse_settings("bandit", {}).resolve(method="medusa", k_max=2)
    with pytest.raises(ConfigError) as e:
        parse_settings("bandit", {}).resolve(method="medusa", k_max=2)
    listed = str(e.value).split("one of ")[1]
    assert listed.count("'eagle'") == 1  # each class once, though eagle and eagle3 both map to it
    # ngram_gpu (valid in vLLM 0.32) is the n-gram class: vLLM starts with a governor.
    assert parse_settings("bandit", {}).resolve(method="ngram_gpu", k_max=2).drafter_class_for() == "ngram"
    r = parse_settings("bandit", {"drafter_class": "eagle"}).resolve(method="medusa", k_max=2)
    assert r.drafter_class_for() == "eagle" and r.effective_fallback_k == 2


def test_unknown_governor_hyperparameter_fails_in_validate():
    s = parse_settings("bandit", {"discount": 2.0}).resolve(method="mtp", k_max=3)
    with pytest.raises(ConfigError, match=r"`discount` must be in \[0.5, 1.0\], got 2.0"):
        validate(s)
    s = parse_settings("bandit", {"switchpenalty": 0.1}).resolve(method="mtp", k_max=3)
    with pytest.raises(ConfigError, match=r"switchpenalty"):
        validate(s)


def test_build_policy_bandit_and_fixed():
    s = parse_settings("bandit", {"seed": 1}).resolve(method="mtp", k_max=3)
    assert build_policy(s).name == "bandit"
    s = parse_settings("fixed", {}).resolve(method="mtp", k_max=3)
    try:
        from banditk.policies import make_policy  # noqa: F401
    except ImportError:
        pytest.skip("banditk.policies.make_policy not there yet")
    from banditk.core.types import StepContext

    assert build_policy(s).select(StepContext(4, 3, "mtp")).k == 3


def test_settings_round_trip_as_json():
    import json

    from banditk.adapter.settings import AdapterSettings

    s = parse_settings("bandit", {"seed": 2, "fallback_k": 1}).resolve(method="ngram", k_max=5)
    assert AdapterSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_a_scheduler_without_banditk_settings_gets_a_clear_error():
    # vLLM's own tests build the scheduler class directly, with no plugin-made settings.
    with pytest.raises(ConfigError, match=r"holds no banditk settings \(additional_config\['banditk'\] is None\)"):
        AdapterSettings.from_dict(None)


def test_the_start_up_log_names_the_prior_or_says_flat(tmp_path):
    from types import SimpleNamespace

    from streams import trained_governor

    from banditk.adapter.runtime import prior_line
    from banditk.governor.snapshot import prior_from_snapshot, snapshot_dict

    prior = prior_from_snapshot(snapshot_dict(trained_governor(seed=1, steps=100)), strength=50)
    prior.key = dataclasses.replace(prior.key, hardware="gb10")
    line = prior_line(SimpleNamespace(prior=prior), SimpleNamespace(prior="/p/mtp.json"))
    assert line.startswith("starts from prior /p/mtp.json: class=mtp ") and "hardware=gb10" in line
    assert "strength_cap=50" in line
    assert prior_line(SimpleNamespace(prior=None), SimpleNamespace(prior=None)).endswith(
        "flat prior (no governor_config.prior)"
    )
    assert "keeps no posterior" in prior_line(SimpleNamespace(name="fixed"), SimpleNamespace(prior=None))
