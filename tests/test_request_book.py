"""The request book (issue 16): per-request counts, the learnt strength, the budget's allotment."""

from __future__ import annotations

import numpy as np
import pytest

from banditk.governor.request_book import RequestBook
from banditk.posterior.request_acceptance import MAX_STRENGTH


def test_a_verified_step_counts_successes_up_to_the_first_rejection():
    book = RequestBook(k_max=3)
    book.observe("a", drafted=3, accepted=1)  # position 1 accepted, 2 rejected, 3 never reached
    book.observe("a", drafted=3, accepted=3)
    book.observe("a", drafted=0, accepted=0)  # K = 0: nothing verified
    book.observe("b", drafted=2, accepted=0)
    succ, fail = book.counts(["a", "b", "new"])
    assert succ.tolist() == [[2, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert fail.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize(("drafted", "accepted"), [(4, 1), (2, 3), (1, -1)])
def test_an_impossible_step_names_the_request_and_the_counts(drafted, accepted):
    with pytest.raises(ValueError, match=f"request 'r7'.*accepted={accepted}, drafted={drafted}"):
        RequestBook(k_max=3).observe("r7", drafted, accepted)


def test_finished_requests_leave_the_book_and_inform_the_strength():
    book = RequestBook(k_max=2, finished_window=3)
    m = np.array([0.5, 0.5])
    assert book.strength(m) == MAX_STRENGTH  # no evidence: the class decides
    for i in range(5):  # all-or-nothing requests: as different as they can be
        for _ in range(10):
            book.observe(f"r{i}", drafted=2, accepted=2 if i % 2 else 0)
        book.finish(f"r{i}")
    book.finish("never-seen")
    assert len(book) == 0 and len(book._finished) == 3  # the window keeps the last three
    assert book.strength(m) < 1


def test_the_budget_goes_to_requests_that_have_shown_they_accept():
    """The issue's mix: half the requests accept at 0.9 per position, half at 0.3."""
    rng = np.random.default_rng(0)
    k, book = 3, RequestBook(k_max=3)

    def step(rid, rate):
        first_miss = np.flatnonzero(rng.random(k) >= rate)
        book.observe(rid, drafted=k, accepted=int(first_miss[0]) if first_miss.size else k)

    for i in range(60):  # finished requests of the same mix teach the strength
        for _ in range(12):
            step(f"old{i}", 0.9 if i % 2 else 0.3)
        book.finish(f"old{i}")
    ids = [f"new{i}" for i in range(20)]
    rates = np.where(np.arange(20) % 2, 0.9, 0.3)
    for _ in range(4):  # a few steps of the running requests
        for rid, rate in zip(ids, rates, strict=True):
            step(rid, rate)
    class_mean = np.array([0.6, 0.45, 0.45])
    t = book.allotment(ids, np.full(20, k), class_mean, budget=20)
    assert t.sum() == 20 and (t <= k).all()
    assert t[rates == 0.9].sum() >= 3 * t[rates == 0.3].sum()
