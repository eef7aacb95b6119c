"""A held step only queues its outcome; the next reader credits the queue, and crediting late
changes nothing: the same decisions and the same state as crediting each step as it came."""

import numpy as np
import pytest

from banditk.core.config import GovernorConfig
from banditk.core.errors import InvalidOutcomeError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.posterior.acceptance import position_count_lists, position_counts

TIMES = np.array([0.030, 0.033, 0.036, 0.040, 0.046])


def _stream(seed: int, steps: int):
    """Contexts and outcomes of a workload that moves B, runs prompt chunks and stalls now and then."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        batch = int(rng.choice([1, 3, 8, 8, 8, 24, 60]))
        prefill = int(rng.choice([0, 0, 0, 0, 512]))
        ctx = StepContext(batch, 4, "mtp", prefill_tokens=prefill, context_tokens=batch * int(rng.integers(100, 5000)))
        draws = rng.random((batch, 4))
        stall = 5.0 if step % 97 == 50 else 1.0
        yield ctx, draws, prefill, stall, rng.standard_normal()


def _outcome(k: int, draws: np.ndarray, prefill: int, stall: float, noise: float) -> StepOutcome:
    ok = draws[:, :k] < np.array([0.8, 0.7, 0.6, 0.5])[:k]
    accepted = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1)) if k else np.zeros(len(draws), dtype=int)
    t = TIMES[k] * len(draws) ** 0.3 * (1 + 0.05 * noise) * stall + 2e-5 * prefill
    return StepOutcome(np.full(len(draws), k), accepted.astype(np.int64), t, prefill_tokens=prefill)


def _run(eager: bool, seed: int, config: GovernorConfig) -> tuple[list, dict]:
    gov = BanditGovernor(config)
    decisions = []
    for ctx, draws, prefill, stall, noise in _stream(seed, 1500):
        d = gov.select(ctx)
        decisions.append((d.k, d.bucket, d.sampled_goodput))
        gov.observe(d, _outcome(d.k, draws, prefill, stall, noise))
        if eager:
            gov.posterior.settle()
    return decisions, gov.get_state()


@pytest.mark.parametrize(
    "config",
    [
        GovernorConfig("mtp", 4, seed=3),
        GovernorConfig("mtp", 4, seed=4, context_edges=(0, 2048), regression_refresh=5),
    ],
    ids=["batch-buckets", "context-cells"],
)
def test_crediting_late_gives_the_decisions_and_state_of_crediting_at_once(config):
    lazy, lazy_state = _run(False, 11, config)
    eager, eager_state = _run(True, 11, config)
    assert lazy == eager
    assert lazy_state == eager_state


def test_a_held_step_does_no_posterior_arithmetic():
    gov = BanditGovernor(GovernorConfig("mtp", 4, seed=0))
    rng = np.random.default_rng(0)
    held = 0
    for _ in range(400):
        d = gov.select(StepContext(8, 4, "mtp"))
        before = gov._posterior.data.to_dict()
        gov.observe(d, _outcome(d.k, rng.random((8, 4)), 0, 1.0, 0.0))
        if gov._held > 0:  # inside an epoch: the outcome waits in the queue
            held += 1
            assert gov._posterior.data.to_dict() == before
            assert gov._posterior.queued
    assert held > 200
    n = len(gov._posterior.queued)
    assert gov.observations - n > 0 and gov.posterior.queued == []  # reading it credits the queue


def test_a_bad_outcome_is_refused_when_observed_not_when_credited():
    gov = BanditGovernor(GovernorConfig("mtp", 2))
    d = gov.select(StepContext(2, 2, "mtp"))
    with pytest.raises(InvalidOutcomeError, match="above k_max=2"):
        gov.observe(d, StepOutcome(np.array([3, 1]), np.array([0, 0]), 0.01))
    assert gov._posterior.queued == []


@pytest.mark.parametrize("batch", [0, 1, 5, 32, 33, 300])
def test_the_per_step_counts_are_the_array_counts(batch):
    rng = np.random.default_rng(batch)
    for k_max in (1, 4, 7):
        drafted = rng.integers(0, k_max + 1, batch)
        accepted = np.minimum(rng.integers(0, k_max + 1, batch), drafted)
        succ, fail = position_counts(drafted, accepted, k_max)
        assert position_count_lists(drafted, accepted, k_max) == (succ.tolist(), fail.tolist())


def test_the_credited_posterior_is_the_array_form_of_its_statistics():
    """The per-step credit in plain floats against numpy's form of the same posterior: discounted
    Beta counts on the positions reached, and each cell's Normal-Inverse-Gamma from its sums."""
    config = GovernorConfig("mtp", 4, seed=5)
    gov = BanditGovernor(config)
    succ_ref, fail_ref = np.zeros(4), np.zeros(4)
    for ctx, draws, prefill, stall, noise in _stream(7, 600):
        d = gov.select(ctx)
        outcome = _outcome(d.k, draws, prefill, stall, noise)
        gov.observe(d, outcome)
        s, f = position_counts(outcome.drafted, outcome.accepted, 4)
        reached = int(np.count_nonzero(s + f))
        succ_ref[:reached] = succ_ref[:reached] * config.discount + s[:reached]
        fail_ref[:reached] = fail_ref[:reached] * config.discount + f[:reached]
        post = gov.posterior
        assert np.array_equal(post.data.acc_successes, succ_ref)
        assert np.array_equal(post.data.acc_failures, fail_ref)
        p = post.prior_stats
        assert np.array_equal(post.acc_a, 1.0 + p.acc_successes + succ_ref)
        assert np.array_equal(post.acc_b, 1.0 + p.acc_failures + fail_ref)
        for cached, array_form in zip((post.post_m, post.post_k, post.post_a, post.post_b), post.latency_params()):
            assert np.array_equal(cached, array_form)


def test_observing_without_reading_keeps_the_queue_bounded():
    from banditk.governor.posterior import MAX_QUEUED

    gov = BanditGovernor(GovernorConfig("mtp", 4, seed=0))
    d = gov.select(StepContext(8, 4, "mtp"))
    twin = BanditGovernor(GovernorConfig("mtp", 4, seed=0))
    twin.select(StepContext(8, 4, "mtp"))
    rng = np.random.default_rng(1)
    for _ in range(3 * MAX_QUEUED + 5):  # a replay: outcomes only, no decision reads the posterior
        outcome = _outcome(d.k, rng.random((8, 4)), 0, 1.0, float(rng.standard_normal()))
        gov.observe(d, outcome)
        twin.observe(d, outcome)
        twin.posterior.settle()
        assert len(gov._posterior.queued) < MAX_QUEUED
    assert gov.get_state() == twin.get_state()
