"""Behaviour of the bandit governor on streams with known truth."""

import numpy as np
import pytest
from streams import run_stream, switches

from banditk.core.config import GovernorConfig
from banditk.core.errors import (
    ConfigError,
    DrafterClassMismatchError,
    InvalidContextError,
    InvalidDecisionError,
    InvalidOutcomeError,
)
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.evaluation import THRESHOLDS
from banditk.governor import BanditGovernor, switching
from banditk.switch_counts import change_causes
from banditk.tools.synthetic import SyntheticTruth


def gov(k_max: int = 4, **kw) -> BanditGovernor:
    return BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=k_max, **kw))


@pytest.mark.parametrize("batch", [1, 8, 32, 128])
def test_settles_on_the_best_k_or_one_inside_the_switching_bonus(truth, batch):
    # The bonus keeps an incumbent that no K beats by more than it: at B=1 the runner-up
    # (K=4) is 1.7% behind the best (K=3), inside the 2% bonus, and whichever of the two is
    # the incumbent when both are well measured stays. At the other B one K stands alone.
    g = truth.goodput(batch)
    bonus = gov().config.switch_penalty
    good = np.flatnonzero(g * (1 + bonus) >= g.max())
    assert good.size == (2 if batch == 1 else 1)
    ks = run_stream(gov(seed=batch), truth, [batch] * 4000, seed=batch)
    early = np.mean(np.isin(ks[:500], good))
    late = np.mean(np.isin(ks[-1500:], good))
    assert late >= 0.98, (batch, good, np.bincount(ks[-1500:], minlength=5))
    assert late >= early
    # And the regret is small: once the first 1,000 steps have explored, under 1% of the
    # best goodput where one K stands alone, within the bonus at B=1; over the whole run
    # within the bonus, or where the runner-up may be kept (the bonus plus the explorations)
    # within the protocol's flat-prior limit.
    settled = 1 - g[ks[1000:]].mean() / g.max()
    assert settled < (0.01 if good.size == 1 else bonus)
    limit = bonus if good.size == 1 else THRESHOLDS["simulator"]["regret_fraction_flat_prior"]
    assert 1 - g[ks].mean() / g.max() < limit


def test_switch_count_falls_to_near_zero(truth):
    ks = run_stream(gov(seed=1), truth, [16] * 6000, seed=1)
    first, last = switches(ks[:1000]), switches(ks[-2000:])
    assert last <= 4  # <= 2 per 1000 steps once settled (docs/evaluation.md)
    assert last < first


def test_switching_penalty_cuts_switches_on_a_tied_stream(monkeypatch):
    # Two K nearly tied (within 0.5%) under 8% step-time noise: with no penalty, no
    # decision epochs and no spacing or odds on revisits Thompson sampling flips between
    # them; the penalty stops it.
    monkeypatch.setattr(switching, "REVISIT_ODDS", 0.0)
    tied = SyntheticTruth(acceptance=(0.5, 0.05), weights=(0.02, 0.0, 0.00034, 0.0), noise_cv=0.08)
    g = tied.goodput(4)
    assert abs(g[2] - g[1]) / g.max() < 0.005 and g[0] < 0.9 * g[1]
    counts = {}
    for penalty in (0.0, 0.03):
        totals = []
        for seed in range(10):  # a few switches per run: ten runs make the contrast more than noise
            policy = gov(
                k_max=2,
                seed=seed,
                switch_penalty=penalty,
                decision_interval=1,
                max_decision_interval=1,
                revisit_spacing=1,
            )
            ks = run_stream(policy, tied, [4] * 3000, seed=seed)
            totals.append(switches(ks[500:]))
        counts[penalty] = sum(totals)
    assert counts[0.03] * 5 < counts[0.0], counts


def test_epochs_double_once_settled_and_each_bucket_keeps_its_own(truth):
    g = gov(seed=2)
    draws = []
    score = g._decode_scores
    # Count the decisions (one call to the scores each).
    g._decode_scores = lambda bucket, batch, kv, incumbent, n=None: (
        draws.append((g.steps, bucket)),
        score(bucket, batch, kv, incumbent, n),
    )[1]
    run_stream(g, truth, [16] * 4000, seed=2)
    late = [s for s, _ in draws if s > 2000]
    # Fixed epochs of 8 would sample 250 times in these 2,000 steps; settled epochs reach 32.
    assert len(late) <= 2000 // g.config.max_decision_interval + 4, len(late)
    assert g._epoch == g.config.max_decision_interval
    settled, n = g.prev_bucket, len(draws)
    run_stream(g, truth, [1] * (g.config.bucket_dwell + 1), seed=3)
    # Moving to B=1's bucket resamples at once, after the dwell (the old bucket's epoch may
    # also end during the dwell).
    assert [b for _, b in draws[n:]] in ([g.prev_bucket], [settled, g.prev_bucket])
    assert g.prev_bucket != settled and g._epoch == g.bucket_epoch[g.prev_bucket]  # that bucket's own epoch
    assert g.bucket_epoch[settled] == g.config.max_decision_interval
    # Back in B=16's bucket its settled epoch and K resume: the visit elsewhere restarted nothing.
    k16 = g.bucket_k[settled]
    run_stream(g, truth, [16] * (g.config.bucket_dwell + 1), seed=4)
    assert g.prev_bucket == settled and g.prev_k == k16 and g._epoch == g.config.max_decision_interval


def test_near_tied_k_do_not_trade_places_even_without_a_bonus(truth):
    # At B=4, K=2 and K=3 are within 1%. With no switching bonus and the shortest epochs, a
    # single Thompson draw per decision would trade them every few epochs; the share of draws
    # a switch needs (switch_confidence) keeps them apart once both are known.
    g = truth.goodput(4)
    assert abs(g[3] - g[2]) / g.max() < 0.01
    for confidence, most in ((0.9, 12), (0.0, None)):
        n = sum(
            switches(
                run_stream(
                    gov(seed=seed, switch_penalty=0.0, max_decision_interval=8, switch_confidence=confidence),
                    truth,
                    [4] * 4000,
                    seed=seed,
                )[1000:]
            )
            for seed in range(4)
        )
        if most is not None:
            assert n <= most, n  # <= 1 per 1,000 steps over 4 x 3,000 steps
        else:
            assert n > 10 * 12, n  # without the gate: over ten times as many


def test_longest_epoch_below_the_base_epoch_is_refused():
    from banditk.core.errors import ConfigError

    with pytest.raises(ConfigError, match="max_decision_interval"):
        gov(decision_interval=16, max_decision_interval=8)
    with pytest.raises(ConfigError, match="settle_confidence"):
        gov(settle_confidence=1.5)


def test_fixed_seed_gives_the_same_k_sequence(truth):
    batches = np.random.default_rng(9).choice([1, 4, 16, 64], size=1500)
    a = run_stream(gov(seed=7), truth, batches, seed=3)
    b = run_stream(gov(seed=7), truth, batches, seed=3)
    c = run_stream(gov(seed=8), truth, batches, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_k_is_always_in_range(truth):
    g = gov(seed=2)
    ks = run_stream(g, truth, np.random.default_rng(0).integers(0, 300, 2000), seed=2)
    assert ks.min() >= 0 and ks.max() <= 4


def test_kv_pressure_lowers_k_only_when_asked(truth):
    batches = [4] * 3000
    free = run_stream(gov(seed=1, kv_pressure_weight=3.0), truth, batches, seed=1)
    full = run_stream(gov(seed=1, kv_pressure_weight=3.0), truth, batches, seed=1, kv_usage=0.99)
    assert full[-1000:].mean() < free[-1000:].mean()
    # Off by default (vLLM reserves K_max lookahead slots whatever K is): a full cache changes nothing.
    assert np.array_equal(
        run_stream(gov(seed=1), truth, batches, seed=1, kv_usage=0.99), run_stream(gov(seed=1), truth, batches, seed=1)
    )


def test_cells_converge_to_measured_times_where_the_parametric_form_is_wrong():
    # A cudagraph-padding-like jump: K >= 3 costs 60% more than any linear model says.
    class Jump(SyntheticTruth):
        def mean_step_s(self, batch):
            t = super().mean_step_s(batch)
            t[3:] *= 1.6
            return t

    jump = Jump()
    batch = 2
    assert jump.best_k(batch) == 2 and SyntheticTruth().best_k(batch) == 3
    g = gov(seed=4)
    ks = run_stream(g, jump, [batch] * 4000, seed=4)
    assert np.mean(ks[-1000:] == 2) > 0.97
    bucket = 1  # edges start 1, 2, ... so B = 2 is bucket 1
    measured = g.latency_params(bucket)[0]
    truth_t = jump.mean_step_s(batch)
    tried = g.data.cell_n[bucket] > 5
    assert np.allclose(measured[tried], truth_t[tried], rtol=0.03)


def test_tracks_drift_in_acceptance(truth):
    low = SyntheticTruth(acceptance=(0.3, 0.2, 0.1, 0.1))
    g = gov(seed=5)
    run_stream(g, truth, [4] * 3000, seed=5)
    ks = run_stream(g, low, [4] * 3000, seed=6)
    assert low.best_k(4) < truth.best_k(4)
    assert np.mean(ks[-1000:] == low.best_k(4)) > 0.95


def test_prefill_only_step_learns_nothing():
    g = gov()
    d = g.select(StepContext(0, 4, "mtp"))
    assert d.bucket == -1
    g.observe(d, StepOutcome(np.array([], dtype=int), np.array([], dtype=int), 0.5))
    assert g.data.cell_n.sum() == 0 and g.data.reg_n == 0


def test_steps_dominated_by_a_prefill_chunk_do_not_bias_the_decode_cells(truth):
    # One step in four also computes a 2048-token prompt chunk at 2 ms a token: ~4 s
    # against a decode time of tens of ms, with the whole step's 3% noise. Crediting the
    # remainder as a full decode observation (floored at a share of the step) once made
    # the played cells several times too slow (Mistral on Strix Halo: 6.6% regret).
    g = gov(seed=9)
    rng = np.random.default_rng(9)
    batch = 8
    for i in range(4000):
        d = g.select(StepContext(batch, 4, "mtp"))
        out = truth.outcome(rng, d, batch)
        if i % 4 == 3:
            chunk = 2048
            t = (truth.mean_step_s(batch)[d.k] + 2e-3 * chunk) * np.exp(rng.normal(0.0, 0.03))
            out = StepOutcome(out.drafted, out.accepted, float(t), prefill_tokens=chunk)
        g.observe(d, out)
    mean = g.latency_params()[0][g.prev_bucket]
    played = g.data.cell_n[g.prev_bucket] > 5
    assert played[truth.best_k(batch)]
    np.testing.assert_allclose(mean[played], truth.mean_step_s(batch)[played], rtol=0.1)
    assert abs(g.posterior.prefill_price - 2e-3) < 2e-4
    assert g.prev_k == truth.best_k(batch)


def _mixed_stream(g, truth, steps, seed, batch=8, chunk=1000, per_draft_s=6e-4):
    """Every 4th step also computes a ``chunk``-token prompt (0.2 ms a token) and, being
    compute-bound, pays ``per_draft_s`` per verified draft; returns (K, mixed?) per step."""
    rng = np.random.default_rng(seed)
    ks, mixed = np.empty(steps, dtype=int), np.arange(steps) % 4 == 3
    for i in range(steps):
        d = g.select(StepContext(batch, 4, "mtp", prefill_tokens=chunk if mixed[i] else 0))
        out = truth.outcome(rng, d, batch)
        if mixed[i]:
            t = (truth.mean_step_s(batch)[d.k] + per_draft_s * batch * d.k + 2e-4 * chunk) * np.exp(rng.normal(0, 0.03))
            out = StepOutcome(out.drafted, out.accepted, float(t), prefill_tokens=chunk)
        g.observe(d, out)
        ks[i] = d.k
    return ks, mixed


def test_steps_next_to_a_prompt_chunk_get_their_own_k(truth):
    # Decode-only steps are best at K=2. Next to the chunk each draft costs 0.6 ms more, so
    # there K=1 earns the most tokens for its time at the decode-only goodput (the oracle's
    # score): 9% more than K=2. The decode-only K keeps its epochs: few switches.
    assert truth.best_k(8) == 2
    g = gov(seed=3)
    ks, mixed = _mixed_stream(g, truth, 6000, seed=3)
    late = slice(3000, None)
    assert np.mean(ks[late][~mixed[late]] == 2) >= 0.95
    assert np.mean(ks[late][mixed[late]] == 1) >= 0.9
    assert g.switches < 40 and g.mixed_steps == mixed.sum()


def test_steps_next_to_a_chunk_keep_the_decode_k_where_it_is_best_there_too(truth):
    # Next to the chunk a draft costs what it costs in a decode-only step, so the decode K
    # (K=2) is best there too: such steps should not leave it. One Thompson draw per decode
    # epoch next to a chunk (the old rule) tried other K there 4-7 times per 1,000 steps.
    g = gov(seed=6)
    ks, mixed = _mixed_stream(g, truth, 6000, seed=6, per_draft_s=0.0)
    late = slice(2000, None)
    assert np.mean(ks[late] == 2) >= 0.99, np.bincount(ks[late])
    # <= 2 oscillations per 1,000 steps (docs/evaluation.md). The K changes left are where a
    # step next to a chunk explores a K whose cell there is thin (each such step in, then out).
    causes = change_causes(ks[late], np.zeros(ks[late].size, dtype=int), mixed[late])
    assert causes["decode_flip"] + causes["chunk_flip"] <= 8, causes
    # The first steps next to a chunk learn what the decode K costs there without a switch.
    at_chunk = np.flatnonzero(mixed)
    assert np.all(ks[at_chunk[:3]] == ks[at_chunk[0] - 1]), ks[at_chunk[:3]]


def test_a_prior_that_knows_the_steps_next_to_a_chunk_is_checked_then_followed(truth):
    # The prior's cells next to a 1000-token chunk say K=1 is best there (each draft costs
    # 0.6 ms more than in a decode-only step, as in test_steps_next_to_a_prompt_chunk_get_their_own_k):
    # the decode K in play at the first of them gets 3 such steps (to check the prior by), then
    # they take K=1.
    from banditk.io.prior import DrafterKey, Prior
    from banditk.posterior.stats import SufficientStats

    stats = SufficientStats.zeros(4, len(GovernorConfig(drafter_class="mtp", k_max=4).bucket_edges))
    bucket = 5  # B = 8
    t = truth.mean_step_s(8) + 6e-4 * 8 * np.arange(5) + 2e-4 * 1000
    n = 50.0
    stats.mix_n[bucket], stats.mix_sum[bucket], stats.mix_sumsq[bucket] = n, n * t, n * t * t * (1 + 0.03**2)
    stats.mix_p[bucket], stats.mix_pp[bucket], stats.mix_tp[bucket] = n * 1000, n * 1000**2, n * 1000 * t
    acc = np.asarray(truth.acceptance)
    stats.acc_successes[:], stats.acc_failures[:] = 100 * acc, 100 * (1 - acc)
    prior = Prior(DrafterKey("mtp"), 4, GovernorConfig(drafter_class="mtp", k_max=4).bucket_edges, stats)
    ks, mixed = _mixed_stream(gov(seed=3), truth, 400, seed=3)
    ks_prior, _ = _mixed_stream(
        BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=3), prior), truth, 400, seed=3
    )
    at_chunk = np.flatnonzero(mixed)
    first_k = ks_prior[at_chunk[0] - 1]
    assert first_k != 1 and np.all(ks_prior[at_chunk[:3]] == first_k), ks_prior[at_chunk[:3]]
    # Off K=1 only while that K checks the prior: its first 3 such steps (a 4th where
    # discounting leaves its cell just short of 3).
    off = ks_prior[at_chunk] != 1
    assert np.all(ks_prior[at_chunk][off] == first_k) and off.sum() <= 4, ks_prior[at_chunk]
    # The prior's governor takes K=1 there after those checks, the flat one is still learning.
    prior_share, flat_share = np.mean(ks_prior[at_chunk[:20]] == 1), np.mean(ks[at_chunk[:20]] == 1)
    assert flat_share < 0.5 and prior_share >= flat_share + 0.3, (ks_prior[at_chunk[:20]], ks[at_chunk[:20]])


def test_k_next_to_chunks_of_different_sizes_are_compared_at_the_same_size():
    # K=1 met only 3000-token chunks and K=2 only 500-token ones: their raw means differ by
    # the chunks, not by K. Along the shared slope (0.1 ms a token) both are read at 1000.
    g = gov(seed=4)
    rng = np.random.default_rng(4)
    truth = {1: 0.05, 2: 0.06}  # step time without the chunk, s
    bucket = None
    for i in range(800):
        k = 1 + (i // 2) % 2
        chunk = 0 if i % 2 else int((3000 if k == 1 else 500) + rng.integers(-200, 200))
        d = Decision(k=k, bucket=g.select(StepContext(8, 4, "mtp")).bucket, num_decoding=8, step_id=i)
        bucket = d.bucket
        t = (truth[k] + 1e-4 * chunk) * np.exp(rng.normal(0.0, 0.01))
        g.observe(d, StepOutcome(np.full(8, k), np.zeros(8, dtype=int), float(t), prefill_tokens=chunk))
    raw = g.data.mix_sum[bucket] / np.maximum(g.data.mix_n[bucket], 1e-9)
    assert raw[1] > raw[2] + 0.2  # what a comparison without the chunk sizes would see
    mean = g.mixed_step_posterior(bucket, 1000, 8)[0]
    np.testing.assert_allclose(mean[1:3], [truth[1] + 0.1, truth[2] + 0.1], rtol=0.05)


def test_the_removed_prefill_aware_field_is_refused_by_name():
    with pytest.raises(ConfigError, match="`prefill_aware` was removed"):
        GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4, "prefill_aware": False})


def test_context_of_another_class_is_refused():
    with pytest.raises(DrafterClassMismatchError, match="context.drafter_class='eagle'.*'mtp'"):
        gov().select(StepContext(4, 4, "eagle"))


def test_context_k_max_must_match():
    with pytest.raises(InvalidContextError, match="context.k_max=3 but the governor was built for k_max=4"):
        gov().select(StepContext(4, 3, "mtp"))


def test_decision_with_k_outside_range_is_refused():
    g = gov()
    with pytest.raises(InvalidDecisionError, match=r"decision.k=5 is outside 0..k_max=4"):
        g.observe(Decision(k=5, bucket=0, num_decoding=1, step_id=1), StepOutcome(np.array([1]), np.array([1]), 0.01))


def test_outcome_drafting_more_than_k_max_is_refused():
    g = gov()
    d = g.select(StepContext(2, 4, "mtp"))
    with pytest.raises(InvalidOutcomeError, match="6 drafts, above k_max=4"):
        g.observe(d, StepOutcome(np.array([6, 1]), np.array([0, 0]), 0.01))


def test_huge_durations_are_clipped_and_do_not_poison_the_posterior(truth):
    g = gov(seed=3, max_step_s=1.0)
    run_stream(g, truth, [8] * 500, seed=3)
    d = g.select(StepContext(8, 4, "mtp"))
    g.observe(d, StepOutcome(np.full(8, d.k), np.zeros(8, dtype=int), 1e12))
    mn = g.latency_params()[0]
    assert np.all(np.isfinite(mn)) and mn.max() < 1.0
    ks = run_stream(g, truth, [8] * 1500, seed=4)
    assert np.mean(ks[-500:] == truth.best_k(8)) > 0.95


def test_a_clock_jump_is_not_credited_but_a_lasting_slowdown_is(truth):
    g = gov(seed=3)
    run_stream(g, truth, [8] * 500, seed=3)
    before = g.latency_params()[0].copy()
    model_before = g.posterior.cell_prior_mean.copy()
    d = g.select(StepContext(8, 4, "mtp"))
    g.observe(d, StepOutcome(np.full(8, d.k), np.zeros(8, dtype=int), 5.0))  # a 5 s "step"
    assert g.outliers == 1
    assert np.allclose(g.latency_params()[0], before, rtol=0.02)
    # The machine really is 20x slower from now on: after a short run of outliers it is
    # credited again, and the latency model learns it.
    slow = SyntheticTruth(weights=tuple(20 * w for w in truth.weights))
    played = run_stream(g, slow, [8] * 300, seed=5)
    b = g.prev_bucket
    assert g.outliers <= 1 + 8 * 5
    assert np.all(g.posterior.cell_prior_mean[b] > 5 * model_before[b])
    assert np.all(g.latency_params()[0][b, np.unique(played)] > before[b, np.unique(played)])


@pytest.mark.xfail(strict=True, reason="known limitation: the clock weight reads a level shift as correlation")
def test_a_lasting_slowdown_reaches_a_well_known_cell_within_300_steps(truth):
    # A 20x slower machine: each slow step of a cell with 300 observations counts about
    # 0.05 of one (rho near MAX_RHO), so the cell learns a fraction of the change in 300
    # steps while the latency model has it all (docs/decisions.md, fourteenth session).
    g = gov(seed=3, k_set=(2,))
    run_stream(g, truth, [8] * 500, seed=3)
    before = g.latency_params()[0][g.prev_bucket, 2]
    slow = SyntheticTruth(weights=tuple(20 * w for w in truth.weights))
    run_stream(g, slow, [8] * 300, seed=5)
    assert g.latency_params()[0][g.prev_bucket, 2] > 5 * before


def test_state_line_reports_histogram_acceptance_and_best_k(truth):
    g = gov(seed=1)
    run_stream(g, truth, [8] * 800, seed=1)
    line = g.state_line()
    assert line.startswith("banditk steps=800 K[")
    acc = [float(v) for v in line.split("accept/pos[")[1].split("]")[0].split()]
    a, b = g.acceptance_params()
    np.testing.assert_allclose(acc, np.round(a / (a + b), 2), atol=1e-9)  # the posterior means, as printed
    # The positions the settled K drafts are learnt; deeper ones only as far as exploring reached them.
    np.testing.assert_allclose(acc[: truth.best_k(8)], truth.acceptance[: truth.best_k(8)], atol=0.05)
    assert f"B>=8:K={truth.best_k(8)}(" in line
