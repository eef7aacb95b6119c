"""A prior is weighed against live data: it keeps its weight where it agrees and yields where not."""

import numpy as np
from streams import run_stream

from banditk.core.buckets import DEFAULT_BUCKET_EDGES, bucket_of, representative_batch
from banditk.core.config import GovernorConfig
from banditk.governor import BanditGovernor
from banditk.io.prior import DrafterKey, Prior
from banditk.posterior.prior_conflict import LIVE_BIAS_SD, MIN_LIVE_N, PriorCells
from banditk.posterior.stats import SufficientStats
from banditk.tools.synthetic import SyntheticTruth

NB, K1 = 4, 3


def _cells(mean: np.ndarray, n: np.ndarray, cv: float = 0.03):
    """(n, sum, sum of squares) of cells of the given means and relative noise."""
    return n, n * mean, n * mean * mean * (1.0 + cv * cv)


def test_a_prior_that_agrees_keeps_all_its_weight():
    mean = np.full((NB, K1), 0.05)
    prior = _cells(mean, np.full((NB, K1), 200.0))
    live = _cells(mean, np.where(np.arange(K1) == 1, 500.0, 0.0) * np.ones((NB, 1)))
    tau2 = PriorCells(*prior).calibration_variance(*live)
    assert np.all(tau2 == 0.0)
    assert np.all(PriorCells(*prior).kept_share(tau2) == 1.0)


def test_a_difference_within_the_noise_and_the_governors_own_error_costs_the_prior_nothing():
    mean = np.full((NB, K1), 0.05)
    n_prior, n_live = np.full((NB, K1), 200.0), np.zeros((NB, K1))
    n_live[0, 1] = 500.0
    sd = np.sqrt(0.03**2 * (1 / 500 + 1 / 200) + LIVE_BIAS_SD**2)  # sd of the relative difference
    live_mean = mean.copy()
    live_mean[0, 1] *= 1.0 + sd  # one standard deviation off
    tau2 = PriorCells(*_cells(mean, n_prior)).calibration_variance(*_cells(live_mean, n_live))
    assert np.allclose(tau2, 0.0, atol=1e-12)  # r^2 = v + d^2: nothing beyond what is expected
    live_mean[0, 1] = mean[0, 1] * (1.0 + 2.0 * sd)
    tau2 = PriorCells(*_cells(mean, n_prior)).calibration_variance(*_cells(live_mean, n_live))
    assert np.allclose(tau2, 3.0 * sd * sd, rtol=1e-6)  # beyond it, the excess


def test_a_cell_far_off_discounts_its_bucket_and_every_other():
    mean = np.full((NB, K1), 0.05)
    n_prior, n_live = np.full((NB, K1), 200.0), np.zeros((NB, K1))
    n_live[1, 0] = 400.0
    live_mean = mean.copy()
    live_mean[1, 0] *= 0.8  # this box is 20% faster than the prior says
    prior = _cells(mean, n_prior)
    tau2 = PriorCells(*prior).calibration_variance(*_cells(live_mean, n_live))
    # tau^2 = r^2 - v - d^2, in every bucket (none else has evidence).
    assert np.allclose(tau2, 0.04 - 0.03**2 * (1 / 400 + 1 / 200) - LIVE_BIAS_SD**2, rtol=1e-6)
    kept = PriorCells(*prior).kept_share(tau2)
    # 200 steps of 3% noise against a 20% calibration error: worth about a fifth of a step.
    assert np.all(kept * 200 < 0.25)


def test_cells_with_too_little_live_data_are_not_compared():
    mean = np.full((NB, K1), 0.05)
    n_live = np.zeros((NB, K1))
    n_live[2, 2] = MIN_LIVE_N * 0.9
    tau2 = PriorCells(*_cells(mean, np.full((NB, K1), 200.0))).calibration_variance(*_cells(0.5 * mean, n_live))
    assert np.all(tau2 == 0.0)


def test_noiseless_cells_give_finite_weights():
    """A replayed or hand-made trace has no noise: 0 tau^2 over 0 noise must not be NaN."""
    mean = np.full((NB, K1), 0.05)
    n_prior, n_live = np.full((NB, K1), 200.0), np.zeros((NB, K1))
    n_live[0, 0] = 1000.0
    prior = _cells(mean, n_prior, cv=0.0)
    for factor, kept_ok in ((1.0, lambda k: np.all(k == 1.0)), (1.5, lambda k: np.all((k > 0) & (k < 1e-3)))):
        tau2 = PriorCells(*prior).calibration_variance(*_cells(mean * factor, n_live, cv=0.0))
        kept = PriorCells(*prior).kept_share(tau2)
        assert np.all(np.isfinite(tau2)) and kept_ok(kept), (factor, kept)


# ---- in the governor ---------------------------------------------------------------

BATCH = 8
THIS_BOX = SyntheticTruth()


def _prior_of(cell_time_factor, weight_factor=(1.0, 1.0, 1.0, 1.0)) -> Prior:
    """A confident prior (200 steps a cell, acceptance of this box) whose cells hold this box's
    step times at each bucket's representative B times ``cell_time_factor(K)``, and whose
    latency weights are this box's times ``weight_factor``."""
    k1 = THIS_BOX.k_max + 1
    edges = DEFAULT_BUCKET_EDGES
    stats = SufficientStats.zeros(THIS_BOX.k_max, len(edges))
    acc = np.asarray(THIS_BOX.acceptance)
    reach = np.concatenate(([1.0], np.cumprod(acc)[:-1]))  # share of requests reaching each position
    stats.acc_successes[:] = 200 * reach * acc
    stats.acc_failures[:] = 200 * reach * (1 - acc)
    factor = np.array([cell_time_factor(k) for k in range(k1)])
    for b in range(len(edges) - 1):
        m = THIS_BOX.mean_step_s(representative_batch(edges, b)) * factor
        stats.cell_n[b], stats.cell_sum[b], stats.cell_sumsq[b] = _cells(m, np.full(k1, 200.0), THIS_BOX.noise_cv)
    return Prior(
        DrafterKey("mtp", hardware="other"),
        THIS_BOX.k_max,
        edges,
        stats,
        latency_weights=np.asarray(THIS_BOX.weights) * np.asarray(weight_factor),
    )


def _governor(prior: Prior, **config) -> BanditGovernor:
    return BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=THIS_BOX.k_max, seed=3, **config), prior)


def test_a_confidently_wrong_prior_yields_and_the_best_k_is_found():
    """The other box is 25% slower at K = 0 and drafts cost it far more: its prior calls K = 0
    best where this box's best is K = 2. Trusted as loaded, it holds K = 0 for good (the
    cells of K >= 1 are never played, so they keep the prior's word)."""
    best = THIS_BOX.best_k(BATCH)
    assert best == 2
    g = _governor(_prior_of(lambda k: 1.25 * (1.0 + 0.6 * k), (1.25, 1.25, 3.0, 3.0)))
    ks = run_stream(g, THIS_BOX, [BATCH] * 6000, seed=3)
    assert ks[0] == 0  # it starts where the prior says
    assert np.mean(ks[-2000:] == best) >= 0.9, np.bincount(ks[-2000:], minlength=5)
    bucket = bucket_of(DEFAULT_BUCKET_EDGES, BATCH)
    assert g.posterior.prior_tau2[bucket] > 0.03  # ~ the 25% error, squared


def test_a_right_prior_keeps_its_weight_and_its_head_start():
    best = THIS_BOX.best_k(BATCH)
    g = _governor(_prior_of(lambda k: 1.0))
    ks = run_stream(g, THIS_BOX, [BATCH] * 4000, seed=3)
    assert np.mean(ks[:300] == best) >= 0.9  # no exploration needed
    p = g.posterior.prior_loaded
    kept = PriorCells(p.cell_n, p.cell_sum, p.cell_sumsq).kept_share(g.posterior.prior_tau2)
    assert kept[p.cell_n > 0].min() > 0.5


def test_a_snapshot_keeps_the_prior_as_loaded_and_restores_its_weighing(tmp_path):
    from banditk.governor.snapshot import load_snapshot, save_snapshot

    prior = _prior_of(lambda k: 1.25 * (1.0 + 0.6 * k), (1.25, 1.25, 3.0, 3.0))
    g = _governor(prior)
    run_stream(g, THIS_BOX, [BATCH] * 701, seed=1)  # odd: the weighing is from the last refresh
    assert g.posterior.prior_tau2.max() > 0.03
    save_snapshot(tmp_path / "s.json", g)
    r = load_snapshot(tmp_path / "s.json")
    assert np.allclose(r.posterior.prior_loaded.cell_n, g.posterior.prior_loaded.cell_n)
    assert np.allclose(r.posterior.prior_loaded.cell_n[~np.isclose(prior.stats.cell_n, 0)], 200.0)
    assert np.allclose(r.posterior.prior_tau2, g.posterior.prior_tau2) and np.allclose(
        r.posterior.prior_stats.cell_n, g.posterior.prior_stats.cell_n
    )
    batches = np.random.default_rng(5).choice([2, 8, 32], size=600)
    assert np.array_equal(run_stream(g, THIS_BOX, batches, seed=11), run_stream(r, THIS_BOX, batches, seed=11))
