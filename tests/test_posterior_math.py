"""The posterior math against closed forms (scipy) and against one-by-one updates."""

import numpy as np
import pytest
from scipy import stats

from banditk.posterior import nig
from banditk.posterior.acceptance import expected_tokens, position_counts
from banditk.posterior.latency_model import DEFAULT_SHAPE, features, features_rows, solve
from banditk.posterior.sampling import gamma_variates

# ---- acceptance ----------------------------------------------------------------------


def test_beta_update_semantics_m_of_k():
    # 2 of 4 accepted: successes at 1, 2; failure at 3; position 4 unobserved.
    s, f = position_counts(np.array([4]), np.array([2]), 4)
    assert s.tolist() == [1, 1, 0, 0] and f.tolist() == [0, 0, 1, 0]
    # all accepted: successes at 1..k, no failure.
    s, f = position_counts(np.array([3]), np.array([3]), 4)
    assert s.tolist() == [1, 1, 1, 0] and f.tolist() == [0, 0, 0, 0]
    # none accepted: failure at 1.
    s, f = position_counts(np.array([2]), np.array([0]), 4)
    assert s.tolist() == [0, 0, 0, 0] and f.tolist() == [1, 0, 0, 0]
    # drafted nothing: nothing observed.
    s, f = position_counts(np.array([0]), np.array([0]), 4)
    assert s.sum() == 0 and f.sum() == 0


def test_batch_counts_equal_one_by_one():
    rng = np.random.default_rng(0)
    drafted = rng.integers(0, 6, 500)
    accepted = np.minimum(rng.integers(0, 6, 500), drafted)
    s, f = position_counts(drafted, accepted, 5)
    s1, f1 = np.zeros(5), np.zeros(5)
    for k, m in zip(drafted, accepted):
        a, b = position_counts(np.array([k]), np.array([m]), 5)
        s1 += a
        f1 += b
    assert np.array_equal(s, s1) and np.array_equal(f, f1)


def test_beta_posterior_is_prior_times_likelihood():
    # Beta(1 + s, 1 + f) must be proportional to Beta(1, 1) x Bernoulli likelihood.
    s, f = 7.0, 3.0
    xs = np.linspace(0.05, 0.95, 7)
    log_post = stats.beta(1 + s, 1 + f).logpdf(xs)
    log_joint = stats.beta(1, 1).logpdf(xs) + s * np.log(xs) + f * np.log1p(-xs)
    diff = log_post - log_joint
    assert np.allclose(diff, diff[0])


def test_expected_tokens_closed_form():
    a = np.array([0.8, 0.7, 0.6])
    e = expected_tokens(a)
    assert np.allclose(e, [1, 1.8, 1.8 + 0.56, 1.8 + 0.56 + 0.336])
    # batched over leading axes
    assert np.allclose(expected_tokens(np.stack([a, a]))[1], e)


# ---- Normal-Inverse-Gamma ---------------------------------------------------------------


def _nig_logpdf(mu, s2, m, k, a, b):
    return stats.invgamma(a, scale=b).logpdf(s2) + stats.norm(m, np.sqrt(s2 / k)).logpdf(mu)


def test_nig_posterior_is_prior_times_likelihood():
    rng = np.random.default_rng(1)
    y = rng.normal(0.05, 0.004, size=12)
    m0, k0, a0, b0 = 0.04, 0.5, 2.0, 1e-5
    mn, kn, an, bn = nig.posterior(m0, k0, a0, b0, y.size, y.sum(), (y**2).sum())
    points = [(0.049, 1.5e-5), (0.051, 2e-5), (0.05, 1e-5), (0.047, 3e-5)]
    diffs = []
    for mu, s2 in points:
        log_post = _nig_logpdf(mu, s2, mn, kn, an, bn)
        log_joint = _nig_logpdf(mu, s2, m0, k0, a0, b0) + stats.norm(mu, np.sqrt(s2)).logpdf(y).sum()
        diffs.append(log_post - log_joint)
    assert np.allclose(diffs, diffs[0], atol=1e-8)


def test_nig_batch_equals_sequential_updates():
    rng = np.random.default_rng(2)
    y = rng.normal(1.0, 0.2, size=30)
    m, k, a, b = 0.5, 1.0, 2.0, 0.1
    batch = nig.posterior(m, k, a, b, y.size, y.sum(), (y**2).sum())
    for v in y:
        m, k, a, b = nig.posterior(m, k, a, b, 1, v, v * v)
    assert np.allclose(batch, (m, k, a, b))


def test_nig_marginal_of_mean_is_student_t():
    # mu ~ t_{2a}(m, b / (a k)): check the sampler's spread against the closed form.
    rng = np.random.default_rng(3)
    m, k, a, b = 2.0, 3.0, 6.0, 0.5
    draws = np.array([nig.sample_mean(rng, np.array([m]), k, np.array([a]), b)[0] for _ in range(40000)])
    t = stats.t(df=2 * a, loc=m, scale=np.sqrt(b / (a * k)))
    assert abs(draws.mean() - m) < 0.01
    assert abs(draws.std() - t.std()) / t.std() < 0.03


def test_posterior_scalar_matches_vector():
    args = (0.02, 0.1, 2.0, 4e-6, 7.5, 0.16, 0.0036)
    assert np.allclose(nig.posterior_scalar(*args), [float(v) for v in nig.posterior(*args)])


# ---- sampling ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [0.5, 2.0, 9.0, 40.0, 4000.0])
def test_gamma_variates_match_gamma_distribution(shape):
    rng = np.random.default_rng(4)
    g = gamma_variates(rng, np.full(100_000, shape))
    ref = stats.gamma(shape)
    qs = [0.05, 0.5, 0.95]
    assert np.allclose(np.quantile(g, qs), ref.ppf(qs), rtol=0.02, atol=0.01)


# ---- latency regression -----------------------------------------------------------------


def test_regression_recovers_linear_truth():
    w_true = np.array([0.02, 0.0005, 0.001, 0.00002])
    rng = np.random.default_rng(5)
    bs = rng.integers(1, 128, 400)
    ks = rng.integers(0, 5, 400)
    x = features_rows(bs, ks)
    y = x @ w_true + rng.normal(0, 1e-4, 400)
    w0 = 0.01 * DEFAULT_SHAPE
    w = solve(w0, np.diag(1e-8 / w0**2), x.T @ x, x.T @ y)  # noise var 1e-8
    assert np.allclose(w, w_true, rtol=0.05, atol=2e-5)


def test_k0_costs_the_cache_sync_forward():
    # K = 0 and K = 1 run the same number of drafter forwards (vLLM's cache-sync).
    x = features(16, np.array([0, 1]))
    assert x[0, 2] == x[1, 2] == 1.0 and x[0, 3] == x[1, 3] == 16.0
