"""Full CUDA graphs for every K: the table, MRv2's ladders and their dispatch, the server mode.

No GPU: vLLM's Model Runner V2 modules import on CPU, and its graph manager is built with the
platform stubbed (lab.mrv2); nothing is captured.
"""

import inspect
import logging
from unittest import mock

import pytest

pytestmark = pytest.mark.vllm

K_MAX = 4


def base(tiny_pair, **extra):
    return {"method": "draft_model", "model": tiny_pair.draft, "num_speculative_tokens": K_MAX, **extra}


def engine_config(tiny_pair, spec):
    from vllm.engine.arg_utils import EngineArgs

    from banditk.testing.engines import llm_kwargs

    kw = llm_kwargs()
    kw.pop("disable_log_stats")
    return EngineArgs(model=tiny_pair.target, speculative_config=spec, **kw).create_engine_config()


@pytest.fixture
def cuda_platform(monkeypatch):
    """The plugin sees a platform with CUDA graphs; vLLM itself still builds a CPU config."""
    from banditk.adapter import vllm_compat

    monkeypatch.setattr(vllm_compat, "platform_has_cuda_graphs", lambda: True)


@pytest.mark.parametrize("ks", [[0, 1, 2, 3, 4], [0, 1, 2, 4], [4], [1, 3]])
def test_the_table_gives_every_k_of_the_arm_set_its_own_ladder(vllm_cpu, ks):
    from banditk.adapter.vllm_compat import dynamic_k_table, laddered_ks
    from lab.mrv2 import decode_query_lens, probe_manager

    table = dynamic_k_table(ks, 64)
    assert laddered_ks(table, 64) == sorted(ks)
    assert decode_query_lens(probe_manager(table, max(ks), 64)) == {1 + k for k in ks}


def test_todays_one_row_table_captures_the_k_max_ladder_alone(vllm_cpu):
    """Why the table must list every K: with [[1, max, K_max]] the smaller K have no full graph."""
    from lab.mrv2 import decode_query_lens, probe_manager

    assert decode_query_lens(probe_manager([[1, 64, K_MAX]], K_MAX, 64)) == {1 + K_MAX}


def test_the_installed_vllm_shadows_ladders_as_the_version_list_says(vllm_cpu):
    """#56136: unmended, some uniform batches of some K miss their ladder's full graph. When a
    vLLM release fixes it, this fails until LADDER_SHADOWING_VERSIONS leaves that release out."""
    from banditk.adapter import vllm_compat
    from lab.mrv2 import missed_full_graphs, probe_manager

    ks = range(K_MAX + 1)
    manager = vllm_compat.graph_manager_class()
    # vLLM's own candidates, whether or not an engine earlier in this process installed the mend.
    with mock.patch.object(manager, "_init_candidates", inspect.unwrap(manager._init_candidates)):
        missed = missed_full_graphs(probe_manager(vllm_compat.dynamic_k_table(ks, 64), K_MAX, 64), ks, 64)
    assert bool(missed) == vllm_compat.ladder_shadowing_present()
    if missed:  # the case in the issue: K=2 at 4 requests (12 tokens) finds only a K=1 graph
        assert 4 in missed[2]


@pytest.mark.parametrize("max_num_seqs", [8, 64, 256])
def test_the_mend_gives_every_uniform_batch_its_ladders_full_graph(vllm_cpu, max_num_seqs):
    from banditk.adapter import graph_mode, vllm_compat
    from lab.mrv2 import missed_full_graphs, probe_manager

    ks = range(K_MAX + 1)
    m = probe_manager(vllm_compat.dynamic_k_table(ks, max_num_seqs), K_MAX, max_num_seqs)
    before = {key: list(c) for key, c in m._candidates.items()}
    added = graph_mode.mend_shadowed_ladders(m._candidates, vllm_compat.full_graph_descs(m))
    assert missed_full_graphs(m, ks, max_num_seqs) == {}
    assert added == sum(len(m._candidates[key]) - len(c) for key, c in before.items())
    for key, cands in m._candidates.items():
        # nothing vLLM filed is lost or reordered, and FULL graphs still come before PIECEWISE ones
        assert [d for d in cands if d in before[key]] == before[key]
        modes = [vllm_compat.graph_desc_is_full(d) for d in cands]
        assert modes == sorted(modes, reverse=True)


def test_the_mend_adds_nothing_where_nothing_is_shadowed(vllm_cpu):
    from banditk.adapter import graph_mode, vllm_compat
    from lab.mrv2 import probe_manager

    m = probe_manager([[1, 64, K_MAX]], K_MAX, 64)  # one ladder cannot shadow itself
    assert graph_mode.mend_shadowed_ladders(m._candidates, vllm_compat.full_graph_descs(m)) == 0


class FakeCapture:
    """vLLM's capture loop over a manager's descriptors, with a device whose free memory drops
    by ``cost(desc)`` as each graph is captured."""

    def __init__(self, cost):
        self.free, self.cost = 10 * 2**30, cost

    def run(self, descs, create_forward_fn):
        for d in descs:
            create_forward_fn(d, warmup=True)  # as vLLM: prepare, warm up, then capture
            create_forward_fn(d, warmup=False)
            self.free -= self.cost(d)


def test_the_capture_meter_charges_each_graphs_memory_to_its_k(vllm_cpu):
    from banditk.adapter import graph_mode, vllm_compat
    from lab.mrv2 import probe_manager

    m = probe_manager(vllm_compat.dynamic_k_table([0, 2, 4], 16), K_MAX, 16)
    offset = vllm_compat.decode_k_offset(m)
    descs = [d for descs in m._capture_descs.values() for d in descs]
    full = vllm_compat.full_graph_descs(m)
    assert full and len(full) < len(descs)  # PIECEWISE graphs too: charged apart

    def cost(d):  # a graph's memory grows with its tokens; a FULL graph of K costs (K + 1) MiB more
        k = d.uniform_token_count - offset if d in full and d.uniform_token_count is not None else -1
        return d.num_tokens * 2**10 + (k + 1) * 2**20

    dev = FakeCapture(cost)
    meter = graph_mode.CaptureMeter(lambda: dev.free, offset)
    dev.run(descs, meter.wrap(lambda d, warmup: None))
    meter.finish()
    ladders = {}
    for d in full:
        if d.uniform_token_count is not None:
            ladders.setdefault(d.uniform_token_count - offset, []).append(d)
    assert sorted(ladders) == [0, 2, 4]  # a ladder per K of the arm set, nothing else
    assert dict(meter.graphs_per_k) == {k: len(v) for k, v in ladders.items()}
    assert dict(meter.bytes_per_k) == {k: sum(cost(d) for d in v) for k, v in ladders.items()}
    assert meter.other_bytes == sum(cost(d) for d in descs) - sum(meter.bytes_per_k.values())
    assert f"K=2: {len(ladders[2])} (" in meter.summary()


class FakeManager:
    """The two CudaGraphManager methods install() wraps, on hand-made descriptors."""

    decode_query_len = 1 + K_MAX

    def __init__(self, descs, profiling=False):
        from types import SimpleNamespace

        self.vllm_config = SimpleNamespace(num_speculative_tokens=K_MAX)
        self._descs, self._candidates, self._capture_descs = descs, {}, {}
        self._max_full_descs_to_capture = 1 if profiling else None

    def _init_candidates(self):
        self._capture_descs = {"FULL": list(self._descs)}
        self._candidates = {(d.num_tokens, 0): [d] for d in self._descs}

    def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs"):
        FakeCapture(lambda d: 0).run(self._capture_descs["FULL"], create_forward_fn)


@pytest.fixture
def fresh_install(monkeypatch):
    """graph_mode.install() on a fresh FakeManager class, with a fake device."""
    from banditk.adapter import graph_mode, vllm_compat

    cls = type("Manager", (FakeManager,), {})
    free = [8 * 2**30]
    monkeypatch.setattr(graph_mode, "_installed", False)
    monkeypatch.setattr(vllm_compat, "platform_has_cuda_graphs", lambda: True)
    monkeypatch.setattr(vllm_compat, "graph_manager_class", lambda: cls)
    monkeypatch.setattr(vllm_compat, "device_free_bytes", lambda: free[0])
    monkeypatch.setattr(vllm_compat, "graph_desc_is_full", lambda d: d.cg_mode == "FULL")
    return cls, free


def desc(k, num_tokens):
    from types import SimpleNamespace

    return SimpleNamespace(
        cg_mode="FULL",
        uniform_token_count=1 + k,
        num_tokens=num_tokens,
        num_reqs=num_tokens // (1 + k),
        num_active_loras=0,
        num_ubatches=1,
    )


@pytest.mark.parametrize("shadowing", [True, False])
def test_install_wraps_the_manager_once_and_mends_only_where_vllm_shadows(fresh_install, monkeypatch, shadowing):
    from banditk.adapter import graph_mode, vllm_compat

    cls, _ = fresh_install
    monkeypatch.setattr(vllm_compat, "ladder_shadowing_present", lambda: shadowing)
    assert graph_mode.install() and graph_mode.install()  # twice: wrapped once
    m = cls([desc(1, 16), desc(2, 12), desc(2, 24)])
    m._init_candidates()
    # a K=2 batch padded to 16 tokens finds only K=1's graph there unless K=2's ladder is filed too
    assert m._candidates[(16, 0)] == ([desc(1, 16), desc(2, 24)] if shadowing else [desc(1, 16)])
    assert cls.capture.__wrapped__ is FakeManager.capture  # one wrapper, not two


def test_install_logs_the_graphs_and_memory_per_k_after_the_real_capture_only(fresh_install, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="vllm.banditk")
    from banditk.adapter import graph_mode, vllm_compat

    cls, free = fresh_install
    monkeypatch.setattr(vllm_compat, "ladder_shadowing_present", lambda: False)
    graph_mode.install()
    descs = [desc(1, 16), desc(1, 8), desc(3, 16)]
    for profiling in (True, False):
        m = cls(descs, profiling=profiling)
        m._init_candidates()
        m.capture(lambda d, warmup: free.__setitem__(0, free[0] - (2**29 if warmup else 0)))
    lines = [r.getMessage() for r in caplog.records if "captured FULL decode graphs" in r.getMessage()]
    assert lines == [
        "banditk: captured FULL decode graphs per K K=1: 2 (1.00 GiB), K=3: 1 (0.50 GiB); other graphs 0.00 GiB; "
        "1.50 GiB in all."
    ]


def test_install_does_nothing_without_cuda_graphs(monkeypatch):
    from banditk.adapter import graph_mode, vllm_compat

    monkeypatch.setattr(graph_mode, "_installed", False)
    monkeypatch.setattr(vllm_compat, "platform_has_cuda_graphs", lambda: False)
    monkeypatch.setattr(vllm_compat, "graph_manager_class", lambda: pytest.fail("no manager to wrap on CPU"))
    assert graph_mode.install() is False


def test_the_mrv2_shape_check_passes_on_the_installed_vllm(vllm_cpu):
    from banditk.adapter import vllm_compat

    vllm_compat.check_mrv2_shape()


def test_the_mrv2_shape_check_names_a_missing_assumption(vllm_cpu, monkeypatch):
    from vllm.v1.worker.gpu import cudagraph_utils

    from banditk.adapter import vllm_compat

    monkeypatch.delattr(cudagraph_utils.CudaGraphManager, "_init_candidates")
    with pytest.raises(vllm_compat.VllmShapeError, match=r"CudaGraphManager\._init_candidates is missing"):
        vllm_compat.check_mrv2_shape()


def test_on_a_cuda_platform_the_plugin_lists_the_arm_set_and_mrv2_keeps_full_graphs(
    vllm_cpu, tiny_pair, cuda_platform, monkeypatch, caplog
):
    from vllm.config import CUDAGraphMode

    from banditk.adapter import graph_mode, vllm_compat
    from lab.mrv2 import decode_query_lens, probe_manager

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    with caplog.at_level(logging.INFO, logger="vllm.banditk"):
        cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit", governor_config={"k_set": [0, 1, 2, 4]}))
    table = [list(r) for r in cfg.speculative_config.num_speculative_tokens_per_batch_size]
    assert table == [[1, 1, 0], [2, 2, 1], [3, 3, 2], [4, 16, 4]]
    assert decode_query_lens(probe_manager(table, K_MAX, 16)) == {1, 2, 3, 5}
    # vLLM keeps full graphs under dynamic K for MRv2, and only for it
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg._maybe_override_dynamic_sd_cudagraph_mode()
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE
    assert graph_mode.server_mode_of(cfg).label == "MRv2 FULL"
    assert vllm_compat.uses_model_runner_v2(cfg)


def test_where_mrv2_is_refused_the_server_falls_back_to_v1_piecewise_and_says_why(
    vllm_cpu, tiny_pair, cuda_platform, monkeypatch, caplog
):
    from vllm.config import CUDAGraphMode

    from banditk.adapter import graph_mode
    from banditk.adapter.plugin import _settle_server_mode
    from banditk.adapter.settings import parse_settings

    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit"))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg._maybe_override_dynamic_sd_cudagraph_mode()
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode.PIECEWISE
    mode = graph_mode.server_mode_of(cfg)
    assert (mode.runner, mode.cudagraph) == ("v1", "PIECEWISE")
    resolved = parse_settings("bandit", {}).resolve(method="draft_model", k_max=K_MAX)
    with caplog.at_level(logging.INFO, logger="vllm.banditk"):
        _settle_server_mode(cfg, resolved)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "server mode" in r.getMessage()]
    assert len(warned) == 1 and "V1 PIECEWISE" in warned[0].getMessage()
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in warned[0].getMessage()


def test_an_unsupported_method_names_the_blocker(vllm_cpu, tiny_pair, cuda_platform, monkeypatch):
    from vllm.config import CUDAGraphMode

    from banditk.adapter import graph_mode, vllm_compat

    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit"))
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE  # what vLLM leaves V1 under dynamic K
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    monkeypatch.setattr(vllm_compat, "uses_model_runner_v2", lambda c: False)
    monkeypatch.setattr(vllm_compat, "model_runner_v2_blockers", lambda c: ["speculative method 'suffix'"])
    mode = graph_mode.server_mode_of(cfg)
    assert mode.label == "V1 PIECEWISE" and "speculative method 'suffix'" in mode.reason


def test_on_cpu_the_table_stays_one_row_and_the_mode_says_no_graphs(vllm_cpu, tiny_pair):
    from banditk.adapter import graph_mode

    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit", governor_config={"k_set": [0, 2, 4]}))
    assert [list(r) for r in cfg.speculative_config.num_speculative_tokens_per_batch_size] == [[1, 16, 4]]
    assert graph_mode.server_mode_of(cfg).cudagraph == "NONE"


def test_a_table_too_short_for_the_arm_set_warns_which_k_lose_their_ladder(
    vllm_cpu, tiny_pair, cuda_platform, monkeypatch, caplog
):
    from banditk.adapter import graph_mode
    from banditk.adapter.plugin import _settle_server_mode
    from banditk.adapter.settings import parse_settings
    from banditk.core.server_mode import ServerMode

    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit"))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")  # the mode below pins it: restore it after
    cfg.scheduler_config.max_num_seqs = 3
    cfg.speculative_config.num_speculative_tokens_per_batch_size = [[1, 1, 0], [2, 2, 1], [3, 3, 2], [4, 4, 3]]
    monkeypatch.setattr(graph_mode, "server_mode_of", lambda c: ServerMode("v2", "FULL", "test"))
    resolved = parse_settings("bandit", {}).resolve(method="draft_model", k_max=K_MAX)
    with caplog.at_level(logging.WARNING, logger="vllm.banditk"):
        _settle_server_mode(cfg, resolved)
    assert "K=[3, 4] get no full-graph ladder" in caplog.text


def test_the_state_line_shows_the_server_mode(vllm_cpu, tiny_pair, cuda_platform, monkeypatch):
    from vllm.config import CUDAGraphMode

    from banditk.adapter import graph_mode
    from banditk.adapter.runtime import GovernorRuntime

    cfg = engine_config(tiny_pair, base(tiny_pair, governor="bandit"))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg._maybe_override_dynamic_sd_cudagraph_mode()
    rt = GovernorRuntime.from_vllm_config(cfg)
    try:
        assert graph_mode.server_mode_of(cfg).label == "V1 PIECEWISE"
        assert " | mode=V1 PIECEWISE | " in rt.state_line()
    finally:
        rt.close()
