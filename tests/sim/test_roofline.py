"""The roofline step-time model against hand-computed numbers."""

import dataclasses

import numpy as np
import pytest

from banditk.sim.hardware import HARDWARE, get_hardware
from banditk.sim.models import MODELS, ModelProfile, get_model
from banditk.sim.roofline import combine, distinct_experts, forward_time
from banditk.sim.step_time import StepCostModel, pad_to_capture

GB10 = get_hardware("gb10")


def test_distinct_experts_closed_form():
    assert distinct_experts(1, 256, 8) == pytest.approx(8.0)
    assert distinct_experts(3, 256, 8) == pytest.approx(256 * (1 - (248 / 256) ** 3))
    assert distinct_experts(10_000, 256, 8) == pytest.approx(256.0)
    # sub-linear routing exponent: 8 tokens count as 8**0.5 independent draws
    assert distinct_experts(8, 256, 8, 0.5) == pytest.approx(256 * (1 - (248 / 256) ** (8**0.5)))


def test_memory_bound_forward_is_bytes_over_bandwidth():
    # 10 GB at 273 GB/s x 0.8 = 218.4 GB/s -> 45.788 ms, + 30 us FULL graph launch
    t = forward_time(GB10, tokens=1, weight_bytes=10e9, flops=2e9, n_layers=48, mode="FULL")
    assert float(t) == pytest.approx(10e9 / 218.4e9 + 30e-6, rel=1e-9)


def test_compute_bound_forward_is_flops_over_peak():
    # 1e15 FLOP at 125 TFLOP/s x 0.45 = 56.25 TFLOP/s -> 17.78 s (far above 1 GB / 218 GB/s)
    t = forward_time(GB10, tokens=4096, weight_bytes=1e9, flops=1e15, n_layers=48, mode="FULL")
    assert float(t) == pytest.approx(1e15 / 56.25e12 + 30e-6, rel=1e-9)


def test_piecewise_adds_per_layer_launches():
    full = forward_time(GB10, tokens=1, weight_bytes=1e9, flops=0, n_layers=48, mode="FULL")
    pw = forward_time(GB10, tokens=1, weight_bytes=1e9, flops=0, n_layers=48, mode="PIECEWISE")
    assert float(pw - full) == pytest.approx(48 * 150e-6)


def test_cpu_adds_memory_and_compute():
    assert float(combine(2.0, 1.0, overlap=0.0)) == 3.0
    assert float(combine(2.0, 1.0, overlap=1.0)) == 2.0


def test_dense_step_time_by_hand():
    m = ModelProfile(
        name="dense-test",
        n_layers=10,
        total_params=1e9,
        active_params=1e9,
        n_experts=0,
        top_k=0,
        bytes_per_param=2.0,
        lm_head_params=0.0,
        lm_head_bytes_per_param=2.0,
        kv_bytes_per_token=0.0,
        drafters=get_model("cyclic-10x1024").drafters,
    )
    hw = dataclasses.replace(GB10, step_overhead_s=0.0, per_request_overhead_s=0.0)
    cost = StepCostModel(hw, m, "ngram", 2, dynamic=False)
    t = cost.times(n_dec=1, n_sched=1, prefill_tokens=0, kv_bytes=0.0, spec=False)
    assert t[0] == pytest.approx(2e9 / 218.4e9 + 30e-6)


def test_moe_verification_costs_bandwidth():
    m = get_model("qwen3.5-122b-a10b-int4")
    cost = StepCostModel(GB10, m, "mtp", 4, dynamic=False)
    one = cost.target_time(np.array([1.0]), np.array([1.0]), 0.0, "FULL")[0]
    five = cost.target_time(np.array([5.0]), np.array([5.0]), 0.0, "FULL")[0]
    assert five > 1.3 * one  # more distinct experts read, though still memory bound


def test_k0_runs_cache_sync_forward_but_nospec_does_not():
    m = get_model("qwen3.5-122b-a10b-int4")
    cost = StepCostModel(GB10, m, "mtp", 2, dynamic=False)
    kvb = cost.kv_read_bytes(np.full(4, 600), 4)
    spec = cost.times(4, 4, 0, kvb, spec=True)
    nospec = cost.times(4, 4, 0, kvb, spec=False)
    sync = cost.drafter.time(np.array([0.0]), 4, "FULL")[0]
    assert sync > 0
    assert spec[0] == pytest.approx(nospec[0] + sync)
    ngram = StepCostModel(GB10, m, "ngram", 2, dynamic=False)
    assert ngram.times(4, 4, 0, kvb)[0] == pytest.approx(nospec[0])  # host drafters: K=0 is free


def test_step_time_grows_with_k():
    m = get_model("qwen3.5-122b-a10b-int4")
    cost = StepCostModel(GB10, m, "mtp", 4, dynamic=True)
    t = cost.times(8, 8, 0, cost.kv_read_bytes(np.full(8, 600), 8))
    assert np.all(np.diff(t) > 0)


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_every_hardware_number_has_a_source(name):
    hw = HARDWARE[name]
    for f in dataclasses.fields(hw):
        if f.name in ("name", "sources") or isinstance(getattr(hw, f.name), bool) or getattr(hw, f.name) == 0:
            continue
        assert f.name in hw.sources, f"{name}.{f.name} has no source"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_number_has_a_source(name):
    m = MODELS[name]
    for f in ("n_layers", "total_params", "active_params", "bytes_per_param", "kv_bytes_per_token"):
        assert f in m.sources, f"{name}.{f} has no source"
    for d in m.drafters.values():
        if d.params:
            assert "params" in d.sources


def test_models_without_speculative_mechanism_have_no_drafter_row():
    for name in ("gpt-oss-120b", "kimi-k3", "minimax-m3", "granite-4.1", "inkling", "mimo-v2.5"):
        assert MODELS[name].drafters == {}
    assert "mtp-step" in MODELS["step-3.7-flash"].drafters and MODELS["step-3.7-flash"].swa_window > 0


@pytest.mark.parametrize(
    "model, cls",
    [
        ("qwen3.5-122b-a10b-int4", "mtp"),
        ("laguna-s-2.1", "dflash"),
        ("gemma-4", "mtp-external"),
        ("qwen3.6-35b-a3b", "ngram"),
    ],
)
def test_cached_step_time_equals_its_parts(model, cls):
    m = dataclasses.replace(get_model(model), n_experts=0, top_k=0, total_params=get_model(model).active_params)
    for dynamic in (False, True):
        cost = StepCostModel(GB10, m, cls, 4, dynamic=dynamic)
        for n_dec, pre, n_pre in ((1, 0, 0), (8, 0, 0), (8, 512, 1), (0, 300, 1), (64, 0, 0)):
            kvb = cost.kv_read_bytes(np.full(n_dec, 700), n_dec)
            mode = "PIECEWISE" if (pre or dynamic) else "FULL"
            tok = n_dec * (1.0 + cost.ks) + pre
            if not pre:  # decode-only batches replay a graph padded to the next capture size
                tok = pad_to_capture(tok)
            want = (
                GB10.step_overhead_s
                + GB10.per_request_overhead_s * (n_dec + n_pre)
                + cost.target_time(tok, tok - pre + n_pre, kvb, mode)
                + cost.drafter.time(cost.ks, n_dec, mode)
            )
            for _ in range(2):  # second call comes from the cache
                got = cost.times(n_dec, n_dec + n_pre, pre, kvb)
                assert got == pytest.approx(want, rel=1e-12)


def test_padding_makes_a_staircase():
    m = get_model("mistral-medium-3.5")
    hw = dataclasses.replace(get_hardware("h200"), per_request_overhead_s=0.0)
    cost = StepCostModel(hw, m, "eagle", 1, dynamic=False)
    t = [cost.times(b, b, 0, 0.0, spec=False)[0] for b in (257, 258, 272, 273)]
    assert t[0] == pytest.approx(t[1]) == pytest.approx(t[2])  # all replay the 272 graph
    assert t[3] > t[2]
