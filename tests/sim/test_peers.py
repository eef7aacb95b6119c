"""The peer policies behave as docs/evaluation.md describes them."""

import numpy as np
import pytest

from banditk.core.errors import ConfigError
from banditk.core.types import StepContext, StepOutcome
from banditk.policies.peers import SGLangAdaptivePeer, VllmAdaptiveKPeer, make_peer


def _drive(p, steps, b, k_max, accept_fn, num_scheduled=None):
    ks = []
    for _ in range(steps):
        d = p.select(StepContext(b, k_max, "mtp", num_scheduled=num_scheduled or b))
        acc = np.array([accept_fn(d.k) for _ in range(b)], dtype=np.int64)
        p.observe(d, StepOutcome(np.full(b, d.k), acc, 0.01))
        ks.append(d.k)
    return ks


def test_sglang_goes_down_when_drafts_rejected_and_up_when_accepted():
    p = SGLangAdaptivePeer(k_max=4)
    ks = _drive(p, 400, 4, 4, lambda k: 0)
    assert ks[-1] == 1  # never below its smallest candidate
    ks = _drive(p, 600, 4, 4, lambda k: k)
    assert ks[-1] == 4


def test_sglang_hysteresis_holds_depth_when_acceptance_in_between():
    p = SGLangAdaptivePeer(k_max=4)
    ks = _drive(p, 600, 4, 4, lambda k: max(k - 1, 0))  # one rejected per step: inside the band
    assert len(set(ks[-300:])) == 1


def test_sglang_state_is_per_batch_size_range():
    p = SGLangAdaptivePeer(k_max=4)
    _drive(p, 400, 2, 4, lambda k: 0)
    assert p.select(StepContext(2, 4, "mtp")).k == 1
    assert p.select(StepContext(40, 4, "mtp")).k == 3  # untouched range keeps its start depth


def test_vllm_peer_keeps_positions_above_threshold_and_probes_every_64():
    p = VllmAdaptiveKPeer(k_max=4)
    ks = _drive(p, 640, 2, 4, lambda k: min(k, 2))  # positions 1-2 accepted, 3 never
    tail = ks[-256:]
    assert sum(1 for k in tail if k == 2) >= 250
    probes = [i for i, k in enumerate(ks, 1) if k == 4 and i > 300]
    assert probes and all(i % 64 == 0 for i in probes)


def test_vllm_peer_capped_by_table_on_num_scheduled():
    p = VllmAdaptiveKPeer(k_max=4, table=[[1, 4, 2], [5, 512, 0]])
    assert p.select(StepContext(4, 4, "mtp", num_scheduled=4)).k == 2
    assert p.select(StepContext(4, 4, "mtp", num_scheduled=5)).k == 0


def test_vllm_peer_hysteresis():
    p = VllmAdaptiveKPeer(k_max=2, threshold=0.5, hysteresis=0.05)
    rng = np.random.default_rng(0)
    # position-2 conditional acceptance ~0.52: inside the band, the kept set must not change
    _drive(p, 600, 8, 2, lambda k: 0 if k == 0 else 1 + int(k > 1 and rng.random() < 0.52))
    assert p.kept.tolist() == [True, True]


def test_make_peer_rejects_unknown():
    assert make_peer("vllm-adaptive-k", k_max=3).name == "peer:vllm-adaptive-k"
    with pytest.raises(ConfigError, match="Unknown peer 'nope'"):
        make_peer("nope", k_max=3)
    with pytest.raises(ConfigError, match="`k_max` must be an integer"):
        SGLangAdaptivePeer(k_max=0)
