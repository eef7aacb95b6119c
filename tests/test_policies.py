"""One suite over every policy, plus what is specific to each baseline."""

import numpy as np
import pytest
from streams import run_stream

from banditk.core.errors import ConfigError
from banditk.core.types import StepContext
from banditk.policies import POLICY_SPECS, make_policy
from banditk.policies.static import TablePolicy
from banditk.tools.synthetic import SyntheticTruth

SPECS = ["bandit", "nospec", "fixed:0", "fixed:2", "fixed:4", "table:[[1,4,2],[5,512,0]]", "ucb"]
try:
    from banditk.policies import peers  # noqa: F401  (written alongside the simulator)

    SPECS += ["peer:sglang", "peer:vllm-adaptive-k"]
except ImportError:
    pass


@pytest.fixture(params=SPECS)
def spec(request):
    return request.param


def test_k_always_in_range_and_observe_accepts_every_outcome(spec):
    truth = SyntheticTruth()
    policy = make_policy(spec, k_max=4, drafter_class="mtp", seed=1)
    batches = np.random.default_rng(0).integers(0, 200, 1500)
    ks = run_stream(policy, truth, batches, seed=1)
    assert ks.min() >= 0 and ks.max() <= 4


def test_fixed_seed_gives_the_same_sequence(spec):
    truth = SyntheticTruth()
    batches = np.random.default_rng(1).integers(1, 150, 800)
    a = run_stream(make_policy(spec, k_max=4, drafter_class="mtp", seed=3), truth, batches, seed=2)
    b = run_stream(make_policy(spec, k_max=4, drafter_class="mtp", seed=3), truth, batches, seed=2)
    assert np.array_equal(a, b)


def test_policy_has_a_name(spec):
    assert make_policy(spec, k_max=4, drafter_class="mtp").name


def test_nospec_disables_speculation_and_fixed_zero_does_not():
    assert make_policy("nospec", k_max=4, drafter_class="mtp").disables_speculation is True
    assert make_policy("fixed:0", k_max=4, drafter_class="mtp").disables_speculation is False


@pytest.mark.parametrize(
    "spec,pattern",
    [
        ("fixed:9", r"fixed K must be an integer in \[0, k_max=4\], got 9"),
        ("fixed:x", r"policy 'fixed:x': K must be an integer"),
        ("table:[[2,4,2]]", r"table must start at batch size 1"),
        ("table:[[1,4,2],[3,8,1]]", r"sorted and non-overlapping, got \[3, 8, 1\]"),
        ("table:[[1,4]]", r"table entry must be \[lo, hi, K\] integers, got \[1, 4\]"),
        ("table:nope", r"table spec must be JSON like"),
        ("magic", r"Unknown policy 'magic'"),
    ],
)
def test_bad_policy_specs(spec, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make_policy(spec, k_max=4, drafter_class="mtp")


def test_every_documented_spec_is_buildable():
    for spec in POLICY_SPECS:
        concrete = (
            spec.replace("fixed:K", "fixed:1")
            .replace("table:[[lo,hi,K],...]", "table:[[1,8,3]]")
            .replace("table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]", "table-ctx:[[1,8,0,2047,3],[1,8,2048,9999,1]]")
        )
        if concrete.startswith("peer:") and "peer:sglang" not in SPECS:
            continue
        policy = make_policy(concrete, k_max=4, drafter_class="mtp")
        assert policy.name and callable(policy.select) and callable(policy.observe), concrete


def test_table_counts_prefills_as_vllm_does():
    # #49548: 8 requests where 2 are prefilling. The governor sees B = 6 decoding;
    # the table looks up all 8 scheduled and turns speculation off.
    table = TablePolicy("[[1,4,2],[5,512,0]]", k_max=4)
    assert table.select(StepContext(num_decoding=3, k_max=4, drafter_class="mtp", num_scheduled=4)).k == 2
    assert table.select(StepContext(num_decoding=3, k_max=4, drafter_class="mtp", num_scheduled=5)).k == 0


@pytest.mark.parametrize("spec", ["[[1,4,2],[5,512,0]]", "[[1,16,3],[32,128,2]]", "[[1,1,4],[3,3,1]]"])
def test_table_matches_vllms_own_lookup(spec):
    utils = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")
    import json

    max_num_seqs, k_max = 256, 4
    dense = utils.build_dynamic_sd_schedule_lookup(json.loads(spec), max_num_seqs, k_max)
    table = TablePolicy(spec, k_max=k_max)
    assert [table.k_for(n) for n in range(1, max_num_seqs + 1)] == dense[1:]


def test_a_table_k_above_k_max_is_refused_like_fixed_k():
    # vLLM caps such a K silently; banditk refuses it, as it refuses fixed:K above K_max, so a
    # table never runs otherwise than it reads (a by-design difference from vLLM).
    with pytest.raises(ConfigError, match=r"table K must be in \[0, k_max=3\], got \[1, 8, 9\]"):
        make_policy("table:[[1,8,9]]", k_max=3, drafter_class="mtp")
    with pytest.raises(ConfigError, match=r"fixed K must be an integer in \[0, k_max=3\], got 9"):
        make_policy("fixed:9", k_max=3, drafter_class="mtp")


def test_ucb_finds_the_best_k_on_a_stationary_stream():
    truth = SyntheticTruth()
    ks = run_stream(make_policy("ucb", k_max=4, drafter_class="mtp"), truth, [128] * 3000, seed=0)
    assert np.bincount(ks[-1000:], minlength=5).argmax() == truth.best_k(128)


def test_random_policy_hold_must_be_a_positive_integer():
    from banditk.policies.explore import RandomKPolicy

    with pytest.raises(ConfigError, match="`hold` must be an integer >= 1, got 0"):
        RandomKPolicy(k_max=3, hold=0)
