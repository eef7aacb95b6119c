"""The cells' prior count fit to the latency model's misfit (banditk.governor.cell_strength), and
the governor it makes, installed as experiments/cell_strength_variant.py installs it."""

import numpy as np
import pytest

from banditk.core.buckets import DEFAULT_BUCKET_EDGES
from banditk.core.config import GovernorConfig
from banditk.core.types import StepContext
from banditk.governor import bandit
from banditk.governor.cell_strength import MIN_CELL_OBSERVATIONS, cell_count, fitted_cell_count, misfit_variance
from banditk.io.prior import DrafterKey, Prior
from banditk.posterior.latency_model import features
from banditk.posterior.stats import SufficientStats
from banditk.tools.synthetic import SyntheticTruth
from tests.experiment_scripts import load

variant = load("cell_strength_variant")


def cells(rng, tau: float, cv: float, n: float, buckets=(1, 2, 4, 8, 16, 32, 64, 128), k_max: int = 4):
    """Statistics of cells whose true means are the model's times off by exp(N(0, tau^2)), each
    holding ``n`` steps of ``cv`` noise; and the model's times and design rows."""
    design = np.stack([features(b, np.arange(k_max + 1)) for b in buckets])
    model = design @ np.array([0.02, 0.001, 0.0012, 0.00002])
    mean = model * np.exp(rng.normal(0.0, tau, model.shape))
    steps = mean[..., None] * (1.0 + cv * rng.standard_normal(model.shape + (int(n),)))
    stats = (np.full(model.shape, float(n)), steps.sum(axis=-1), (steps**2).sum(axis=-1))
    return stats, model, design


def test_a_known_misfit_is_recovered():
    # The model as the governor has it: fit to the cells it is judged on (weighted least squares
    # in relative terms), so the residuals have M - p degrees of freedom, which the estimate
    # accounts for. The prior guess is the truth, so only the data's part can bias the mean.
    rng = np.random.default_rng(7)
    estimates = []
    for _ in range(100):
        stats, model, design = cells(rng, 0.05, 0.1, 40)
        x, y = design.reshape(-1, 4), (stats[1] / stats[0]).reshape(-1)
        w = 1.0 / model.reshape(-1)
        fit = (design @ np.linalg.lstsq(x * w[:, None], y * w, rcond=None)[0]).reshape(model.shape)
        estimates.append(misfit_variance(*stats, fit, design, 0.0025))
    # 40 cells of tau = 5%: each fit spreads about 25%, so the mean of 100 (2.5%) lies within
    # 10% of 0.0025, and no fit is off by a factor 2.5.
    assert np.mean(estimates) == pytest.approx(0.0025, rel=0.1)
    assert 0.001 < min(estimates) and max(estimates) < 0.00625


def test_sampling_noise_is_not_read_as_misfit():
    # An exact model, cells of 10 steps at 10% noise: the raw squared log residuals average
    # cv^2 / n = 0.001, all of it noise. Unsubtracted, the count would be about 0.01 / 0.001 = 10.
    rng = np.random.default_rng(3)
    stats, model, design = cells(rng, 0.0, 0.1, 10)
    raw = float(np.mean(np.log(stats[1] / stats[0] / model) ** 2))
    assert raw == pytest.approx(0.001, rel=0.3)
    assert fitted_cell_count(stats, model, design, 0.1, 4.0, 16.0) == 16.0


def least_squares_model(stats, design, cells_used):
    """The model's times fit to the means of ``cells_used`` (relative least squares)."""
    x, y = design[cells_used], stats[1][cells_used] / stats[0][cells_used]
    w = 1.0 / y
    return design @ np.linalg.lstsq(x * w[:, None], y * w, rcond=None)[0]


def test_until_cells_outnumber_the_model_the_prior_guess_holds():
    rng = np.random.default_rng(0)
    (n, s, ss), _, design = cells(rng, 0.3, 0.1, 40, buckets=(8,))
    n, s, ss, design = n[0], s[0], ss[0], design[0]
    # One bucket, K = 0..4: rank 3. A model fit to three cells fits them exactly: no evidence.
    three = np.arange(5) < 3
    held = tuple(np.where(three, v, 0.0) for v in (n, s, ss))
    fit3 = least_squares_model((n, s, ss), design, three)
    assert fitted_cell_count(held, fit3, design, 0.1, 4.0, 16.0) == pytest.approx(4.0, rel=1e-6)
    # Five cells 30% off a line: two residuals beyond the rank show the misfit.
    fit5 = least_squares_model((n, s, ss), design, np.ones(5, dtype=bool))
    assert fitted_cell_count((n, s, ss), fit5, design, 0.1, 4.0, 16.0) < 1.0


def test_thin_cells_are_not_counted():
    rng = np.random.default_rng(1)
    stats, model, design = cells(rng, 0.3, 0.1, 40)
    thin = (np.full_like(stats[0], MIN_CELL_OBSERVATIONS - 1.0),) + tuple(
        s * (MIN_CELL_OBSERVATIONS - 1.0) / 40.0 for s in stats[1:]
    )
    assert misfit_variance(*thin, model, design, 0.01) == 0.01
    assert misfit_variance(*stats, model, design, 0.01) > 0.05


def test_the_count_is_bounded():
    assert cell_count(1e9, 0.1, 16.0) == pytest.approx(0.01)
    assert cell_count(1e-12, 0.1, 16.0) == 16.0
    assert cell_count(0.01, 0.1, 16.0) == pytest.approx(1.0)


# ---- the governor with the fitted count ----------------------------------------------------


def explored_ks(monkeypatch, fitted: bool, truth: SyntheticTruth, steps: int = 600, seed: int = 0) -> set[int]:
    """The Ks a flat governor plays at B = 16 on ``truth`` after its first 64 steps."""
    if fitted:
        monkeypatch.setattr(bandit, "GoodputPosterior", variant.FittedCountPosterior)
    cfg = GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=seed, cell_prior_count=4.0 if fitted else 0.1)
    gov, rng, seen = bandit.BanditGovernor(cfg), np.random.default_rng(seed), set()
    for i in range(steps):
        d = gov.select(StepContext(num_decoding=16, k_max=truth.k_max, drafter_class="mtp"))
        gov.observe(d, truth.outcome(rng, d, 16))
        if i >= 64:
            seen.add(d.k)
    return seen


#: Eight drafts, an exact linear clock and acceptance that falls fast: K = 1 is best at B = 16,
#: and the deep Ks lose by far more than the model's spread.
STEEP = SyntheticTruth(acceptance=(0.7, 0.4, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05), noise_cv=0.05)


def test_where_the_model_fits_the_fitted_count_rises_and_fewer_ks_are_looked_at(monkeypatch):
    assert STEEP.best_k(16) == 1
    flat = explored_ks(monkeypatch, False, STEEP)
    fitted = explored_ks(monkeypatch, True, STEEP)
    assert len(fitted) < len(flat), (sorted(fitted), sorted(flat))


def fed_posterior(posterior, bend: np.ndarray, **config):
    """A ``posterior`` fed 60 rounds of steps at three buckets' representative B and K = 0..4
    from a clock linear in B and K (5% noise), each K's time times ``bend[K]``; refit every
    ``regression_refresh`` steps, as the governor refits it."""
    cfg = GovernorConfig(drafter_class="mtp", k_max=4, seed=0, cell_prior_count=4.0, **config)
    post, rng, truth, steps = posterior(cfg, None), np.random.default_rng(0), SyntheticTruth(), 0
    for _ in range(60):
        for bucket in (1, 5, 9):
            batch = float(post.rep_batch[bucket])
            for k in range(5):
                t = float(features(batch, k)[0] @ np.asarray(truth.weights)) * (1.0 + 0.05 * rng.standard_normal())
                post.learn_step_time(k, bucket, batch, t * bend[k], 0)
                steps += 1
                if steps % cfg.regression_refresh == 0:
                    post.refresh()
    post.refresh()
    return post


BENT = np.exp([0.3, -0.3, 0.3, -0.3, 0.3])


def test_with_the_ridge_scaled_by_the_rows_seen_the_count_follows_the_model_fit():
    exact = fed_posterior(variant.FittedCountDataRidgePosterior, np.ones(5), model_prior_strength=1.0)
    bent = fed_posterior(variant.FittedCountDataRidgePosterior, BENT, model_prior_strength=1.0)
    assert exact.config.cell_prior_count > 8.0  # the model fits the linear clock to ~3%
    assert bent.config.cell_prior_count < 0.5  # 30% off the line at every K


def test_the_shipped_ridge_keeps_the_model_off_an_exactly_linear_clock():
    # The contrast behind the data-scaled ridge: scaled by every bucket's design (B up to 256+),
    # 20 observations of prior at the default shape outweigh 900 steps at B <= 39, and the model
    # misses the exact clock by tens of percent, so the fitted count stays at its floor's order.
    exact = fed_posterior(variant.FittedCountPosterior, np.ones(5))
    assert exact.config.cell_prior_count < 0.5
    assert fed_posterior(variant.FittedCountDataRidgePosterior, np.ones(5)).config.cell_prior_count > 1.0


def test_a_variant_with_its_defaults_replaces_only_fields_left_at_the_shipped_default(monkeypatch):
    monkeypatch.setattr(bandit, "GoodputPosterior", bandit.GoodputPosterior)
    variant.install("cell-strength+data-ridge", with_defaults=True)
    gov = bandit.BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, model_prior_strength=5.0))
    assert gov.posterior.count_prior == 4.0  # left at the shipped 0.1: the variant's 4
    assert gov.posterior.config.model_prior_strength == 5.0  # set by the user: kept


def test_the_ridge_scaled_by_the_rows_seen_fits_the_linear_clock_on_its_own():
    post = fed_posterior(variant.DataRidgePosterior, np.ones(5), model_prior_strength=1.0)
    truth = np.asarray(SyntheticTruth().weights)
    for bucket in (1, 5, 9):
        want = features(float(post.rep_batch[bucket]), np.arange(5)) @ truth
        assert np.allclose(post.cell_prior_mean[bucket], want, rtol=0.05)
    assert post.config.cell_prior_count == 4.0  # as fed_posterior configures it: not refit here


# ---- the latency model's ridge relative to each prior weight ------------------------------


def worst_model_error(post) -> float:
    """The largest relative error of the model's cell means against the exact linear clock,
    over every bucket, the unseen ones included."""
    truth = np.asarray(SyntheticTruth().weights)
    want = np.stack([features(float(b), np.arange(5)) @ truth for b in post.rep_batch])
    return float(np.max(np.abs(post.cell_prior_mean / want - 1.0)))


def test_the_relative_ridge_fits_the_clock_where_measured_and_where_extrapolated():
    # Fed at B = 2, 9 and 38 only; the buckets run to B = 313. Relative to each weight the prior
    # binds where a feature is small and yields where the data make it large, so the B = 313
    # cells come within 5% of an exact clock, where the shipped ridge misses the clock by
    # 14-78% in every bucket, the measured ones included.
    wired = variant.WIRED_DEFAULTS["relative-ridge"]
    relative = fed_posterior(variant.RelativeRidgePosterior, np.ones(5), **wired)
    assert worst_model_error(relative) < 0.05
    assert worst_model_error(fed_posterior(bandit.GoodputPosterior, np.ones(5))) > 0.14


def test_with_a_prior_files_weights_and_no_step_the_model_is_those_weights():
    # No step yet, so no mean step time to scale the ridge by (0 / 0): the prior's own mean over
    # the design stands in.
    weights = np.asarray(SyntheticTruth().weights)
    stats = SufficientStats.zeros(4, len(DEFAULT_BUCKET_EDGES))
    prior = Prior(DrafterKey("mtp"), 4, DEFAULT_BUCKET_EDGES, stats, latency_weights=weights)
    post = variant.RelativeRidgePosterior(GovernorConfig(drafter_class="mtp", k_max=4, model_prior_strength=0.1), prior)
    assert np.allclose(post.weights, weights)
    assert np.allclose(post.cell_prior_mean, post._design @ weights)
