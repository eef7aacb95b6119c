"""The bandit governor: Thompson sampling over K on a posterior of goodput.

Per drafter class it keeps
- per-position conditional acceptance Beta posteriors (shared by all batch sizes),
- per (batch bucket, K) Normal-Inverse-Gamma posteriors of the mean step time, whose
  prior mean comes from a parametric latency model learned online over all cells.

Each step it draws acceptance and step times from the posterior, scores goodput
G(K) = B * E(K) / t(bucket, K) for every K (optionally discounting deep K near a full
KV cache), gives the current K a relative bonus (the switching cost) and picks the best.

A step that also computes a prompt chunk teaches a decode cell only its decode share,
and such steps have cells of their own (step time and chunk size). Where a bucket's steps
come next to chunks, one K serves both kinds of step, so K is scored over their mix, as
the simulator's oracle scores a step: B * E(K) - G* * ((1 - f) t(K) + f t_mixed(K, P)),
with G* the best decode-only goodput drawn for the bucket, f the bucket's share of steps
next to a chunk and P their mean chunk size. (K that is best for decode-only steps can
be worse for the mix: a chunk reads the MoE experts anyway, so drafts next to it cost less,
or pushes a dense model past its compute ridge, so they cost more.) With
``prefill_aware`` a step next to a chunk gets its own K instead: B * E(K) - G* * t_mixed(K, P).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import latency_model, nig, prior_conflict
from .sampling import gamma_variates
from .acceptance import expected_tokens, position_counts
from .buckets import bucket_with_hysteresis, debounced, representative_batch
from .config import GovernorConfig
from .errors import DrafterClassMismatchError, IncompatiblePriorError, InvalidContextError, InvalidDecisionError, InvalidOutcomeError
from .prior import Prior
from .stats import MIXED_FIELDS, SufficientStats
from .types import Decision, StepContext, StepOutcome

#: Shape parameter a0 of the cells' inverse-gamma noise prior: 2 is the weakest
#: with a finite mean, so the prior noise guess (latency_cv * mean) is its mean.
_NOISE_SHAPE = 2.0
#: Floor on a sampled step time, against division by ~0 from a wild draw.
_MIN_STEP_S = 1e-7
_ONE = np.ones(1)
#: Step durations below this carry no information (no forward pass is that fast).
_MIN_OBSERVED_STEP_S = 1e-6
#: Consecutive outlier steps after which slow steps are the new normal and are credited.
_OUTLIER_RUN = 8
#: Observations a cell needs before its mean is trusted to call a step an outlier.
_OUTLIER_MIN_N = 3.0
#: Weight, in steps, of the additive prior of a cell of steps next to a prompt chunk (see
#: ``mixed_step_posterior``): a K with a few such steps is read mostly from them.
_MIXED_PRIOR_COUNT = 2.0
#: Live steps next to a prompt chunk a K needs in its cell before such a step may leave
#: the decode K for another (see ``_select_mixed``). At 3, Gemma 4 with a flat prior found
#: its K next to chunks at C = 48 on GB10 (0.16% regret over 20,000 steps). Counting the
#: prior's steps too, a prior wrong about the K it never plays there was never checked
#: (the CPU prior on its simulator profile: 1.15% regret, 0.47% counting live steps only).
_MIXED_LEARN_STEPS = 3.0
#: Taking the prefill share out never leaves less than this fraction of a step.
_PREFILL_FLOOR = 0.3
#: Per-step decay of a bucket's running share of steps next to a prompt chunk and of their
#: mean chunk size: a window of ~200 steps, the oracle's.
_MIXED_SHARE_DECAY = 1.0 - 1.0 / 200.0
#: Keys of the decode-only cells in a snapshot's state.
DECODE_ONLY_KEYS = ("n", "sum_s", "sum_sq_s2")


class BanditGovernor:
    """Thompson-sampling governor of speculative depth K.

    Args:
        config: hyperparameters.
        prior: optional prior of the same drafter class.

    Raises:
        DrafterClassMismatchError: the prior is of another drafter class.
        IncompatiblePriorError: the prior's K_max is smaller or its bucket edges differ.

    Examples:
        >>> import numpy as np
        >>> from banditk.types import StepContext, StepOutcome
        >>> gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4))
        >>> d = gov.select(StepContext(num_decoding=8, k_max=4, drafter_class="mtp"))
        >>> 0 <= d.k <= 4
        True
        >>> gov.observe(d, StepOutcome(np.full(8, d.k), np.zeros(8, dtype=int), 0.02))
    """

    name = "bandit"

    def __init__(self, config: GovernorConfig, prior: Prior | None = None) -> None:
        self.config = config
        k_max, nb = config.k_max, config.num_buckets
        # The prior as loaded, and as used: its latency cells weighed down where live data
        # contradicts them (see prior_conflict), per bucket by calibration variance tau^2.
        self._prior_loaded = SufficientStats.zeros(k_max, nb)
        self._prior_weights: np.ndarray | None = None
        self.prior = prior
        if prior is not None:
            self._prior_loaded = _fit_prior(config, prior)
            self._prior_weights = None if prior.latency_weights is None else np.array(prior.latency_weights, dtype=float)
        self.data = SufficientStats.zeros(k_max, nb)
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        self._rep_batch = np.array([representative_batch(config.bucket_edges, b) for b in range(nb)])
        self._design = np.stack([latency_model.features(B, np.arange(k_max + 1)) for B in self._rep_batch])
        # Typical squared size of each feature over the buckets and K: the ridge prior on
        # the latency weights is worth `model_prior_strength` observations per feature.
        self._model_prior_precision = np.diag(config.model_prior_strength * (self._design**2).reshape(-1, len(latency_model.FEATURES)).mean(axis=0))
        self.prev_k = -1
        self.prev_bucket = -1
        # Per bucket: running share of observed steps next to a prompt chunk, and their mean chunk size.
        self._mixed_share = np.zeros(nb)
        self._mixed_chunk = np.zeros(nb)
        self._held = 0
        self._epoch = config.decision_interval
        self._candidate_bucket, self._candidate_steps = -1, 0
        self.steps = 0
        self.observations = 0
        self.switches = 0
        self.outliers = 0
        self.mixed_steps = 0
        self._outliers_in_a_row = 0
        self.k_counts = np.zeros(k_max + 1, dtype=np.int64)
        self._cell_prior_mean = np.zeros((nb, k_max + 1))
        self._k_plus_1 = np.arange(k_max + 1) + 1.0
        self._drafts = np.maximum(np.arange(k_max + 1), 1).astype(float)
        # (B, K, t, weight) observed since the regression statistics were last brought up
        # to date; folded in, with their discount weights, at each refresh.
        self._pending: list[tuple[float, int, float, float]] = []
        self._prior_tau2 = self._prior_tau2_mixed = np.zeros(nb)
        self._prior_stats = self._prior_loaded
        p = self._prior_loaded
        self._prior_cells = prior_conflict.PriorCells(p.cell_n, p.cell_sum, p.cell_sumsq)
        mixed = [getattr(p, f) for f in MIXED_FIELDS]
        self._prior_chunk_slope = prior_conflict.shared_chunk_slope(*mixed[:2], *mixed[3:])
        self._prior_chunk_p = np.where(p.mix_n > 0, p.mix_p / np.where(p.mix_n > 0, p.mix_n, 1.0), 0.0)
        self._prior_mixed_cells = prior_conflict.PriorCells(*mixed[:3], prior_conflict.chunk_adjusted_rel_var(*mixed))
        # Per (bucket, K): weight, sum and sum of squares of the decode-only steps among a
        # cell's observations, the like of the prior's cells, against which they are weighed
        # (a step next to a chunk adds its decode share, which is 15-23% off on DFlash/GB10).
        self._decode_only = tuple(np.zeros((nb, k_max + 1)) for _ in range(3))
        self._refresh_latency_model()

    # ---- the two calls -------------------------------------------------------------

    def select(self, context: StepContext) -> Decision:
        """Choose K for one scheduler step."""
        cfg = self.config
        if context.drafter_class != cfg.drafter_class:
            raise DrafterClassMismatchError(
                f"context.drafter_class={context.drafter_class!r} but this governor learns {cfg.drafter_class!r}."
            )
        if context.k_max != cfg.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but the governor was built for k_max={cfg.k_max}.")
        self.steps += 1
        batch = context.num_decoding
        if batch == 0:
            # Nothing decodes: K is moot; keep the current one and learn nothing.
            return Decision(k=max(self.prev_k, 0), bucket=-1, num_decoding=0, step_id=self.steps)
        bucket = self._debounced_bucket(bucket_with_hysteresis(cfg.bucket_edges, batch, self.prev_bucket,
                                                               cfg.bucket_hysteresis))
        kv_pressed = context.kv_usage > cfg.kv_pressure_threshold and cfg.kv_pressure_weight > 0
        if context.prefill_tokens and cfg.prefill_aware and self.prev_k >= 0 and not self._scale_pending:
            return self._select_mixed(context, bucket, kv_pressed)
        same_bucket = bucket == self.prev_bucket
        if same_bucket and self._held < self._epoch - 1 and not kv_pressed:
            # Within a decision epoch: keep K, so that one sampled advantage becomes
            # several observations instead of a switch and a switch back.
            self._held += 1
            self.k_counts[self.prev_k] += 1
            return Decision(k=self.prev_k, bucket=bucket, num_decoding=batch, step_id=self.steps)
        self._held = 0
        scores = self._scores(bucket, batch, self._kv_factor(context.kv_usage) if kv_pressed else 1.0)
        k = int(np.argmax(scores))
        if self.prev_k >= 0 and k != self.prev_k:
            self.switches += 1
        # Lazy sampling: a decision that keeps K on the same bucket, with K the posterior's
        # clear favourite, doubles the next epoch; a switch or a new bucket goes back to short ones.
        if not (k == self.prev_k and same_bucket and not kv_pressed):
            self._epoch = cfg.decision_interval
        elif self._epoch < cfg.max_decision_interval and self._prob_current_best(bucket, batch) >= cfg.settle_confidence:
            self._epoch = min(2 * self._epoch, cfg.max_decision_interval)
        self.prev_k, self.prev_bucket = k, bucket
        self.k_counts[k] += 1
        return Decision(k=k, bucket=bucket, num_decoding=batch, step_id=self.steps, sampled_goodput=tuple(scores.tolist()))

    def _kv_factor(self, kv_usage: float) -> np.ndarray:
        """Per-K goodput factor near a full cache (for an engine that reserves lookahead per K)."""
        cfg = self.config
        excess = (kv_usage - cfg.kv_pressure_threshold) / (1.0 - cfg.kv_pressure_threshold)
        return np.exp(-cfg.kv_pressure_weight * excess * np.arange(cfg.k_max + 1) / cfg.k_max)

    def _select_mixed(self, context: StepContext, bucket: int, kv_pressed: bool) -> Decision:
        """K for a step whose drafts are verified next to a prompt chunk.

        The chunk's time is the same whatever K is, so goodput of the whole step would
        make drafts look cheap. Instead each K is scored by its tokens less what its
        time would have earned at the bucket's best decode-only goodput, at the posterior
        means and this step's chunk size. Until the decode K has ``_MIXED_LEARN_STEPS``
        such steps of its own (live, whatever the prior holds), the step keeps it: what the
        decode K costs next to a chunk is learnt without a switch, and so is that of every
        K the decode epochs explore, and a prior's cells are checked against them (see
        ``_refresh_latency_model``). No draw of its own: one Thompson draw per decode epoch
        switched 4-7 times per 1,000 steps on #49548, where these steps' best K is the
        decode K. The decode-only K, epoch and switch count are left as they are: the next
        decode step goes on where it was.
        """
        cfg, batch, prev = self.config, context.num_decoding, self.prev_k
        self.mixed_steps += 1
        if self.data.mix_n[bucket, prev] < _MIXED_LEARN_STEPS:
            self.k_counts[prev] += 1
            return Decision(k=prev, bucket=bucket, num_decoding=batch, step_id=self.steps)
        t_mixed = self.mixed_step_posterior(bucket, context.prefill_tokens, batch)[0]
        a, b = self._acc_a, self._acc_b
        tokens = expected_tokens(a / (a + b)) * batch
        if kv_pressed:
            tokens = tokens * self._kv_factor(context.kv_usage)
        rate = float(np.max(tokens / (self._post_m[bucket] * self._batch_ratio(batch, bucket))))
        scores = tokens - rate * t_mixed
        scores[prev] += cfg.switch_penalty * tokens[prev]
        k = int(np.argmax(scores))
        self.k_counts[k] += 1
        return Decision(k=k, bucket=bucket, num_decoding=batch, step_id=self.steps, sampled_goodput=tuple(scores.tolist()))

    def _batch_ratio(self, batch: int, bucket: int, k: int | None = None):
        """Model step time at B over that at the bucket's representative B (per K, or for one K).

        Clipped to [0.5, 2]: it corrects for B within a bucket, it does not replace the cells.
        The model is written out (``latency_model.features`` @ weights) because this runs
        every step.
        """
        if self._scale_pending:
            return 1.0
        if k is None:
            w0, w1, w2, w3 = self._weights_list
            f = w0 + (w1 * batch) * self._k_plus_1 + (w2 + w3 * batch) * self._drafts
            return np.clip(f / self._cell_prior_mean[bucket], 0.5, 2.0)
        ratio = self._model_step_s(batch, k) / float(self._cell_prior_mean[bucket, k])
        return min(max(ratio, 0.5), 2.0)

    def _model_step_s(self, batch: float, k: int) -> float:
        """The latency model's step time at (B, K), written out: it runs every step."""
        w0, w1, w2, w3 = self._weights_list
        return w0 + w1 * batch * (k + 1) + (w2 + w3 * batch) * (k if k > 1 else 1)

    def _debounced_bucket(self, bucket: int) -> int:
        """The bucket to consult: ``bucket`` once B has stayed there ``bucket_dwell`` steps (see buckets.debounced)."""
        out, self._candidate_bucket, self._candidate_steps = debounced(
            bucket, self.prev_bucket, self._candidate_bucket, self._candidate_steps, self.config.bucket_dwell)
        return out

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """Learn from the verification of ``decision``'s drafts."""
        cfg = self.config
        k, bucket = decision.k, decision.bucket
        if not 0 <= k <= cfg.k_max:
            raise InvalidDecisionError(f"decision.k={k} is outside 0..k_max={cfg.k_max}.")
        if not -1 <= bucket < cfg.num_buckets:
            raise InvalidDecisionError(f"decision.bucket={bucket} is outside -1..{cfg.num_buckets - 1}.")
        if bucket < 0:
            return
        drafted, accepted = outcome.drafted, outcome.accepted
        if drafted.size and int(drafted.max()) > cfg.k_max:
            raise InvalidOutcomeError(f"outcome.drafted has {int(drafted.max())} drafts, above k_max={cfg.k_max}.")
        gamma = cfg.discount
        data = self.data
        if drafted.size and drafted.any():
            succ, fail = position_counts(drafted, accepted, cfg.k_max)
            # Forget only where new evidence arrives: positions beyond the deepest one
            # reached keep what they knew instead of decaying to the prior. Reach is
            # non-increasing in position, so the evidence covers a prefix.
            reached = int(np.count_nonzero(succ + fail))
            s_, f_ = data.acc_successes[:reached], data.acc_failures[:reached]
            s_ *= gamma
            s_ += succ[:reached]
            f_ *= gamma
            f_ += fail[:reached]
            p = self._prior_stats
            self._acc_a[:reached] = 1.0 + p.acc_successes[:reached] + s_
            self._acc_b[:reached] = 1.0 + p.acc_failures[:reached] + f_
        t = min(outcome.step_duration_s, cfg.max_step_s)
        prefill = outcome.prefill_tokens
        if t >= _MIN_OBSERVED_STEP_S and self._is_outlier(bucket, k, decision.num_decoding, t, prefill):
            t = 0.0  # credited to nothing: neither the cell nor the prefill price
        weight, mixed_cell = 1.0, False
        if prefill and t >= _MIN_OBSERVED_STEP_S and not self._scale_pending:
            # Price a prefill token from what such steps take beyond the cell's decode-only time.
            decode_s = float(self._post_m[bucket, k]) * self._batch_ratio(decision.num_decoding, bucket, k)
            gm = cfg.model_discount
            data.prefill_rp = data.prefill_rp * gm + (t - decode_s) * prefill
            data.prefill_pp = data.prefill_pp * gm + float(prefill) * prefill
            # What is left after the chunk's price is a decode time measured with the whole
            # step's noise: credit it with the weight of a decode step of that precision
            # (the decode share of the step, squared). Where a chunk dominates, the step
            # tells little about K, and crediting it fully biased cells toward slow steps.
            weight = min(1.0, (decode_s / t) ** 2)
            t = max(t - self._prefill_price * prefill, _PREFILL_FLOOR * decode_s)
            # Such steps have cells of their own (whole step time and chunk size).
            t_all, p_ = float(outcome.step_duration_s), float(prefill)
            for arr, v in ((data.mix_n, 1.0), (data.mix_sum, t_all), (data.mix_sumsq, t_all * t_all),
                           (data.mix_p, p_), (data.mix_pp, p_ * p_), (data.mix_tp, t_all * p_)):
                arr[bucket, k] = arr[bucket, k] * gamma + v
            if cfg.prefill_aware:
                # Their K is chosen apart, so the decode cells keep decode-only steps.
                mixed_cell = True
                self._pending.append((float(decision.num_decoding), k, t, weight))
        if t >= _MIN_OBSERVED_STEP_S and not mixed_cell:  # shorter is a broken clock, not a step
            # Each cell is an exponentially weighted window over its own observations;
            # cells not played keep their estimate (the regression, discounted on every
            # step, carries drift to them through their prior mean).
            # Cells hold times at the bucket's representative B: the parametric model
            # carries a step of another B in the bucket over (a ratio near 1), so the
            # spread of B inside a bucket does not read as noise.
            t_cell = t / self._batch_ratio(decision.num_decoding, bucket, k)
            g = gamma if weight == 1.0 else gamma**weight  # forget in proportion to what is learned
            data.cell_n[bucket, k] = data.cell_n[bucket, k] * g + weight
            data.cell_sum[bucket, k] = data.cell_sum[bucket, k] * g + weight * t_cell
            data.cell_sumsq[bucket, k] = data.cell_sumsq[bucket, k] * g + weight * t_cell * t_cell
            if not prefill:
                for arr, v in zip(self._decode_only, (1.0, t_cell, t_cell * t_cell)):
                    arr[bucket, k] = arr[bucket, k] * gamma + v
            self._update_cell_posterior(bucket, k)
            self._pending.append((float(decision.num_decoding), k, t, weight))
            if self._scale_pending:
                self._refresh_latency_model()
        if t >= _MIN_OBSERVED_STEP_S:
            share, chunk = self._mixed_share, self._mixed_chunk
            share[bucket] = _MIXED_SHARE_DECAY * share[bucket] + (1.0 - _MIXED_SHARE_DECAY) * (1.0 if prefill else 0.0)
            if prefill:
                chunk[bucket] = (_MIXED_SHARE_DECAY * chunk[bucket] + (1.0 - _MIXED_SHARE_DECAY) * prefill
                                 if chunk[bucket] > 0 else float(prefill))
        self.observations += 1
        if self.observations % cfg.regression_refresh == 0:
            self._refresh_latency_model()

    def _is_outlier(self, bucket: int, k: int, batch: int, t: float, prefill: int) -> bool:
        """True for a step far slower than its cell's posterior mean expects, unless such
        steps have become the rule (``_OUTLIER_RUN`` in a row). A prefill step is judged
        only once a prefill token has a price (before that its length is unexplained)."""
        n = self.data.cell_n[bucket, k] + self._prior_stats.cell_n[bucket, k]
        if n < _OUTLIER_MIN_N or (prefill and self._prefill_price <= 0.0):
            return False
        expected = self._post_m[bucket, k] * self._batch_ratio(batch, bucket, k) + self._prefill_price * prefill
        if t <= self.config.outlier_factor * expected:
            self._outliers_in_a_row = 0
            return False
        self._outliers_in_a_row += 1
        if self._outliers_in_a_row > _OUTLIER_RUN:
            return False
        self.outliers += 1
        return True

    # ---- posterior -----------------------------------------------------------------

    def acceptance_params(self) -> tuple[np.ndarray, np.ndarray]:
        """Beta(a, b) per position: Beta(1, 1) + prior + data."""
        return self._acc_a.copy(), self._acc_b.copy()

    def latency_params(self, bucket: int | slice = slice(None)):
        """Normal-Inverse-Gamma posterior (m, k, a, b) of the mean step time per (bucket, K)."""
        p, d = self._prior_stats, self.data
        m0 = self._cell_prior_mean[bucket]
        b0 = _NOISE_SHAPE * (self.config.latency_cv * m0) ** 2
        return nig.posterior(
            m0, self.config.cell_prior_count, _NOISE_SHAPE, b0,
            p.cell_n[bucket] + d.cell_n[bucket], p.cell_sum[bucket] + d.cell_sum[bucket],
            p.cell_sumsq[bucket] + d.cell_sumsq[bucket],
        )

    def _sample_tokens_and_times(self, bucket: int, draws: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Thompson draws of E(K) and of the decode-only t(bucket, K), K = 0..K_max.

        All gamma variates come from one call (a Beta draw is G_a / (G_a + G_b)), which
        keeps the per-step cost near the numpy call overhead.
        """
        rng, km = self._rng, self.config.k_max
        shape = np.concatenate((self._acc_a, self._acc_b, self._post_a[bucket]))
        lead = () if draws is None else (draws,)
        g = gamma_variates(rng, shape if draws is None else np.tile(shape, (draws, 1)))
        alpha = g[..., :km] / (g[..., :km] + g[..., km : 2 * km])
        one = _ONE if draws is None else np.ones((draws, 1))
        tokens = np.concatenate((one, 1.0 + np.cumsum(np.cumprod(alpha, axis=-1), axis=-1)), axis=-1)
        mn = self._post_m[bucket]
        t = mn + np.sqrt(self._post_b[bucket] / (g[..., 2 * km :] * self._post_k[bucket])) * rng.standard_normal(lead + (km + 1,))
        return tokens, np.maximum(t, _MIN_STEP_S)

    def _prob_current_best(self, bucket: int, batch: int, draws: int = 32) -> float:
        """Share of ``draws`` posterior draws in which the current K (with its switching bonus) wins."""
        return float(np.mean(np.argmax(self._scores(bucket, batch, 1.0, draws), axis=-1) == self.prev_k))

    def _scores(self, bucket: int, batch: int, kv_factor, draws: int | None = None) -> np.ndarray:
        """Thompson scores of K = 0..K_max at ``batch`` (one draw, or ``draws`` rows), with the
        current K's switching bonus; ``kv_factor`` discounts deep K near a full cache.

        Goodput B E(K) / t(K) where the bucket's steps are all decode-only. Where some come
        next to a prompt chunk (share f, mean chunk P), the oracle's score of the mix:
        B E(K) - G* ((1 - f) t(K) + f t_mixed(K, P)), G* the draw's best decode-only goodput,
        the bonus a ``switch_penalty`` share of the current K's tokens, as in _select_mixed.
        """
        cfg = self.config
        tokens, t = self._sample_tokens_and_times(bucket, draws)
        tokens = tokens * batch * kv_factor
        t = t * self._batch_ratio(batch, bucket)
        share = float(self._mixed_share[bucket])
        prev = self.prev_k
        if cfg.prefill_aware or share <= 0.0 or not (self._prior_stats.mix_n[bucket] + self.data.mix_n[bucket]).any():
            scores = tokens / t
            if prev >= 0:
                scores[..., prev] *= 1.0 + cfg.switch_penalty
            return scores
        t_mixed = self._draw_means(*self.mixed_step_posterior(bucket, float(self._mixed_chunk[bucket]), batch), draws)
        rate = np.max(tokens / t, axis=-1, keepdims=True)
        scores = tokens - rate * ((1.0 - share) * t + share * t_mixed)
        if prev >= 0:
            scores[..., prev] += cfg.switch_penalty * tokens[..., prev]
        return scores

    def _draw_means(self, mn, kn, an, bn, draws: int | None = None) -> np.ndarray:
        """Thompson draws of the means of Normal-Inverse-Gamma cells (m, k, a, b), one per
        cell, or ``draws`` rows of them; floored at a positive step time."""
        lead = () if draws is None else (draws,)
        g = gamma_variates(self._rng, np.broadcast_to(an, lead + np.shape(an)))
        return np.maximum(mn + np.sqrt(bn / (g * kn)) * self._rng.standard_normal(lead + np.shape(mn)), _MIN_STEP_S)

    def _update_posterior_cache(self) -> None:
        """Recompute the cached posterior parameters of every cell and position."""
        p, d = self._prior_stats, self.data
        self._acc_a = 1.0 + p.acc_successes + d.acc_successes
        self._acc_b = 1.0 + p.acc_failures + d.acc_failures
        self._post_m, self._post_k, self._post_a, self._post_b = (np.array(v, dtype=float) for v in self.latency_params())

    def mixed_step_posterior(self, bucket: int, prefill_tokens: int, batch: int):
        """Posterior (m, k, a, b) per K of the time of a step at ``batch`` next to a chunk
        of ``prefill_tokens`` prompt tokens.

        Step time grows with the chunk, and the K tried next to chunks met chunks of
        other sizes, so each K's mean is taken at this chunk size along a slope in P
        shared by the bucket's K (fitted within cells: analysis of covariance). The prior
        mean, worth ``_MIXED_PRIOR_COUNT`` steps, is additive: the best-measured K's time
        next to such a chunk plus the decode-only difference (before any, the decode-only
        time plus the chunk's price).
        """
        p, d = self._prior_stats, self.data
        n = p.mix_n[bucket] + d.mix_n[bucket]
        safe = np.maximum(n, 1e-12)
        mt, mp = (p.mix_sum[bucket] + d.mix_sum[bucket]) / safe, (p.mix_p[bucket] + d.mix_p[bucket]) / safe
        var_t = np.maximum((p.mix_sumsq[bucket] + d.mix_sumsq[bucket]) / safe - mt * mt, 0.0)
        var_p = np.maximum((p.mix_pp[bucket] + d.mix_pp[bucket]) / safe - mp * mp, 0.0)
        cov = (p.mix_tp[bucket] + d.mix_tp[bucket]) / safe - mt * mp
        spread = float(n @ var_p)
        slope = float(n @ cov) / spread if spread > 1.0 else self._prefill_price
        slope = max(slope, 0.0)
        at_p = mt + slope * (prefill_tokens - mp)
        scatter = n * np.maximum(var_t - 2.0 * slope * cov + slope * slope * var_p, 0.0)
        decode = self._post_m[bucket] * self._batch_ratio(batch, bucket)
        if n.max() > 0:
            # A chunk costs every K the same: a K rarely seen next to one starts from the
            # best-measured K's time there plus the decode-only difference between them.
            ref = int(np.argmax(n))
            m0 = at_p[ref] + decode - decode[ref]
        else:
            m0 = decode + self._prefill_price * prefill_tokens
        k0 = _MIXED_PRIOR_COUNT
        b0 = _NOISE_SHAPE * (self.config.latency_cv * m0) ** 2
        kn = k0 + n
        return ((k0 * m0 + n * at_p) / kn, kn, _NOISE_SHAPE + 0.5 * n,
                b0 + 0.5 * scatter + 0.5 * k0 * n * (at_p - m0) ** 2 / kn)

    def _update_cell_posterior(self, bucket: int, k: int) -> None:
        """Recompute one cell's cached posterior (scalar arithmetic: this runs every step)."""
        p, d = self._prior_stats, self.data
        m0 = float(self._cell_prior_mean[bucket, k])
        n = float(p.cell_n[bucket, k] + d.cell_n[bucket, k])
        s = float(p.cell_sum[bucket, k] + d.cell_sum[bucket, k])
        ss = float(p.cell_sumsq[bucket, k] + d.cell_sumsq[bucket, k])
        b0 = _NOISE_SHAPE * (self.config.latency_cv * m0) ** 2
        mn, kn, an, bn = nig.posterior_scalar(m0, self.config.cell_prior_count, _NOISE_SHAPE, b0, n, s, ss)
        self._post_m[bucket, k], self._post_k[bucket, k] = mn, kn
        self._post_a[bucket, k], self._post_b[bucket, k] = an, bn

    def mean_goodput(self) -> np.ndarray:
        """Posterior-mean goodput (tokens/s) per (bucket, K) at each bucket's representative B."""
        a, b = self.acceptance_params()
        tokens = expected_tokens(a / (a + b))  # independent Betas: E[prod] = prod E
        mn = self.latency_params()[0]
        return self._rep_batch[:, None] * tokens[None, :] / np.maximum(mn, _MIN_STEP_S)

    def prob_best(self, samples: int = 2000, seed: int = 0) -> np.ndarray:
        """Monte-Carlo P(K is best) per (bucket, K), from a separate generator (state untouched)."""
        rng = np.random.default_rng(seed)
        a, b = self.acceptance_params()
        tokens = expected_tokens(rng.beta(a, b, size=(samples, a.size)))  # (S, K+1)
        mn, kn, an, bn = self.latency_params()
        shape = (samples,) + mn.shape
        sigma2 = bn / rng.standard_gamma(np.broadcast_to(an, shape))
        t = np.maximum(mn + np.sqrt(sigma2 / kn) * rng.standard_normal(shape), _MIN_STEP_S)
        best = np.argmax(tokens[:, None, :] / t, axis=-1)  # (S, buckets)
        k1 = self.config.k_max + 1
        return np.stack([np.bincount(best[:, i], minlength=k1) for i in range(best.shape[1])]) / samples

    def latency_weights(self) -> np.ndarray:
        """Current posterior-mean weights of the parametric latency model."""
        return self._weights.copy()

    def _fold_pending(self) -> None:
        """Bring the regression statistics up to date with the observations since the last fold.

        The j-th of m pending observations is ``m - 1 - j`` steps old, so it carries
        weight gamma^(m-1-j) (times its own precision weight), exactly as if it had been
        added when observed.
        """
        if not self._pending:
            return
        d, gamma = self.data, self.config.model_discount
        obs = np.array(self._pending)
        m = obs.shape[0]
        x = latency_model.features_rows(obs[:, 0], obs[:, 1])
        w = gamma ** np.arange(m - 1, -1, -1, dtype=float) * obs[:, 3]
        d.reg_xtx = d.reg_xtx * gamma**m + (x * w[:, None]).T @ x
        d.reg_xty = d.reg_xty * gamma**m + (w * obs[:, 2]) @ x
        d.reg_n = d.reg_n * gamma**m + float(w.sum())
        self._pending.clear()

    def _refresh_latency_model(self) -> None:
        """Weigh the prior against the data, refit the parametric model, reset every cell's
        prior mean from it, refresh caches."""
        self._fold_pending()
        if self.prior is not None:
            d = self.data
            tau2 = self._prior_cells.calibration_variance(*self._decode_only)
            # Cells next to a chunk are also held against the ones played, since this
            # deployment's chunks may cost otherwise than the trace's; each played cell is
            # carried to the prior cell's chunk size along the prior's slope first.
            live = prior_conflict.at_chunk_size(d.mix_n, d.mix_sum, d.mix_sumsq, d.mix_p, self._prior_chunk_slope,
                                                self._prior_chunk_p)
            mixed = self._prior_mixed_cells.calibration_variance(*live)
            self._set_prior_tau2(tau2, np.maximum(tau2, mixed))
        p, d = self._prior_stats, self.data
        xtx, xty, n = p.reg_xtx + d.reg_xtx, p.reg_xty + d.reg_xty, p.reg_n + d.reg_n
        w0 = self._regression_prior_mean(xtx, xty, n)
        self._scale_pending = w0 is None
        if w0 is None:
            # No prior weights and no data yet: every cell starts equal, unknown scale.
            self._weights = np.zeros(len(latency_model.FEATURES))
            self._weights_list = self._weights.tolist()
            self._cell_prior_mean = np.full(self._cell_prior_mean.shape, 1e-2)
        else:
            self._weights = latency_model.solve(w0, self._model_prior_precision, xtx, xty)
            self._weights_list = self._weights.tolist()
            floor = max(float(w0[0]) * 1e-3, _MIN_STEP_S)
            self._cell_prior_mean = np.maximum(self._design @ self._weights, floor)
        rp, pp = p.prefill_rp + d.prefill_rp, p.prefill_pp + d.prefill_pp
        self._prefill_price = max(rp / pp, 0.0) if pp > 0 else 0.0
        self._update_posterior_cache()

    def _set_prior_tau2(self, tau2: np.ndarray, tau2_mixed: np.ndarray) -> None:
        """Use the prior's latency cells at the weight they keep under calibration variance
        per bucket: ``tau2`` for the decode-only cells, ``tau2_mixed`` for those next to a
        chunk; acceptance and regression as loaded."""
        self._prior_tau2, self._prior_tau2_mixed = tau2, tau2_mixed
        p = self._prior_loaded
        if not tau2.any() and not tau2_mixed.any():
            self._prior_stats = p
            return
        # New cell arrays, the rest shared with the loaded prior (nothing writes to either).
        f = self._prior_cells.kept_share(tau2)
        g = self._prior_mixed_cells.kept_share(tau2_mixed)
        self._prior_stats = dataclasses.replace(
            p, cell_n=p.cell_n * f, cell_sum=p.cell_sum * f, cell_sumsq=p.cell_sumsq * f,
            **{name: getattr(p, name) * g for name in MIXED_FIELDS})

    def _regression_prior_mean(self, xtx: np.ndarray, xty: np.ndarray, n: float) -> np.ndarray | None:
        if self._prior_weights is not None:
            return self._prior_weights
        if n <= 0:
            return None
        # Default shape, scaled so that the average observed step fits: w0 = c * shape.
        x_mean, t_mean = xtx[0] / n, xty[0] / n  # feature 0 is the constant 1
        c = t_mean / max(float(x_mean @ latency_model.DEFAULT_SHAPE), 1e-300)
        return c * latency_model.DEFAULT_SHAPE

    # ---- reporting -----------------------------------------------------------------

    def state_line(self) -> str:
        """One line for a server log: K histogram, acceptance per position, best K per visited bucket."""
        a, b = self.acceptance_params()
        hist = " ".join(f"{k}:{int(c)}" for k, c in enumerate(self.k_counts) if c)
        acc = " ".join(f"{v:.2f}" for v in a / (a + b))
        g = self.mean_goodput()
        seen = np.flatnonzero((self.data.cell_n + self._prior_stats.cell_n).sum(axis=1) > 0)
        edges = self.config.bucket_edges
        best = " ".join(f"B>={edges[i]}:K={int(np.argmax(g[i]))}({g[i].max():.1f}tok/s)" for i in seen)
        return f"banditk steps={self.steps} K[{hist}] accept/pos[{acc}] switches={self.switches} best[{best}]"

    def counters(self) -> dict:
        return {"steps": self.steps, "observations": self.observations, "switches": self.switches,
                "mixed_steps": self.mixed_steps, "k_counts": self.k_counts.tolist()}

    # ---- state (for snapshots) -------------------------------------------------------

    def get_state(self) -> dict:
        """Everything that changes as the governor runs, as JSON types."""
        self._fold_pending()  # exact: folding early gives the same statistics
        return {
            "data": self.data.to_dict(),
            "cell_prior_mean": self._cell_prior_mean.tolist(),
            "weights": self._weights.tolist(),
            "prefill_price": self._prefill_price,
            "prior_tau2": self._prior_tau2.tolist(),
            "prior_tau2_mixed": self._prior_tau2_mixed.tolist(),
            "decode_only_cells": dict(zip(DECODE_ONLY_KEYS, (a.tolist() for a in self._decode_only))),
            "scale_pending": self._scale_pending,
            "rng": _jsonable_rng_state(self._rng.bit_generator.state),
            "prev_k": self.prev_k,
            "prev_bucket": self.prev_bucket,
            "mixed_share": self._mixed_share.tolist(),
            "mixed_chunk": self._mixed_chunk.tolist(),
            "held": self._held,
            "epoch": self._epoch,
            "candidate_bucket": self._candidate_bucket,
            "candidate_steps": self._candidate_steps,
            **self.counters(),
        }

    def set_state(self, state: dict) -> None:
        """Restore :meth:`get_state` output (validated by :mod:`banditk.priorfile`)."""
        cfg = self.config
        self.data = SufficientStats.from_dict(state.get("data"), cfg.k_max, cfg.num_buckets, "governor.state.data")
        self._cell_prior_mean = np.array(state["cell_prior_mean"], dtype=float)
        self._weights = np.array(state["weights"], dtype=float)
        self._weights_list = self._weights.tolist()
        self._prefill_price = float(state.get("prefill_price", 0.0))
        self._scale_pending = bool(state["scale_pending"])
        self._rng.bit_generator.state = state["rng"]
        self.prev_k, self.prev_bucket = int(state["prev_k"]), int(state["prev_bucket"])
        nb = cfg.num_buckets  # absent in snapshots written before K was scored over the mix
        self._mixed_share = np.array(state.get("mixed_share", [0.0] * nb), dtype=float)
        self._mixed_chunk = np.array(state.get("mixed_chunk", [0.0] * nb), dtype=float)
        self._held = int(state["held"])
        self._epoch = int(state.get("epoch", self.config.decision_interval))
        self._candidate_bucket, self._candidate_steps = int(state["candidate_bucket"]), int(state["candidate_steps"])
        self.steps, self.observations = int(state["steps"]), int(state["observations"])
        self.switches = int(state["switches"])
        self.mixed_steps = int(state.get("mixed_steps", 0))
        self.k_counts = np.array(state["k_counts"], dtype=np.int64)
        self._pending.clear()
        # Absent in snapshots written before the prior was weighed against the data.
        tau2 = np.array(state.get("prior_tau2", [0.0] * nb), dtype=float)
        self._set_prior_tau2(tau2, np.array(state.get("prior_tau2_mixed", tau2), dtype=float))
        cells = state.get("decode_only_cells", {})
        self._decode_only = tuple(np.array(cells[key], dtype=float) if key in cells else np.zeros_like(self.data.cell_n)
                                  for key in DECODE_ONLY_KEYS)
        self._update_posterior_cache()


def _fit_prior(config: GovernorConfig, prior: Prior) -> SufficientStats:
    """Check a prior against the config and return its (truncated, capped) statistics."""
    if prior.key.drafter_class != config.drafter_class:
        raise DrafterClassMismatchError(
            f"prior drafter class {prior.key.drafter_class!r} cannot be used for drafter class "
            f"{config.drafter_class!r}: parameters never transfer across drafter classes."
        )
    if prior.k_max < config.k_max:
        raise IncompatiblePriorError(f"prior k_max={prior.k_max} is below the server's k_max={config.k_max}.")
    if tuple(prior.bucket_edges) != tuple(config.bucket_edges):
        raise IncompatiblePriorError(
            f"prior bucket_edges={list(prior.bucket_edges)} differ from the governor's {list(config.bucket_edges)}."
        )
    stats = prior.stats.truncated(config.k_max) if prior.k_max > config.k_max else prior.stats.copy()
    return stats.capped(prior.strength_cap)


def _jsonable_rng_state(state: dict) -> dict:
    return {k: (_jsonable_rng_state(v) if isinstance(v, dict) else int(v) if not isinstance(v, str) else v)
            for k, v in state.items()}


