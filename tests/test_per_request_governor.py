"""The per-request governor: the budget that maximises goodput, the allotment, and its credit to K."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from banditk.core.config import GovernorConfig
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor.bandit import BanditGovernor
from banditk.governor.per_request import PerRequestGovernor
from banditk.governor.verify_budget import best_budget
from banditk.governor.verify_price import VerifyPrice

K_MAX = 3


def brute_budget(s: np.ndarray, batch: int, base: float, price: float) -> float:
    """The best goodput over every subset of slots (not only prefixes of the sorted ones)."""
    best = batch / base
    for n in range(1, s.size + 1):
        for pick in itertools.combinations(range(s.size), n):
            best = max(best, (batch + s[list(pick)].sum()) / (base + price * n))
    return best


def test_best_budget_reaches_the_best_goodput_of_any_subset():
    rng = np.random.default_rng(0)
    for _ in range(300):
        s = rng.random(rng.integers(0, 7)) ** rng.choice([0.5, 1.0, 3.0])
        batch, base, price = int(rng.integers(0, 5)), float(rng.uniform(0.1, 2)), float(rng.uniform(0, 0.5))
        n = best_budget(s, batch, base, price)
        top = np.sort(s)[::-1][:n].sum()
        assert (batch + top) / (base + price * n) == pytest.approx(brute_budget(s, batch, base, price), rel=1e-12)


def test_best_budget_free_verification_takes_every_useful_slot_and_a_dear_one_none():
    s = np.array([0.9, 0.0, 0.2, 0.5])
    assert best_budget(s, 4, 1.0, 0.0) == 3  # the zero-survival slot adds nothing: the smaller budget
    assert best_budget(s, 4, 1.0, 10.0) == 0
    with pytest.raises(ValueError, match="base_s > 0"):
        best_budget(s, 4, 0.0, 0.1)


def governor(seed: int = 0) -> PerRequestGovernor:
    return PerRequestGovernor(BanditGovernor(GovernorConfig(drafter_class="draft_model", k_max=K_MAX, seed=seed)))


def test_a_governor_that_knows_no_price_verifies_every_draft():
    gov = governor()
    drafted = np.array([3, 2, 0, 3])
    assert gov.allot(["a", "b", "c", "d"], drafted).tolist() == drafted.tolist()


class Recorder:
    """An inner governor with a fixed step-time model, recording what it is told."""

    def __init__(self, weights):
        self.config = GovernorConfig(drafter_class="draft_model", k_max=K_MAX)
        self._w = np.array(weights, dtype=float)
        self.seen: list[StepOutcome] = []

    def latency_weights(self):
        return self._w.copy()

    def acceptance_params(self):
        return np.full(K_MAX, 3.0), np.full(K_MAX, 2.0)

    def observe(self, decision, outcome):
        self.seen.append(outcome)

    def state_line(self):
        return "inner"


def test_observe_credits_the_inner_as_it_ran_and_prices_only_steps_without_a_chunk():
    inner = Recorder([0.01, 0.002, 0.0, 0.0])
    gov = PerRequestGovernor(inner)
    d = Decision(k=3, bucket=0, num_decoding=3, step_id=1)
    gov.observe(d, StepOutcome(np.array([3, 1, 0]), np.array([2, 1, 0]), 0.05))
    gov.observe(d, StepOutcome(np.array([3, 3, 3]), np.array([0, 1, 3]), 0.07, prefill_tokens=64))
    assert [o.step_duration_s for o in inner.seen] == [0.05, 0.07]
    assert inner.seen[0].drafted.tolist() == [3, 1, 0]
    assert gov.price.n == 1  # the chunk's step is not a verified token's price
    assert gov.state_line().startswith("inner |")  # the inner's own line, extended


def test_the_price_of_a_verified_token_is_recovered_where_the_budget_varies():
    rng = np.random.default_rng(0)
    price = VerifyPrice()
    for _ in range(400):
        b, k = int(rng.integers(1, 17)), int(rng.integers(0, 4))
        v = int(rng.integers(0, b * k + 1))
        price.observe(b, v, k, (0.01 + 0.0005 * (b + v) + 0.002 * max(k, 1)) * rng.lognormal(0, 0.05))
    price.refresh(np.zeros(4))
    assert price.mean[1] == pytest.approx(0.0005, rel=0.1)
    draws = np.array([price.draw(rng, np.zeros(4))[1] for _ in range(200)])
    assert (draws >= 0).all() and 0 < draws.std() < 0.2 * 0.0005


def test_allotment_never_exceeds_the_drafts_and_favours_the_requests_that_accept():
    inner = Recorder([0.01, 0.004, 0.0, 0.0])  # a verified token costs 40% of the fixed step
    gov = PerRequestGovernor(inner, seed=3)
    ids = [f"r{i}" for i in range(8)]
    good, bad = ids[:4], ids[4:]
    for _ in range(20):  # the good half accepts all three drafts, the bad half none
        for r in good:
            gov.on_verified(r, 3, 3)
        for r in bad:
            gov.on_verified(r, 3, 0)
    rng = np.random.default_rng(1)
    totals = {"good": 0, "bad": 0}
    for _ in range(50):
        drafted = rng.integers(0, K_MAX + 1, size=len(ids))
        out = gov.allot(ids, drafted)
        assert ((out >= 0) & (out <= drafted)).all()
        totals["good"] += int(out[:4].sum())
        totals["bad"] += int(out[4:].sum())
    assert totals["good"] > 5 * max(totals["bad"], 1)
    assert gov.verified_drafts < gov.proposed_drafts


def test_finished_requests_leave_the_running_book():
    gov = governor()
    gov.on_verified("a", 3, 1)
    gov.on_verified("b", 2, 2)
    gov.forget_finished({"b"})
    assert gov.book.running_ids() == ["b"]
    assert len(gov.book._finished) == 1


def serve(per_request: bool, draft_s: float = 0.0004, steps: int = 3000, seed: int = 0) -> float:
    """Tokens per second of a closed loop: 16 requests, half accepting 0.9 per draft and half 0.2,
    on a clock where a verified token costs 5% of the fixed step and each drafted position
    ``draft_s``. Outcomes reach the governor as vLLM's do: a verification per request that verified
    a draft, then a zero row for each request cut to nothing."""
    rng = np.random.default_rng(seed)
    inner = BanditGovernor(GovernorConfig(drafter_class="draft_model", k_max=K_MAX, seed=seed))
    gov = PerRequestGovernor(inner, seed=seed) if per_request else inner
    batch, fixed, verify = 16, 0.010, 0.0005
    alpha = np.where(np.arange(batch) < batch // 2, 0.9, 0.2)
    ids = [f"r{i}" for i in range(batch)]
    tokens = seconds = 0.0
    for _ in range(steps):
        d = gov.select(StepContext(num_decoding=batch, k_max=K_MAX, drafter_class="draft_model"))
        drafted = np.full(batch, d.k)
        verified = gov.allot(ids, drafted) if per_request else drafted
        ok = rng.random((batch, K_MAX)) < alpha[:, None]
        accepted = np.minimum(np.cumprod(ok, axis=1).sum(axis=1), verified)
        t = (fixed + verify * (batch + verified.sum()) + draft_s * max(d.k, 1)) * rng.lognormal(0, 0.05)
        order = np.argsort(verified == 0, kind="stable")  # heard first, then the requests cut to nothing
        if per_request:
            for i in order[verified[order] > 0]:
                gov.on_verified(ids[i], int(verified[i]), int(accepted[i]))
        gov.observe(d, StepOutcome(verified[order].astype(np.int64), accepted[order].astype(np.int64), t))
        tokens += batch + accepted.sum()
        seconds += t
    return tokens / seconds


def test_per_request_verification_serves_a_mixed_batch_faster_than_the_batch_governor():
    """With half the batch rejecting most drafts and verification dear, cutting those drafts
    must beat verifying K for everyone (the batch governor alone)."""
    assert serve(True) > 1.05 * serve(False)


def test_per_request_verification_does_not_draft_deeper_where_drafting_is_dear():
    """Each drafted position costs 40% of the fixed step: cuts save verification, not drafting,
    so the bandit under cuts must not be lured to a deep K by what the cut requests never showed."""
    assert serve(True, draft_s=0.004) > 0.97 * serve(False, draft_s=0.004)


def test_the_bandit_learns_a_cut_step_as_if_nothing_were_cut():
    """A cut request that accepted all it verified is drafted to K, its continuation drawn from its
    own posterior; a request the allotment cut to nothing gets its row too; each added draft's
    price is added to the step's time. A request that rejected, or was not cut, is left as it was."""
    inner = Recorder([0.01, 0.002, 0.0, 0.0])
    gov = PerRequestGovernor(inner)
    gov.price.mean = np.array([0.01, 0.002, 0.0, 0.0])
    gov._cut_ids.append({"cut", "cut_rejected"})
    gov._zero_cut_alpha = np.ones((1, K_MAX))  # the request cut to nothing would accept every draft
    for _ in range(30):  # "cut" accepts everything it is shown: its continuation is all accepted
        gov.book.observe("cut", 3, 3)
    gov._strength = 1.0
    gov.on_verified("cut", 1, 1)
    gov.on_verified("cut_rejected", 2, 1)
    gov.on_verified("whole", 3, 2)
    d = Decision(k=3, bucket=0, num_decoding=4, step_id=1)
    gov.observe(d, StepOutcome(np.array([1, 2, 3, 0]), np.array([1, 1, 2, 0]), 0.05))
    seen = inner.seen[-1]
    assert seen.drafted.tolist() == [3, 2, 3, 3]
    assert seen.accepted.tolist() == [3, 1, 2, 3]
    assert seen.step_duration_s == pytest.approx(0.05 + 0.002 * 5)
