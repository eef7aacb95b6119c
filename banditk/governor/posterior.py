"""The posterior of goodput for one drafter class: acceptance Betas and step-time cells.

It holds the prior (as loaded and as weighed against live data), the live statistics and
the cached posterior parameters, and credits each verified step to them. The decision rule
that reads it is :class:`banditk.governor.bandit.BanditGovernor`.
"""

from __future__ import annotations

import math

import numpy as np

from banditk.core.buckets import representative_batch
from banditk.core.config import GovernorConfig
from banditk.governor import chunk_cells, clock_weight, latency_fit, outliers
from banditk.governor.prior_weighing import PriorWeigher, fit_prior
from banditk.governor.thompson import draw_tokens_and_times
from banditk.io.prior import Prior
from banditk.posterior import latency_model, nig
from banditk.posterior.stats import SufficientStats

#: Shape a0 of the cells' inverse-gamma noise prior: 2 is the weakest with a finite mean,
#: so the prior noise guess (latency_cv * mean) is its mean.
NOISE_SHAPE = 2.0
#: Step durations below this carry no information (no forward pass is that fast).
MIN_OBSERVED_STEP_S = 1e-6
#: Taking a chunk's price out of a step never leaves less than this share of its decode time.
PREFILL_FLOOR = 0.3
#: Queued steps credited at once when nothing reads the posterior for this long (a replay
#: that only observes): memory stays bounded, and crediting early changes nothing.
MAX_QUEUED = 256


class GoodputPosterior:
    """Posterior of acceptance per position and of step time per (bucket, K)."""

    def __init__(self, config: GovernorConfig, prior: Prior | None) -> None:
        self.config = config
        k_max, nb = config.k_max, config.num_buckets
        self.prior = prior
        self.prior_loaded = SufficientStats.zeros(k_max, nb) if prior is None else fit_prior(config, prior)
        self._weigher = PriorWeigher(self.prior_loaded)
        self._prior_weights = (
            None if prior is None or prior.latency_weights is None else np.array(prior.latency_weights, dtype=float)
        )
        self.prior_stats = self.prior_loaded
        self.prior_tau2 = self.prior_tau2_mixed = np.zeros(nb)
        self.data = SufficientStats.zeros(k_max, nb)
        # Per (bucket, K): weight, sum and sum of squares of the decode-only steps, the like
        # of the prior's cells, against which they are weighed.
        self.decode_only = tuple(np.zeros((nb, k_max + 1)) for _ in range(3))
        # A cell's representative B is its batch bucket's: the latency model has no context term,
        # each context bucket's cells learn what context adds.
        nc = config.num_context_buckets
        self.rep_batch = np.array([representative_batch(config.bucket_edges, i // nc) for i in range(nb)])
        self._design = np.stack([latency_model.features(b, np.arange(k_max + 1)) for b in self.rep_batch])
        self._model_prior_precision = latency_fit.prior_precision(self._design, config.model_prior_strength)
        self._k_plus_1 = np.arange(k_max + 1) + 1.0
        self._drafts = np.maximum(np.arange(k_max + 1), 1).astype(float)
        self.cell_prior_mean = np.zeros((nb, k_max + 1))
        # (B, K, t, weight) observed since the regression was last brought up to date.
        self.pending: list[tuple[float, int, float, float]] = []
        self.outliers = self.outlier_run = 0
        # The clock's lag-1 correlation (:mod:`.clock_weight`): sums, pairs, the last
        # decode-only step's cell and residual.
        self.clock = {"sxy": 0.0, "sxx": 0.0, "pairs": 0.0, "cell": None, "resid": None}
        # Verified steps not yet credited: a held step only queues its outcome, and the next
        # reader (a decision, a snapshot, a report) credits them in order (:meth:`settle`).
        self.queued: list[tuple] = []
        self.refresh()

    # ---- reading ------------------------------------------------------------------

    def draw(self, rng: np.random.Generator, bucket: int, batch: int, draws: int | None = None):
        """Thompson draws of E(K) and of the step time at ``batch`` per K."""
        tokens, t = draw_tokens_and_times(
            rng,
            self.acc_a,
            self.acc_b,
            self.post_m[bucket],
            self.post_k[bucket],
            self.post_a[bucket],
            self.post_b[bucket],
            draws,
        )
        return tokens, t * self.batch_ratio(batch, bucket)

    def batch_ratio(self, batch: int, bucket: int, k: int | None = None):
        """Model time at ``batch`` over that at the bucket's representative B, per K or for one K."""
        if self.scale_pending:
            return 1.0
        if k is None:
            model = latency_model.step_times(self._weights_list, batch, self._k_plus_1, self._drafts)
            return latency_fit.batch_ratio(model, self.cell_prior_mean[bucket])
        return latency_fit.batch_ratio(
            latency_model.step_time(self._weights_list, batch, k), self.cell_prior_mean[bucket, k]
        )

    def latency_params(self, bucket: int | slice = slice(None)):
        """Normal-Inverse-Gamma posterior (m, k, a, b) of the mean step time per (bucket, K)."""
        p, d, cfg = self.prior_stats, self.data, self.config
        m0 = self.cell_prior_mean[bucket]
        return nig.posterior(
            m0,
            cfg.cell_prior_count,
            NOISE_SHAPE,
            NOISE_SHAPE * (cfg.latency_cv * m0) ** 2,
            p.cell_n[bucket] + d.cell_n[bucket],
            p.cell_sum[bucket] + d.cell_sum[bucket],
            p.cell_sumsq[bucket] + d.cell_sumsq[bucket],
        )

    def mixed_step_posterior(self, bucket: int, prefill_tokens: int, batch: int):
        """Posterior (m, k, a, b) per K of a step at ``batch`` next to a chunk of ``prefill_tokens``."""
        decode_s = self.post_m[bucket] * self.batch_ratio(batch, bucket)
        return chunk_cells.chunk_step_posterior(
            self.prior_stats,
            self.data,
            bucket,
            prefill_tokens,
            decode_s,
            self.prefill_price,
            NOISE_SHAPE,
            self.config.latency_cv,
        )

    # ---- learning -----------------------------------------------------------------

    def queue(self, k: int, bucket: int, batch: int, t: float, prefill: int, outcome, refresh: bool) -> None:
        """Hold one verified step for :meth:`settle`: its acceptance is ``outcome``'s
        (``refresh``: refit the latency model after it)."""
        self.queued.append((k, bucket, batch, t, prefill, outcome, refresh))
        if len(self.queued) >= MAX_QUEUED:
            self.settle()

    def settle(self) -> None:
        """Credit the queued steps in the order they came: the same arithmetic, so the same
        posterior, as crediting each when it came."""
        if not self.queued:
            return
        steps, self.queued = self.queued, []
        counts = _AcceptanceCounts(self)
        for k, bucket, batch, t, prefill, outcome, refresh in steps:
            counts.learn(*outcome.position_counts(self.config.k_max))
            self.learn_step_time(k, bucket, batch, t, prefill)
            if refresh:
                counts.store()
                self.refresh()
        counts.store()

    def learn_step_time(self, k: int, bucket: int, batch: int, t: float, prefill: int) -> None:
        """Credit a step's time: decode-only steps to the decode cells, steps next to a chunk to
        cells of their own, with their decode share priced for the regression. Cells are read
        and written one float at a time: numpy scalars cost several times more."""
        cfg, data, cell = self.config, self.data, (bucket, k)
        ratio = self.batch_ratio(batch, bucket, k)
        if t >= MIN_OBSERVED_STEP_S and not (prefill and self.prefill_price <= 0.0):
            n = data.cell_n.item(cell) + self.prior_stats.cell_n.item(cell)
            expected = None
            if not self.scale_pending:
                expected = self.post_m.item(cell) * ratio + self.prefill_price * prefill
            # Stalls are capped on decode-only steps, whose cell's mean is what they are judged
            # by; next to a chunk the expectation leans on the chunk's price, too loose for a cap.
            clip = cfg.outlier_factor if prefill else min(cfg.stall_clip, cfg.outlier_factor)
            credit, self.outlier_run = outliers.judge(t, expected, n, cfg.outlier_factor, clip, self.outlier_run)
            if credit is None:
                self.outliers += 1
                return  # credited to nothing: neither a cell nor the prefill price
            t = credit
        if t < MIN_OBSERVED_STEP_S:  # a broken clock, not a step
            return
        if prefill and not self.scale_pending:
            decode_s = self.post_m.item(cell) * ratio
            gm = cfg.model_discount
            data.prefill_rp = data.prefill_rp * gm + (t - decode_s) * prefill
            data.prefill_pp = data.prefill_pp * gm + float(prefill) * prefill
            chunk_cells.credit(data, bucket, k, t, prefill, cfg.discount)
            # The rest after the chunk's price is a decode time with the whole step's noise:
            # the regression weighs it by the decode share of the step, squared.
            rest = max(t - self.prefill_price * prefill, PREFILL_FLOOR * decode_s)
            self.pending.append((float(batch), k, rest, min(1.0, (decode_s / t) ** 2)))
            return
        # Cells are discounted windows at the bucket's representative B: the latency model
        # carries a step of another B in the bucket over, so B's spread is not read as noise.
        t_cell = t / ratio
        w = 1.0 if prefill else self._clock_weight(bucket, k, t_cell)
        g, wt, wtt = cfg.discount, w * t_cell, w * t_cell * t_cell
        n = data.cell_n.item(cell) * g + w
        s = data.cell_sum.item(cell) * g + wt
        ss = data.cell_sumsq.item(cell) * g + wtt
        data.cell_n[cell], data.cell_sum[cell], data.cell_sumsq[cell] = n, s, ss
        if not prefill:
            on, osum, osq = self.decode_only
            on[cell] = on.item(cell) * g + w
            osum[cell] = osum.item(cell) * g + wt
            osq[cell] = osq.item(cell) * g + wtt
        self._update_cell(bucket, k, n, s, ss)
        self.pending.append((float(batch), k, t, 1.0))
        if self.scale_pending:
            self.refresh()

    def step_weight(self) -> float:
        """Observations a decode-only step is worth on this clock now."""
        c = self.clock
        return clock_weight.weight(c["sxy"], c["sxx"], c["pairs"])

    def _clock_weight(self, bucket: int, k: int, t_cell: float) -> float:
        """Observations this decode-only step is worth, after folding its residual into the
        clock's correlation (pairs are consecutive steps of one cell)."""
        c, m = self.clock, float(self.post_m[bucket, k])
        resid = math.log(t_cell / m) if t_cell > 0.0 and m > 0.0 else None
        prev = c["resid"] if c["cell"] == (bucket, k) else None
        if resid is not None and prev is not None:
            gm = self.config.model_discount
            c["sxy"], c["sxx"] = clock_weight.update(c["sxy"], c["sxx"], prev, resid, gm)
            c["pairs"] = c["pairs"] * gm + 1.0
        c["cell"], c["resid"] = (bucket, k), resid
        return clock_weight.weight(c["sxy"], c["sxx"], c["pairs"])

    def fold_pending(self) -> None:
        """Credit the queued steps and bring the regression statistics up to date (exact:
        folding early changes nothing)."""
        self.settle()
        latency_fit.fold(self.data, self.pending, self.config.model_discount)

    def refresh(self) -> None:
        """Weigh the prior against the data, refit the latency model, reset the cells' prior means."""
        self.fold_pending()
        if self.prior is not None:
            self.set_prior_tau2(*self._weigher.calibration(self.data, self.decode_only))
        p, d = self.prior_stats, self.data
        xtx, xty, n = p.reg_xtx + d.reg_xtx, p.reg_xty + d.reg_xty, p.reg_n + d.reg_n
        w0 = latency_fit.prior_mean(self._prior_weights, xtx, xty, n)
        self.scale_pending = w0 is None
        if w0 is None:  # no prior weights and no data yet: every cell equal, scale unknown
            self.weights = np.zeros(len(latency_model.FEATURES))
            self.cell_prior_mean = np.full(self.cell_prior_mean.shape, 1e-2)
        else:
            self.weights = latency_model.solve(w0, self._model_prior_precision, xtx, xty)
            self.cell_prior_mean = latency_fit.cell_prior_means(self._design, self.weights, w0)
        self._weights_list = self.weights.tolist()
        rp, pp = p.prefill_rp + d.prefill_rp, p.prefill_pp + d.prefill_pp
        self.prefill_price = max(rp / pp, 0.0) if pp > 0 else 0.0
        self.update_cache()

    def set_prior_tau2(self, tau2: np.ndarray, tau2_mixed: np.ndarray) -> None:
        """Use the prior's cells at the weight they keep under these calibration variances."""
        self.prior_tau2, self.prior_tau2_mixed = tau2, tau2_mixed
        self.prior_stats = self._weigher.weighed(tau2, tau2_mixed)

    def set_model(self, weights: np.ndarray, cell_prior_mean: np.ndarray, prefill_price: float, scale_pending: bool):
        """Restore the latency model as a snapshot recorded it."""
        self.weights, self._weights_list = weights, weights.tolist()
        self.cell_prior_mean, self.prefill_price, self.scale_pending = cell_prior_mean, prefill_price, scale_pending

    def update_cache(self) -> None:
        """Recompute the cached posterior parameters of every cell and position."""
        p, d = self.prior_stats, self.data
        self.acc_a = 1.0 + p.acc_successes + d.acc_successes
        self.acc_b = 1.0 + p.acc_failures + d.acc_failures
        self.post_m, self.post_k, self.post_a, self.post_b = (np.array(v, dtype=float) for v in self.latency_params())

    def _update_cell(self, bucket: int, k: int, n: float, s: float, ss: float) -> None:
        """One cell's cached posterior from its live statistics (n, sum, sum of squares) just
        credited, in plain floats (this runs every step)."""
        p, cfg, cell = self.prior_stats, self.config, (bucket, k)
        m0 = self.cell_prior_mean.item(cell)
        out = nig.posterior_scalar(
            m0,
            cfg.cell_prior_count,
            NOISE_SHAPE,
            NOISE_SHAPE * (cfg.latency_cv * m0) ** 2,
            p.cell_n.item(cell) + n,
            p.cell_sum.item(cell) + s,
            p.cell_sumsq.item(cell) + ss,
        )
        self.post_m[cell], self.post_k[cell], self.post_a[cell], self.post_b[cell] = out


class _AcceptanceCounts:
    """The live acceptance counts as lists while queued steps are credited: a few positions a
    step, where numpy's per-element cost would be most of the work. :meth:`store` writes them
    back and recomputes the Betas (1 + prior + data, as :meth:`GoodputPosterior.update_cache`)."""

    def __init__(self, post: GoodputPosterior) -> None:
        self.post, self.gamma, self.k_max = post, post.config.discount, post.config.k_max
        self.successes = post.data.acc_successes.tolist()
        self.failures = post.data.acc_failures.tolist()
        self.changed = False

    def learn(self, succ: list[int], fail: list[int]) -> None:
        """One step's successes and failures per position."""
        s_, f_, gamma = self.successes, self.failures, self.gamma
        for i in range(self.k_max):
            if not succ[i] + fail[i]:
                break  # positions reached are a prefix
            s_[i] = s_[i] * gamma + succ[i]
            f_[i] = f_[i] * gamma + fail[i]
            self.changed = True

    def store(self) -> None:
        if not self.changed:
            return
        post, data, p = self.post, self.post.data, self.post.prior_stats
        data.acc_successes[:] = self.successes
        data.acc_failures[:] = self.failures
        post.acc_a = 1.0 + p.acc_successes + data.acc_successes
        post.acc_b = 1.0 + p.acc_failures + data.acc_failures
        self.changed = False
