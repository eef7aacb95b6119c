"""The bandit governor: Thompson sampling over K on a posterior of goodput.

Per drafter class it keeps per-position acceptance Betas (shared by all batch sizes) and per
(batch bucket, K) Normal-Inverse-Gamma cells of the mean step time, whose prior means come
from an online latency regression. Steps next to a prompt chunk have cells and a K of their
own. The rules live in this package's modules; this class holds the state and calls them.
"""

from __future__ import annotations

import numpy as np

from .. import latency_model, nig
from ..acceptance import expected_tokens, position_counts
from ..buckets import bucket_with_hysteresis, debounced, representative_batch
from ..config import GovernorConfig
from ..errors import DrafterClassMismatchError, InvalidContextError, InvalidDecisionError, InvalidOutcomeError
from ..prior import Prior
from ..stats import SufficientStats
from ..types import Decision, StepContext, StepOutcome
from . import chunk_cells, epochs, latency_fit, outliers, scoring, state, summary
from .prior_weighing import PriorWeigher, fit_prior
from .thompson import draw_tokens_and_times

#: Shape a0 of the cells' inverse-gamma noise prior: 2 is the weakest with a finite mean,
#: so the prior noise guess (latency_cv * mean) is its mean.
NOISE_SHAPE = 2.0
#: Step durations below this carry no information (no forward pass is that fast).
MIN_OBSERVED_STEP_S = 1e-6
#: Live steps next to a chunk the decode K needs in its cell before such a step may leave it.
CHUNK_LEARN_STEPS = 3.0
#: Taking a chunk's price out of a step never leaves less than this share of its decode time.
PREFILL_FLOOR = 0.3


class BanditGovernor:
    """Thompson-sampling governor of speculative depth K.

    Args:
        config: hyperparameters.
        prior: optional prior of the same drafter class.

    Raises:
        DrafterClassMismatchError: the prior is of another drafter class.
        IncompatiblePriorError: the prior's K_max is smaller or its bucket edges differ.

    Examples:
        >>> from banditk.types import StepContext, StepOutcome
        >>> gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4))
        >>> d = gov.select(StepContext(num_decoding=8, k_max=4, drafter_class="mtp"))
        >>> 0 <= d.k <= 4
        True
        >>> gov.observe(d, StepOutcome(np.full(8, d.k), np.zeros(8, dtype=int), 0.02))
    """

    name = "bandit"
    #: The adapter predicts the next step's prompt chunk for a policy that reads it.
    wants_prefill_hint = True

    def __init__(self, config: GovernorConfig, prior: Prior | None = None) -> None:
        self.config = config
        k_max, nb = config.k_max, config.num_buckets
        self.prior = prior
        loaded = SufficientStats.zeros(k_max, nb) if prior is None else fit_prior(config, prior)
        self._prior_loaded = loaded
        self._weigher = PriorWeigher(loaded)
        self._prior_weights = None if prior is None or prior.latency_weights is None \
            else np.array(prior.latency_weights, dtype=float)
        self._prior_stats = loaded
        self._prior_tau2 = self._prior_tau2_mixed = np.zeros(nb)
        self.data = SufficientStats.zeros(k_max, nb)
        # Per (bucket, K): weight, sum and sum of squares of the decode-only steps, the like
        # of the prior's cells, against which they are weighed.
        self._decode_only = tuple(np.zeros((nb, k_max + 1)) for _ in range(3))
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        self._rep_batch = np.array([representative_batch(config.bucket_edges, b) for b in range(nb)])
        self._design = np.stack([latency_model.features(b, np.arange(k_max + 1)) for b in self._rep_batch])
        self._model_prior_precision = latency_fit.prior_precision(self._design, config.model_prior_strength)
        self._k_plus_1 = np.arange(k_max + 1) + 1.0
        self._drafts = np.maximum(np.arange(k_max + 1), 1).astype(float)
        self._cell_prior_mean = np.zeros((nb, k_max + 1))
        # (B, K, t, weight) observed since the regression was last brought up to date.
        self._pending: list[tuple[float, int, float, float]] = []
        # Where the decision stands: K and bucket in play, epoch, bucket candidate.
        self.prev_k, self.prev_bucket = -1, -1
        self._held, self._epoch = 0, config.decision_interval
        self._candidate_bucket, self._candidate_steps = -1, 0
        self._outlier_run = 0
        self.steps = self.observations = self.switches = self.outliers = self.mixed_steps = 0
        self.k_counts = np.zeros(k_max + 1, dtype=np.int64)
        self.refresh()

    # ---- the two calls -------------------------------------------------------------

    def select(self, context: StepContext) -> Decision:
        """Choose K for one scheduler step."""
        cfg = self.config
        if context.drafter_class != cfg.drafter_class:
            raise DrafterClassMismatchError(
                f"context.drafter_class={context.drafter_class!r} but this governor learns {cfg.drafter_class!r}.")
        if context.k_max != cfg.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but the governor was built for k_max={cfg.k_max}.")
        self.steps += 1
        batch = context.num_decoding
        if batch == 0:  # nothing decodes: K is moot; keep it and learn nothing
            return Decision(k=max(self.prev_k, 0), bucket=-1, num_decoding=0, step_id=self.steps)
        bucket = self._consulted_bucket(batch)
        kv_pressed = context.kv_usage > cfg.kv_pressure_threshold and cfg.kv_pressure_weight > 0
        if context.prefill_tokens and self.prev_k >= 0 and not self._scale_pending:
            return self._select_chunk_step(context, bucket, kv_pressed)
        same_bucket = bucket == self.prev_bucket
        if epochs.holds(self._held, self._epoch, same_bucket, kv_pressed):
            self._held += 1
            return self._decide(self.prev_k, bucket, batch)
        self._held = 0
        kvf = self._kv_factor(context.kv_usage) if kv_pressed else 1.0
        scores = self._decode_scores(bucket, batch, kvf)
        k = int(np.argmax(scores))
        if self.prev_k >= 0 and k != self.prev_k:
            self.switches += 1
        kept = k == self.prev_k and same_bucket and not kv_pressed
        self._epoch = epochs.next_length(self._epoch, kept, lambda: self._prob_current_best(bucket, batch)
                                         >= cfg.settle_confidence, cfg.decision_interval, cfg.max_decision_interval)
        self.prev_k, self.prev_bucket = k, bucket
        return self._decide(k, bucket, batch, scores)

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
        drafted = outcome.drafted
        if drafted.size and int(drafted.max()) > cfg.k_max:
            raise InvalidOutcomeError(f"outcome.drafted has {int(drafted.max())} drafts, above k_max={cfg.k_max}.")
        if drafted.size and drafted.any():
            self._learn_acceptance(drafted, outcome.accepted)
        self._learn_step_time(decision, min(outcome.step_duration_s, cfg.max_step_s), outcome.prefill_tokens)
        self.observations += 1
        if self.observations % cfg.regression_refresh == 0:
            self.refresh()

    # ---- select's steps ------------------------------------------------------------

    def _decide(self, k: int, bucket: int, batch: int, scores: np.ndarray | None = None) -> Decision:
        self.k_counts[k] += 1
        sampled = () if scores is None else tuple(scores.tolist())
        return Decision(k=k, bucket=bucket, num_decoding=batch, step_id=self.steps, sampled_goodput=sampled)

    def _consulted_bucket(self, batch: int) -> int:
        """B's bucket with hysteresis, moved to only after ``bucket_dwell`` steps there."""
        cfg = self.config
        raw = bucket_with_hysteresis(cfg.bucket_edges, batch, self.prev_bucket, cfg.bucket_hysteresis)
        out, self._candidate_bucket, self._candidate_steps = debounced(
            raw, self.prev_bucket, self._candidate_bucket, self._candidate_steps, cfg.bucket_dwell)
        return out

    def _kv_factor(self, kv_usage: float) -> np.ndarray:
        cfg = self.config
        return scoring.kv_factor(kv_usage, cfg.kv_pressure_threshold, cfg.kv_pressure_weight, cfg.k_max)

    def _decode_scores(self, bucket: int, batch: int, kvf, draws: int | None = None) -> np.ndarray:
        """Thompson scores of every K for a decode-only step (one draw, or ``draws`` rows)."""
        tokens, t = draw_tokens_and_times(self._rng, self._acc_a, self._acc_b, self._post_m[bucket],
                                          self._post_k[bucket], self._post_a[bucket], self._post_b[bucket], draws)
        t = t * self._batch_ratio(batch, bucket)
        return scoring.decode_scores(tokens * batch * kvf, t, self.prev_k, self.config.switch_penalty)

    def _prob_current_best(self, bucket: int, batch: int, draws: int = 32) -> float:
        """Share of posterior draws in which the current K (with its switching bonus) wins."""
        return float(np.mean(np.argmax(self._decode_scores(bucket, batch, 1.0, draws), axis=-1) == self.prev_k))

    def _select_chunk_step(self, context: StepContext, bucket: int, kv_pressed: bool) -> Decision:
        """K of a step next to a prompt chunk, at the posterior means, without a draw of its own.

        It keeps the decode K until that K has ``CHUNK_LEARN_STEPS`` live such steps, so the
        cost next to a chunk of every K the decode epochs try is learnt without a switch. The
        decode K, its epoch and the switch count are left alone.
        """
        batch, prev = context.num_decoding, self.prev_k
        self.mixed_steps += 1
        if self.data.mix_n[bucket, prev] < CHUNK_LEARN_STEPS:
            return self._decide(prev, bucket, batch)
        t_chunk = self.mixed_step_posterior(bucket, context.prefill_tokens, batch)[0]
        tokens = expected_tokens(self._acc_a / (self._acc_a + self._acc_b)) * batch
        if kv_pressed:
            tokens = tokens * self._kv_factor(context.kv_usage)
        rate = float(np.max(tokens / (self._post_m[bucket] * self._batch_ratio(batch, bucket))))
        scores = scoring.chunk_step_scores(tokens, rate, t_chunk, prev, self.config.switch_penalty)
        k = int(np.argmax(scores))
        return self._decide(k, bucket, batch, scores)

    def _batch_ratio(self, batch: int, bucket: int, k: int | None = None):
        """Model time at ``batch`` over that at the bucket's representative B, per K or for one K."""
        if self._scale_pending:
            return 1.0
        if k is None:
            model = latency_model.step_times(self._weights_list, batch, self._k_plus_1, self._drafts)
            return latency_fit.batch_ratio(model, self._cell_prior_mean[bucket])
        return latency_fit.batch_ratio(latency_model.step_time(self._weights_list, batch, k),
                                       self._cell_prior_mean[bucket, k])

    # ---- observe's steps -----------------------------------------------------------

    def _learn_acceptance(self, drafted: np.ndarray, accepted: np.ndarray) -> None:
        """Discounted Beta counts per position. Only positions reached are forgotten: deeper
        ones keep what they knew instead of decaying to the prior (reach covers a prefix)."""
        succ, fail = position_counts(drafted, accepted, self.config.k_max)
        reached = int(np.count_nonzero(succ + fail))
        gamma, data, p = self.config.discount, self.data, self._prior_stats
        s_, f_ = data.acc_successes[:reached], data.acc_failures[:reached]
        s_ *= gamma
        s_ += succ[:reached]
        f_ *= gamma
        f_ += fail[:reached]
        self._acc_a[:reached] = 1.0 + p.acc_successes[:reached] + s_
        self._acc_b[:reached] = 1.0 + p.acc_failures[:reached] + f_

    def _learn_step_time(self, decision: Decision, t: float, prefill: int) -> None:
        """Credit a step's time to its cell: decode-only steps to the decode cells, steps next
        to a chunk to cells of their own, with their decode share priced for the regression."""
        cfg, data = self.config, self.data
        k, bucket, batch = decision.k, decision.bucket, decision.num_decoding
        if t >= MIN_OBSERVED_STEP_S and not (prefill and self._prefill_price <= 0.0):
            n = float(data.cell_n[bucket, k] + self._prior_stats.cell_n[bucket, k])
            expected = self._post_m[bucket, k] * self._batch_ratio(batch, bucket, k) + self._prefill_price * prefill
            slow, self._outlier_run = outliers.judge(t, expected, n, cfg.outlier_factor, self._outlier_run)
            if slow:
                self.outliers += 1
                t = 0.0  # credited to nothing: neither a cell nor the prefill price
        if t < MIN_OBSERVED_STEP_S:  # a broken clock, not a step
            return
        if prefill and not self._scale_pending:
            decode_s = float(self._post_m[bucket, k]) * self._batch_ratio(batch, bucket, k)
            gm = cfg.model_discount
            data.prefill_rp = data.prefill_rp * gm + (t - decode_s) * prefill
            data.prefill_pp = data.prefill_pp * gm + float(prefill) * prefill
            chunk_cells.credit(data, bucket, k, t, prefill, cfg.discount)
            # The rest after the chunk's price is a decode time with the whole step's noise:
            # the regression weighs it by the decode share of the step, squared.
            weight = min(1.0, (decode_s / t) ** 2)
            self._pending.append((float(batch), k, max(t - self._prefill_price * prefill, PREFILL_FLOOR * decode_s),
                                  weight))
            return
        # Cells are discounted windows at the bucket's representative B: the latency model
        # carries a step of another B in the bucket over, so B's spread is not read as noise.
        t_cell = t / self._batch_ratio(batch, bucket, k)
        g = cfg.discount
        data.cell_n[bucket, k] = data.cell_n[bucket, k] * g + 1.0
        data.cell_sum[bucket, k] = data.cell_sum[bucket, k] * g + t_cell
        data.cell_sumsq[bucket, k] = data.cell_sumsq[bucket, k] * g + t_cell * t_cell
        if not prefill:
            for arr, v in zip(self._decode_only, (1.0, t_cell, t_cell * t_cell)):
                arr[bucket, k] = arr[bucket, k] * g + v
        self._update_cell_posterior(bucket, k)
        self._pending.append((float(batch), k, t, 1.0))
        if self._scale_pending:
            self.refresh()

    # ---- posterior -----------------------------------------------------------------

    def fold_pending(self) -> None:
        """Bring the regression statistics up to date (exact: folding early changes nothing)."""
        latency_fit.fold(self.data, self._pending, self.config.model_discount)

    def refresh(self) -> None:
        """Weigh the prior against the data, refit the latency model, reset the cells' prior means."""
        self.fold_pending()
        p = self._prior_loaded
        if self.prior is not None:
            self._set_prior_tau2(*self._weigher.calibration(self.data, self._decode_only))
        p, d = self._prior_stats, self.data
        xtx, xty, n = p.reg_xtx + d.reg_xtx, p.reg_xty + d.reg_xty, p.reg_n + d.reg_n
        w0 = latency_fit.prior_mean(self._prior_weights, xtx, xty, n)
        self._scale_pending = w0 is None
        if w0 is None:  # no prior weights and no data yet: every cell equal, scale unknown
            self._weights = np.zeros(len(latency_model.FEATURES))
            self._cell_prior_mean = np.full(self._cell_prior_mean.shape, 1e-2)
        else:
            self._weights = latency_model.solve(w0, self._model_prior_precision, xtx, xty)
            self._cell_prior_mean = latency_fit.cell_prior_means(self._design, self._weights, w0)
        self._weights_list = self._weights.tolist()
        rp, pp = p.prefill_rp + d.prefill_rp, p.prefill_pp + d.prefill_pp
        self._prefill_price = max(rp / pp, 0.0) if pp > 0 else 0.0
        self._update_posterior_cache()

    def _set_prior_tau2(self, tau2: np.ndarray, tau2_mixed: np.ndarray) -> None:
        self._prior_tau2, self._prior_tau2_mixed = tau2, tau2_mixed
        self._prior_stats = self._weigher.weighed(tau2, tau2_mixed)

    def _update_posterior_cache(self) -> None:
        p, d = self._prior_stats, self.data
        self._acc_a = 1.0 + p.acc_successes + d.acc_successes
        self._acc_b = 1.0 + p.acc_failures + d.acc_failures
        self._post_m, self._post_k, self._post_a, self._post_b = (np.array(v, dtype=float) for v in self.latency_params())

    def _update_cell_posterior(self, bucket: int, k: int) -> None:
        """One cell's cached posterior, in plain floats (this runs every step)."""
        p, d, cfg = self._prior_stats, self.data, self.config
        m0 = float(self._cell_prior_mean[bucket, k])
        out = nig.posterior_scalar(m0, cfg.cell_prior_count, NOISE_SHAPE, NOISE_SHAPE * (cfg.latency_cv * m0) ** 2,
                                   float(p.cell_n[bucket, k] + d.cell_n[bucket, k]),
                                   float(p.cell_sum[bucket, k] + d.cell_sum[bucket, k]),
                                   float(p.cell_sumsq[bucket, k] + d.cell_sumsq[bucket, k]))
        self._post_m[bucket, k], self._post_k[bucket, k], self._post_a[bucket, k], self._post_b[bucket, k] = out

    def acceptance_params(self) -> tuple[np.ndarray, np.ndarray]:
        """Beta(a, b) per position: Beta(1, 1) + prior + data."""
        return self._acc_a.copy(), self._acc_b.copy()

    def latency_params(self, bucket: int | slice = slice(None)):
        """Normal-Inverse-Gamma posterior (m, k, a, b) of the mean step time per (bucket, K)."""
        p, d, cfg = self._prior_stats, self.data, self.config
        m0 = self._cell_prior_mean[bucket]
        return nig.posterior(m0, cfg.cell_prior_count, NOISE_SHAPE, NOISE_SHAPE * (cfg.latency_cv * m0) ** 2,
                             p.cell_n[bucket] + d.cell_n[bucket], p.cell_sum[bucket] + d.cell_sum[bucket],
                             p.cell_sumsq[bucket] + d.cell_sumsq[bucket])

    def mixed_step_posterior(self, bucket: int, prefill_tokens: int, batch: int):
        """Posterior (m, k, a, b) per K of a step at ``batch`` next to a chunk of ``prefill_tokens``."""
        decode_s = self._post_m[bucket] * self._batch_ratio(batch, bucket)
        return chunk_cells.chunk_step_posterior(self._prior_stats, self.data, bucket, prefill_tokens, decode_s,
                                                self._prefill_price, NOISE_SHAPE, self.config.latency_cv)

    def latency_weights(self) -> np.ndarray:
        """Current posterior-mean weights of the parametric latency model."""
        return self._weights.copy()

    # ---- reporting -----------------------------------------------------------------

    def mean_goodput(self) -> np.ndarray:
        """Posterior-mean goodput (tokens/s) per (bucket, K) at each bucket's representative B."""
        return summary.mean_goodput(self._acc_a, self._acc_b, self.latency_params()[0], self._rep_batch)

    def prob_best(self, samples: int = 2000, seed: int = 0) -> np.ndarray:
        """Monte-Carlo P(K is best) per (bucket, K), from a separate generator (state untouched)."""
        return summary.prob_best(self._acc_a, self._acc_b, *self.latency_params(), samples=samples, seed=seed)

    def state_line(self) -> str:
        """One line for a server log: K histogram, acceptance per position, best K per visited bucket."""
        seen = np.flatnonzero((self.data.cell_n + self._prior_stats.cell_n).sum(axis=1) > 0)
        return summary.state_line(self.steps, self.k_counts, self._acc_a, self._acc_b, self.switches,
                                  self.mean_goodput(), seen, self.config.bucket_edges)

    def counters(self) -> dict:
        return {"steps": self.steps, "observations": self.observations, "switches": self.switches,
                "outliers": self.outliers, "mixed_steps": self.mixed_steps, "k_counts": self.k_counts.tolist()}

    # ---- state (for snapshots; its schema is governor.state.SCHEMA) ----------------

    def get_state(self) -> dict:
        """Everything that changes as the governor runs, as JSON types."""
        self.fold_pending()
        return {
            "data": self.data.to_dict(), "cell_prior_mean": self._cell_prior_mean.tolist(),
            "weights": self._weights.tolist(), "prefill_price": self._prefill_price,
            "prior_tau2": self._prior_tau2.tolist(), "prior_tau2_mixed": self._prior_tau2_mixed.tolist(),
            "decode_only_cells": {key: a.tolist() for key, a in zip(state.DECODE_ONLY_KEYS, self._decode_only)},
            "scale_pending": self._scale_pending, "rng": state.jsonable_rng_state(self._rng.bit_generator.state),
            "prev_k": self.prev_k, "prev_bucket": self.prev_bucket, "held": self._held, "epoch": self._epoch,
            "candidate_bucket": self._candidate_bucket, "candidate_steps": self._candidate_steps,
            "outlier_run": self._outlier_run, **self.counters(),
        }

    def set_state(self, raw: dict) -> None:
        """Restore :meth:`get_state` output; a bad field raises ``PriorFormatError`` naming it."""
        s = state.read_state(raw, self.config)
        self.data, self._cell_prior_mean, self._weights = s["data"], s["cell_prior_mean"], s["weights"]
        self._weights_list = self._weights.tolist()
        self._prefill_price, self._scale_pending = s["prefill_price"], s["scale_pending"]
        self._rng.bit_generator.state = s["rng"]
        self.prev_k, self.prev_bucket, self._held, self._epoch = s["prev_k"], s["prev_bucket"], s["held"], s["epoch"]
        self._candidate_bucket, self._candidate_steps = s["candidate_bucket"], s["candidate_steps"]
        self._outlier_run = s["outlier_run"]
        self.steps, self.observations, self.switches = s["steps"], s["observations"], s["switches"]
        self.outliers, self.mixed_steps, self.k_counts = s["outliers"], s["mixed_steps"], s["k_counts"]
        self._pending.clear()
        self._decode_only = s["decode_only_cells"]
        self._set_prior_tau2(s["prior_tau2"], s["prior_tau2_mixed"])
        self._update_posterior_cache()
