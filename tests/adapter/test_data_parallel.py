"""Data parallelism: a governed dense model keeps dynamic K on every rank, a MoE model keeps
vLLM's switch-off, and each rank writes its own files."""

from types import SimpleNamespace

import pytest

from banditk.adapter import data_parallel
from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY


def _config(governed=True, is_moe=False):
    return SimpleNamespace(
        additional_config={ADDITIONAL_CONFIG_KEY: {}} if governed else {},
        model_config=SimpleNamespace(is_moe=is_moe),
    )


@pytest.mark.parametrize(
    ("governed", "is_moe", "vllm_switches_off"),
    [(True, False, False), (True, True, True), (False, False, True), (False, True, True)],
)
def test_only_a_governed_dense_model_keeps_dynamic_k(governed, is_moe, vllm_switches_off):
    calls = []
    wrapped = data_parallel.wrap_disable(lambda self: calls.append(self))
    cfg = _config(governed, is_moe)
    wrapped(cfg)
    assert calls == ([cfg] if vllm_switches_off else [])


def test_a_config_of_another_shape_keeps_vllms_rule():
    calls = []
    data_parallel.wrap_disable(lambda self: calls.append(self))(SimpleNamespace(additional_config=None))
    assert len(calls) == 1


def test_the_rank_is_the_index_vllm_keeps_for_an_independent_rank():
    par = SimpleNamespace(data_parallel_rank=0, data_parallel_index=1)  # as reconfigured by vLLM
    assert data_parallel.rank_of(SimpleNamespace(parallel_config=par)) == 1
    assert data_parallel.rank_of(SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_rank=3))) == 3
    assert data_parallel.rank_of(SimpleNamespace()) == 0


def test_a_dense_model_under_data_parallelism_keeps_the_table_and_records_the_size(vllm_cpu, tiny_pair):
    from tests.adapter.test_vllm_plugin import base, engine_config

    cfg = engine_config(tiny_pair, {**base(tiny_pair), "governor": "bandit"}, data_parallel_size=2)
    assert cfg.parallel_config.data_parallel_size == 2
    assert cfg.speculative_config.num_speculative_tokens_per_batch_size is not None  # vLLM's would be None
    assert cfg.additional_config[ADDITIONAL_CONFIG_KEY][data_parallel.DP_SIZE_KEY] == 2


def test_without_the_governor_vllm_switches_dynamic_k_off_under_data_parallelism(vllm_cpu, tiny_pair):
    from tests.adapter.test_vllm_plugin import base, engine_config

    table = [[1, 4, 3], [5, 256, 1]]
    cfg = engine_config(tiny_pair, base(tiny_pair, num_speculative_tokens_per_batch_size=table), data_parallel_size=2)
    assert cfg.speculative_config.num_speculative_tokens_per_batch_size is None


def test_each_rank_writes_its_own_snapshot_and_log(vllm_cpu, tiny_pair, tmp_path):
    from banditk.adapter.runtime import GovernorRuntime
    from tests.adapter.test_vllm_plugin import base, engine_config

    gc = {"snapshot_path": str(tmp_path / "snap.json"), "telemetry_log": str(tmp_path / "steps.jsonl")}
    cfg = engine_config(
        tiny_pair, {**base(tiny_pair), "governor": "bandit", "governor_config": gc}, data_parallel_size=2
    )
    cfg.parallel_config.data_parallel_index = 1
    rt = GovernorRuntime.from_vllm_config(cfg)
    try:
        assert rt.snapshots.path == str(tmp_path / "snap.rank1.json")
        assert rt.log.path == str(tmp_path / "steps.rank1.jsonl")
    finally:
        rt.close()
