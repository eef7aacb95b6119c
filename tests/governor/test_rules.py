"""Each of the governor's rules on its own: known answers, closed forms, twins pinned equal."""

import numpy as np
import pytest
from scipy import stats

from banditk.governor import chunk_cells, epochs, outliers, scoring
from banditk.governor.latency_fit import batch_ratio, fold
from banditk.governor.prior_weighing import PriorWeigher
from banditk.governor.thompson import draw_tokens_and_times
from banditk.posterior import latency_model, nig
from banditk.posterior.stats import SufficientStats


def test_thompson_draws_match_the_closed_forms():
    # E(1) = 1 + alpha_1 with alpha_1 ~ Beta(a, b); the NIG mean is Student-t_{2a}(m, b / (a k)).
    rng = np.random.default_rng(0)
    a, b = np.array([30.0, 4.0]), np.array([10.0, 4.0])  # 30 and 10: Wilson-Hilferty; 4: the exact sampler
    m, k, an, bn = np.full(3, 0.02), np.full(3, 5.0), np.array([3.0, 12.0, 50.0]), np.full(3, 1e-4)
    tokens, t = draw_tokens_and_times(rng, a, b, m, k, an, bn, draws=40_000)
    beta = stats.beta(a[0], b[0])
    assert abs(tokens[:, 1].mean() - (1 + beta.mean())) < 0.002
    assert abs(tokens[:, 1].std() - beta.std()) / beta.std() < 0.02
    for j in range(3):
        st = stats.t(df=2 * an[j], loc=m[j], scale=np.sqrt(bn[j] / (an[j] * k[j])))
        assert abs(np.median(t[:, j]) - m[j]) < 0.05 * st.std()
        assert abs(t[:, j].std() - st.std()) / st.std() < 0.03
    assert np.all(tokens[:, 0] == 1.0)


def test_one_draw_and_a_batch_of_draws_agree_in_shape():
    rng = np.random.default_rng(1)
    args = (np.ones(2), np.ones(2), np.full(3, 0.1), np.ones(3), np.full(3, 20.0), np.full(3, 1e-3))
    tokens, t = draw_tokens_and_times(rng, *args)
    assert tokens.shape == t.shape == (3,)
    tokens, t = draw_tokens_and_times(rng, *args, draws=5)
    assert tokens.shape == t.shape == (5, 3)


def test_nig_sample_mean_is_the_governors_draw():
    # The same generator state gives the same draw through nig.sample_mean and the Thompson draw.
    m, k, a, b = np.full(3, 0.02), np.full(3, 5.0), np.full(3, 20.0), np.full(3, 1e-4)
    one = nig.sample_mean(np.random.default_rng(7), m, k, a, b)
    _, t = draw_tokens_and_times(np.random.default_rng(7), np.zeros(0), np.zeros(0), m, k, a, b)
    np.testing.assert_array_equal(one, t)


def test_decode_scores_favour_the_current_k_by_the_penalty():
    tokens, t = np.array([10.0, 10.4]), np.array([1.0, 1.0])
    # K=1 is 4% better: a 3% bonus keeps K=0 below it (10.3), a 5% bonus above it (10.5).
    assert np.argmax(scoring.decode_scores(tokens.copy(), t, 0, 0.03)) == 1
    assert np.argmax(scoring.decode_scores(tokens.copy(), t, 0, 0.05)) == 0
    assert np.argmax(scoring.decode_scores(tokens.copy(), t, -1, 0.05)) == 1


def test_chunk_step_scores_charge_time_at_the_decode_rate():
    # 8 tokens in 0.5 s and 12 in 0.8 s at 10 tok/s: 3.0 vs 4.0 -> K=1 wins without a bonus.
    s = scoring.chunk_step_scores(np.array([8.0, 12.0]), 10.0, np.array([0.5, 0.8]), 0, 0.0)
    assert s.tolist() == [3.0, 4.0]


def test_kv_factor_is_one_below_the_threshold_and_falls_with_k():
    f = scoring.kv_factor(0.9, 0.9, 3.0, 4)
    assert f.tolist() == [1.0] * 5
    f = scoring.kv_factor(0.95, 0.9, 3.0, 4)
    assert np.all(np.diff(f) < 0) and f[0] == 1.0


def test_epochs_hold_then_double_only_when_settled():
    assert [epochs.holds(h, 8, True, False) for h in (0, 6, 7)] == [True, True, False]
    assert not epochs.holds(0, 8, True, True)  # KV pressure resamples at once
    asked = []
    assert epochs.next_length(8, False, lambda: asked.append(1) or True, 8, 32) == 8
    assert asked == []  # a switch never draws the confidence check
    assert epochs.next_length(8, True, lambda: True, 8, 32) == 16
    assert epochs.next_length(32, True, lambda: asked.append(1) or True, 8, 32) == 32
    assert asked == []  # at the ceiling, no check either


def test_outliers_are_skipped_and_stalls_capped_until_they_become_the_rule():
    run, credits = 0, []
    for _ in range(outliers.OUTLIER_RUN + 2):
        credit, run = outliers.judge(1.0, 0.01, 10.0, 10.0, 1.5, run)
        credits.append(credit)
    assert credits == [None] * outliers.OUTLIER_RUN + [1.0, 1.0]
    assert outliers.judge(0.012, 0.01, 10.0, 10.0, 1.5, run) == (0.012, 0)  # a normal step ends the run
    # A thin cell expects the latency model's guess: a clock jump past it is dropped, a stall
    # is credited as it is (and is slow: the run goes on); with no scale yet there is nothing
    # to judge by.
    assert outliers.judge(1.0, 0.01, 2.0, 10.0, 1.5, 4) == (None, 5)
    assert outliers.judge(0.05, 0.01, 2.0, 10.0, 1.5, 4) == (0.05, 5)
    assert outliers.judge(1.0, None, 10.0, 10.0, 1.5, 4) == (1.0, 4)
    # A stall below the outlier factor is credited at the cap, and counts toward the run.
    credit, run = outliers.judge(0.05, 0.01, 10.0, 10.0, 1.5, 0)
    assert credit == pytest.approx(0.015) and run == 1
    run = outliers.OUTLIER_RUN
    assert outliers.judge(0.05, 0.01, 10.0, 10.0, 1.5, run) == (0.05, run + 1)  # a lasting slowdown


def test_latency_twins_equal_the_array_form():
    rng = np.random.default_rng(2)
    for _ in range(50):
        w = rng.uniform(0, 0.01, 4)
        b, k_max = float(rng.integers(1, 300)), int(rng.integers(1, 9))
        ks = np.arange(k_max + 1)
        array = latency_model.predict(w, b, k_max)
        twin = latency_model.step_times(w.tolist(), b, ks + 1.0, np.maximum(ks, 1).astype(float))
        np.testing.assert_allclose(array, twin, rtol=1e-14)
        assert all(latency_model.step_time(w.tolist(), b, int(k)) == pytest.approx(array[k], rel=1e-15) for k in ks)


def test_batch_ratio_scalar_and_array_forms_agree_and_clip():
    model, cell = np.array([0.05, 0.2, 0.5]), np.array([0.1, 0.1, 0.1])
    arr = batch_ratio(model, cell)
    assert arr.tolist() == [0.5, 2.0, 2.0]
    assert [batch_ratio(float(m), c) for m, c in zip(model, cell)] == arr.tolist()


def test_fold_equals_adding_rows_one_by_one():
    rows = [(8.0, 2, 0.05, 1.0), (4.0, 0, 0.03, 0.5), (16.0, 3, 0.08, 1.0)]
    d1 = SufficientStats.zeros(4, 3)
    fold(d1, list(rows), 0.9)
    d2 = SufficientStats.zeros(4, 3)
    for r in rows:
        fold(d2, [r], 0.9)
    np.testing.assert_allclose(d1.reg_xtx, d2.reg_xtx)
    np.testing.assert_allclose(d1.reg_xty, d2.reg_xty)
    assert d1.reg_n == pytest.approx(d2.reg_n)


def _chunk_data(times_by_k, chunks_by_k):
    d = SufficientStats.zeros(2, 1)
    for k, (ts, ps) in enumerate(zip(times_by_k, chunks_by_k)):
        for t, p in zip(ts, ps):
            chunk_cells.credit(d, 0, k, t, p, 1.0)
    return d


def test_chunk_cells_are_read_at_one_chunk_size_along_the_shared_slope():
    # t = base_K + 1e-4 * P exactly; K=0 met P in {1000, 3000}, K=1 met {500, 1500}.
    d = _chunk_data([[0.1 + 0.1, 0.1 + 0.3], [0.2 + 0.05, 0.2 + 0.15]], [[1000, 3000], [500, 1500]])
    zero = SufficientStats.zeros(2, 1)
    m, kn, an, bn = chunk_cells.chunk_step_posterior(zero, d, 0, 2000, np.array([0.1, 0.2, 0.3]), 0.0, 2.0, 0.1)
    # Data hold two steps a cell at weight 2 against the prior's 2: halfway to the additive prior.
    np.testing.assert_allclose(m[:2], [0.3, 0.4], rtol=1e-9)
    np.testing.assert_allclose(kn, [4.0, 4.0, 2.0])
    # K=2 never met a chunk: the best-measured K's time there plus the decode-only difference.
    assert m[2] == pytest.approx(0.3 + 0.2)


def test_chunk_slope_falls_back_to_the_prefill_price_where_chunks_did_not_vary():
    d = _chunk_data([[0.2, 0.2], [0.3, 0.3]], [[1000, 1000], [1000, 1000]])
    zero = SufficientStats.zeros(2, 1)
    m = chunk_cells.chunk_step_posterior(zero, d, 0, 2000, np.array([0.1, 0.2, 0.3]), 1e-4, 2.0, 0.1)[0]
    np.testing.assert_allclose(m[:2], [0.3, 0.4], rtol=1e-9)


def test_a_prior_with_no_contradiction_keeps_its_weight():
    p = SufficientStats.zeros(2, 2)
    p.cell_n[:] = 50.0
    p.cell_sum[:] = 50 * 0.02
    p.cell_sumsq[:] = 50 * 0.02**2 * 1.01
    w = PriorWeigher(p)
    assert w.weighed(np.zeros(2), np.zeros(2)) is p
    half = w.weighed(np.array([0.0, 1.0]), np.zeros(2))
    np.testing.assert_array_equal(half.cell_n[0], p.cell_n[0])
    assert np.all(half.cell_n[1] < 1.0)  # tau^2 = 1: a 50-step cell is worth under one
    assert half.acc_successes is p.acc_successes  # acceptance is used as loaded
