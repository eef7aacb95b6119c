"""The plugin against real vLLM config objects (no engine started, no model loaded)."""

import os

import pytest

pytestmark = pytest.mark.vllm


def engine_config(tiny_pair, spec, **engine_args):
    from vllm.engine.arg_utils import EngineArgs

    from banditk.testing.engines import llm_kwargs

    kw = {**llm_kwargs(), **engine_args}
    kw.pop("disable_log_stats")
    return EngineArgs(model=tiny_pair.target, speculative_config=spec, **kw).create_engine_config()


def base(tiny_pair, **extra):
    return {"method": "draft_model", "model": tiny_pair.draft, "num_speculative_tokens": 4, **extra}


def test_entry_point_is_installed(vllm_cpu):
    from importlib.metadata import entry_points

    eps = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert eps.get("banditk") == "banditk.adapter.plugin:register"


def test_without_governor_vllm_is_unchanged(vllm_cpu, tiny_pair):
    cfg = engine_config(tiny_pair, base(tiny_pair))
    assert cfg.scheduler_config.scheduler_cls is None
    assert "banditk" not in cfg.additional_config
    assert cfg.speculative_config.num_speculative_tokens_per_batch_size is None


def test_governor_off_is_stripped_and_changes_nothing(vllm_cpu, tiny_pair):
    cfg = engine_config(tiny_pair, base(tiny_pair, governor="off", governor_config={"seed": 1}))
    assert cfg.scheduler_config.scheduler_cls is None and "banditk" not in cfg.additional_config


def test_governor_turns_on_dynamic_k_and_selects_scheduler(vllm_cpu, tiny_pair):
    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit", governor_config={"switch_penalty": 0.1}))
    assert cfg.scheduler_config.scheduler_cls in (
        "banditk.adapter.scheduler.GovernedScheduler",
        "banditk.adapter.scheduler.GovernedAsyncScheduler",
    )
    assert [list(x) for x in cfg.speculative_config.num_speculative_tokens_per_batch_size] == [[1, 16, 4]]
    s = cfg.additional_config["banditk"]
    assert s["governor"] == "bandit" and s["k_max"] == 4 and s["method"] == "draft_model"
    assert s["governor_config"] == {"switch_penalty": 0.1}


def test_async_scheduling_gets_the_async_twin(vllm_cpu, tiny_pair):
    from banditk.adapter.plugin import apply_to_vllm_config
    from banditk.adapter.settings import parse_settings

    cfg = engine_config(tiny_pair, base(tiny_pair))
    cfg.scheduler_config.async_scheduling = True
    cfg.speculative_config.num_speculative_tokens_per_batch_size = [[1, 16, 4]]
    apply_to_vllm_config(cfg, parse_settings("bandit", {}))
    assert cfg.scheduler_config.scheduler_cls == "banditk.adapter.scheduler.GovernedAsyncScheduler"


def test_per_request_with_adaptive_verification_switched_on_by_another_route_is_refused(
    vllm_cpu, tiny_pair, monkeypatch
):
    from banditk.adapter import vllm_compat
    from banditk.adapter.plugin import apply_to_vllm_config
    from banditk.adapter.settings import parse_settings
    from banditk.core.errors import ConfigError

    cfg = engine_config(tiny_pair, base(tiny_pair))
    cfg.speculative_config.num_speculative_tokens_per_batch_size = [[1, 16, 4]]
    monkeypatch.setattr(vllm_compat, "adaptive_verification_enabled", lambda config: config is cfg)
    with pytest.raises(ConfigError, match=r"per_request is true and enable_adaptive_verification=True: both choose"):
        apply_to_vllm_config(cfg, parse_settings("bandit", {"per_request": True}))
    assert cfg.scheduler_config.scheduler_cls is None  # refused before it picks the scheduler


def test_governor_with_adaptive_verification_checks_its_shape_and_asks_workers_for_admitted_drafts(
    vllm_cpu, tiny_pair, monkeypatch
):
    from banditk.adapter import plugin, vllm_compat
    from banditk.adapter.settings import parse_settings

    cfg = engine_config(tiny_pair, base(tiny_pair))
    cfg.speculative_config.num_speculative_tokens_per_batch_size = [[1, 16, 4]]
    checked = []
    monkeypatch.setattr(vllm_compat, "adaptive_verification_enabled", lambda config: config is cfg)
    monkeypatch.setattr(vllm_compat, "check_adaptive_verification_shape", lambda: checked.append(True))
    monkeypatch.delenv(plugin.ADMITTED_DRAFTS_ENV, raising=False)
    monkeypatch.setattr(plugin, "_install_worker_hooks", lambda: None)
    plugin.apply_to_vllm_config(cfg, parse_settings("bandit", {}))
    assert checked == [True]
    assert os.environ[plugin.ADMITTED_DRAFTS_ENV] == "1"
    assert cfg.scheduler_config.scheduler_cls == "banditk.adapter.scheduler.GovernedScheduler"


@pytest.mark.parametrize("is_async", [False, True])
def test_per_request_key_selects_the_per_request_schedulers(vllm_cpu, tiny_pair, is_async):
    from banditk.adapter.plugin import apply_to_vllm_config
    from banditk.adapter.settings import parse_settings

    cfg = engine_config(tiny_pair, base(tiny_pair))
    cfg.scheduler_config.async_scheduling = is_async
    cfg.speculative_config.num_speculative_tokens_per_batch_size = [[1, 16, 4]]
    resolved = apply_to_vllm_config(cfg, parse_settings("bandit", {"per_request": True}))
    name = "PerRequestAsyncScheduler" if is_async else "PerRequestScheduler"
    assert cfg.scheduler_config.scheduler_cls == f"banditk.adapter.per_request.{name}"
    assert resolved.per_request and cfg.additional_config["banditk"]["per_request"] is True


@pytest.mark.parametrize(
    "extra, match",
    [
        (
            {"governor": "fixed:2", "governor_config": {"per_request": True}},
            r"governor_config.per_request needs governor 'bandit' .*got 'fixed:2'",
        ),
        ({"governor": "bandit", "governor_config": {"per_request": 1}}, r"per_request must be true or false, got 1"),
        ({"governor": "bandit", "governor_config": {"bucket_edges": [2, 8]}}, r"bucket_edges"),
        ({"governor": "bandit", "governor_config": {"seed": "x"}}, r"seed"),
        ({"governor": "fixed:9"}, r"governor='fixed:9' asks for K above num_speculative_tokens=4"),
        (
            {"governor": "bandit", "num_speculative_tokens_per_batch_size": [[1, 4, 2]]},
            r"both `governor` and `num_speculative_tokens_per_batch_size`",
        ),
        (
            {"governor": "bandit", "governor_config": {"per_request": True}, "enable_adaptive_verification": True},
            r"per_request is true and enable_adaptive_verification=True: both choose .*\(drop `per_request`\)",
        ),
        (
            {"governor": "bandit", "governor_config": {"fallback_k": 5}},
            r"fallback_k must be in \[0, num_speculative_tokens=4\], got 5",
        ),
    ],
)
def test_bad_config_fails_in_create_engine_config(vllm_cpu, tiny_pair, extra, match):
    from banditk.core.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        engine_config(tiny_pair, base(tiny_pair, **extra))


def test_prior_of_another_drafter_class_is_refused(vllm_cpu, tiny_pair, tmp_path):
    from banditk.core.config import GovernorConfig
    from banditk.core.errors import ConfigError
    from banditk.governor import BanditGovernor
    from banditk.governor.snapshot import save_snapshot

    path = tmp_path / "mtp.json"
    save_snapshot(path, BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4)))
    with pytest.raises(ConfigError, match=r"prior=.*mtp.json.*drafter class 'mtp', not 'draft_model'"):
        engine_config(tiny_pair, base(tiny_pair, governor="bandit", governor_config={"prior": str(path)}))


def test_shape_check_names_the_vllm_version(vllm_cpu, monkeypatch):
    from vllm.v1.core.sched.scheduler import Scheduler

    from banditk.adapter import vllm_compat

    monkeypatch.setattr(vllm_compat, "_checked", False)
    vllm_compat.check_vllm_shape()  # the installed version passes
    monkeypatch.setattr(vllm_compat, "_checked", False)
    monkeypatch.setattr(Scheduler, "make_spec_decoding_stats", lambda self, stats, n: None)
    with pytest.raises(
        vllm_compat.VllmShapeError, match=rf"vLLM {vllm_compat.vllm_version()}.*make_spec_decoding_stats"
    ):
        vllm_compat.check_vllm_shape()


def test_dynamic_k_is_switched_on_when_k_was_not_in_the_dict(vllm_cpu, tiny_pair):
    """num_speculative_tokens can come from the draft's config (n_predict): then the table is set afterwards."""
    from banditk.adapter.plugin import apply_to_vllm_config
    from banditk.adapter.settings import parse_settings

    cfg = engine_config(tiny_pair, base(tiny_pair))
    assert cfg.speculative_config.num_speculative_tokens_per_batch_size is None
    apply_to_vllm_config(cfg, parse_settings("bandit", {}))
    assert [list(x) for x in cfg.speculative_config.num_speculative_tokens_per_batch_size] == [[1, 16, 4]]
    assert cfg.additional_config["banditk"]["k_max"] == 4
