"""The split test pair (issue 16): requests whose acceptance truly differs, in real vLLM on CPU."""

from __future__ import annotations

import os

import numpy as np
import pytest

from banditk.testing.engines import greedy_chain, metrics_delta, spec_metrics, tiny_llm
from banditk.testing.split_pair import split_cycle_map, split_partial_map

NUM_SPECIAL = 3


def cycle_of(f: np.ndarray, start: int) -> set[int]:
    seen, t = set(), int(start)
    while t not in seen:
        seen.add(t)
        t = int(f[t])
    return seen


def test_the_target_cycles_within_each_half_and_specials_enter_the_high_one():
    f, high, low = split_cycle_map(64, NUM_SPECIAL, seed=5)
    assert cycle_of(f, high[0]) == set(high.tolist()) and cycle_of(f, low[0]) == set(low.tolist())
    assert not set(high.tolist()) & set(low.tolist()) and high.size + low.size == 64 - NUM_SPECIAL
    assert all(int(f[s]) in set(high.tolist()) for s in range(NUM_SPECIAL))


def test_the_draft_agrees_on_the_asked_share_of_each_half_and_stays_in_it():
    f, high, low = split_cycle_map(403, NUM_SPECIAL, seed=1)
    g = split_partial_map(f, high, low, (0.9, 0.3), seed=1)
    for half, share in ((high, 0.9), (low, 0.3)):
        assert (g[half] == f[half]).sum() == half.size - round((1 - share) * half.size)
        assert np.isin(g[half], half).all()


@pytest.mark.parametrize("agreement", [(1.2, 0.3), (0.9, -0.1)])
def test_an_agreement_outside_0_1_names_its_half(agreement):
    f, high, low = split_cycle_map(64, NUM_SPECIAL, seed=0)
    half = "high" if agreement[0] > 1 else "low"
    with pytest.raises(ValueError, match=f"`agreement` \\({half} half\\)"):
        split_partial_map(f, high, low, agreement, seed=0)


@pytest.fixture(scope="module")
def split_pair(tmp_path_factory):
    pytest.importorskip("transformers")
    from banditk.testing.split_pair import build_split_pair

    root = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    return build_split_pair(root, agreement=(0.9, 0.3))


def test_prompts_stay_in_their_half(split_pair):
    assert set(split_pair.prompt("low", 50, seed=3)) <= set(split_pair.low.tolist())
    with pytest.raises(ValueError, match="`half`"):
        split_pair.prompt("middle", 5, seed=0)


def test_real_vllm_sees_each_half_accept_at_its_own_rate_with_exact_output(vllm_cpu, split_pair):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    spec = {"method": "draft_model", "model": split_pair.draft, "num_speculative_tokens": 3}
    rates = {}
    with tiny_llm(split_pair.target, spec) as llm:
        for half in ("high", "low"):
            prompts = [split_pair.prompt(half, 12, seed=s) for s in range(4)]
            before = spec_metrics(llm)
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
            delta = metrics_delta(before, spec_metrics(llm))
            for p, o in zip(prompts, outs, strict=True):
                assert list(o.outputs[0].token_ids) == greedy_chain(split_pair.next_token, p[-1], 48)
            rates[half] = delta["num_accepted_tokens"] / delta["num_draft_tokens"]
    # Acceptance over 3 drafts is below the per-position share: a miss ends the run.
    assert rates["high"] > 0.65 and rates["low"] < 0.3, rates  # the maps give (p + p^2 + p^3) / 3: 0.81, 0.14
