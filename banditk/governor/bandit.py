"""The bandit governor: Thompson sampling over K on a posterior of goodput.

Each step: find the bucket B is in (hysteresis, dwell); inside a decision epoch keep K;
else draw E(K) and step times from the posterior, score every K, the bucket's current K
raised by the switching penalty, and leave that K only to explore a K the bucket barely
knows (a revisit, of a K more likely better than not, at most once per ``revisit_spacing``
steps of the bucket) or when the draws are confident (:mod:`.switching`). Steps next to a prompt chunk get their own K by
the same rules, one K per run of such steps (:meth:`BanditGovernor._select_chunk_step`). The
posterior is :mod:`.posterior`; the rules are this package's other modules.
"""

from __future__ import annotations

import numpy as np

from banditk.core.buckets import bucket_with_hysteresis, cell_label, debounced
from banditk.core.config import GovernorConfig
from banditk.core.errors import (
    DrafterClassMismatchError,
    InvalidContextError,
    InvalidDecisionError,
    InvalidOutcomeError,
)
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor import epochs, scoring, state, summary, switching
from banditk.governor.posterior import GoodputPosterior
from banditk.governor.thompson import draw_tokens_and_times
from banditk.io.prior import Prior
from banditk.posterior.acceptance import expected_tokens

#: Live steps next to a chunk the decode K needs in its cell before such a step may leave it.
CHUNK_LEARN_STEPS = 3.0
#: Steps next to a chunk a K's cell there needs before it stops being explored when plausible.
CHUNK_EXPLORE_STEPS = 8.0
#: Memory of the share of steps that ran a chunk, and of its size: about 1 / (1 - decay) steps.
CHUNK_SHARE_DECAY = 0.99
#: A step with no chunk announced is expected to run one once that share reaches ON, and no
#: longer once it falls below OFF: a share near 1/2 would otherwise flip the expectation, and
#: with it K, every few steps.
CHUNK_SHARE_ON, CHUNK_SHARE_OFF = 0.6, 0.4
#: Posterior draws per decision: the first is the Thompson draw, all of them weigh a switch
#: (:mod:`.switching`) and the settling of the epoch.
SWITCH_DRAWS = 64


class BanditGovernor:
    """Thompson-sampling governor of speculative depth K.

    Args:
        config: hyperparameters.
        prior: optional prior of the same drafter class.

    Raises:
        DrafterClassMismatchError: the prior is of another drafter class.
        IncompatiblePriorError: the prior's K_max is smaller or its bucket edges differ.

    Examples:
        >>> from banditk.core.types import StepContext, StepOutcome
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
        self._posterior = GoodputPosterior(config, prior)
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        # Where the decision stands: K and bucket in play, epoch, bucket candidate.
        self.prev_k, self.prev_bucket = -1, -1
        self._held, self._epoch = 0, config.decision_interval
        self._candidate_bucket, self._candidate_steps = -1, 0
        self.steps = self.observations = self.switches = self.oscillations = self.mixed_steps = 0
        self.k_counts = np.zeros(config.k_max + 1, dtype=np.int64)
        self.bucket_k = np.full(config.num_buckets, -1, dtype=np.int64)
        self.bucket_epoch = np.full(config.num_buckets, config.decision_interval, dtype=np.int64)
        # Steps each bucket played since it last explored, up to revisit_spacing.
        self.bucket_since_explore = np.full(config.num_buckets, config.revisit_spacing, dtype=np.int64)
        # Decode steps each bucket decided at each K: a K played a look's worth is looked at.
        self.bucket_played = np.zeros((config.num_buckets, config.k_max + 1), dtype=np.int64)
        # Next to a prompt chunk: each bucket's K there, its revisit clock, an exploration in
        # progress (steps left, K, bucket).
        self.chunk_k = np.full(config.num_buckets, -1, dtype=np.int64)
        self.chunk_since_explore = np.full(config.num_buckets, config.revisit_spacing, dtype=np.int64)
        self.chunk_hold, self.chunk_explore_k, self.chunk_explore_bucket = 0, 0, -1
        self.chunk_run = 0  # steps of the current run of chunks so far
        # Share of recent steps that ran a chunk, and those chunks' usual size.
        self.running_chunk_share = self.running_chunk_size = 0.0
        self.expecting_chunks = False
        # The last decision, of either kind: its K and bucket, and whether it was next to a chunk.
        self.last_k, self.last_bucket, self.last_chunk = -1, -1, False
        # K outside config.k_set score -inf, so no decision, exploration or draw plays them.
        self.k_blocked = np.ones(config.k_max + 1, dtype=bool)
        self.k_blocked[list(config.k_set or range(config.k_max + 1))] = False

    @property
    def posterior(self) -> GoodputPosterior:
        """The posterior with every observed step credited (held steps only queue theirs)."""
        post = self._posterior
        if post.queued:
            post.settle()
        return post

    @property
    def prior(self) -> Prior | None:
        return self.posterior.prior

    @property
    def data(self):
        """The live sufficient statistics."""
        return self.posterior.data

    @property
    def outliers(self) -> int:
        return self.posterior.outliers

    # ---- the two calls -------------------------------------------------------------

    def select(self, context: StepContext) -> Decision:
        """Choose K for one scheduler step."""
        cfg = self.config
        if context.drafter_class != cfg.drafter_class:
            raise DrafterClassMismatchError(
                f"context.drafter_class={context.drafter_class!r} but this governor learns {cfg.drafter_class!r}."
            )
        if context.k_max != cfg.k_max:
            raise InvalidContextError(
                f"context.k_max={context.k_max} but the governor was built for k_max={cfg.k_max}."
            )
        self.steps += 1
        batch = context.num_decoding
        if batch == 0:  # nothing decodes: K is moot; keep it and learn nothing
            return Decision(k=max(self.prev_k, 0), bucket=-1, num_decoding=0, step_id=self.steps)
        bucket = self._consulted_cell(batch, context.context_tokens)
        spacing = cfg.revisit_spacing
        for since in (self.bucket_since_explore, self.chunk_since_explore):
            steps = since.item(bucket)  # min(steps + 1, spacing), written only when it changes
            if steps != spacing:
                since[bucket] = steps + 1 if steps < spacing else spacing
        kv_pressed = context.kv_usage > cfg.kv_pressure_threshold and cfg.kv_pressure_weight > 0
        prefill = self._expected_chunk(context)
        if prefill and self.prev_k >= 0 and not self.posterior.scale_pending:
            # A run of chunks goes on where the step before, in this bucket, ran next to one:
            # decided so, or a prompt that arrived after its K was fixed. Where every step is
            # next to a chunk (many prompts arriving) the run would never end and its K never
            # learn: a run decides again after the longest decode epoch.
            before = self.last_chunk or context.running_prefill_tokens > 0
            run = self.chunk_run + 1 if self.last_chunk else 1
            if before and self.last_bucket == bucket and self.last_k >= 0 and run <= cfg.max_decision_interval:
                k, self.chunk_run = self.last_k, run
                if self.chunk_hold > 0 and k == self.chunk_explore_k and bucket == self.chunk_explore_bucket:
                    self.chunk_hold -= 1  # a step of the exploration; another bucket's run is not
            else:
                k, self.chunk_run = self._select_chunk_step(context, prefill, bucket, kv_pressed), 1
            self.mixed_steps += 1
            return self._decide(k, bucket, batch, chunk=True)
        same_bucket = bucket == self.prev_bucket
        if epochs.holds(self._held, self._epoch, same_bucket, kv_pressed):
            self._held += 1
            return self._decide(self.prev_k, bucket, batch)
        self._held = 0
        # Each bucket keeps its own K and epoch: a visit to a neighbouring bucket neither
        # carries that bucket's K back nor restarts this one's settling.
        incumbent = int(self.bucket_k[bucket]) if self.bucket_k[bucket] >= 0 else self.prev_k
        epoch = self._epoch if same_bucket else int(self.bucket_epoch[bucket])
        kvf = self._kv_factor(context.kv_usage) if kv_pressed else 1.0
        scores = self._decode_scores(bucket, batch, kvf, incumbent, SWITCH_DRAWS)
        post = self.posterior
        # Observations in steps of this clock's current worth, so explore_steps counts steps.
        steps_held = (post.data.cell_n[bucket] + post.prior_stats.cell_n[bucket]) / post.step_weight()
        may_revisit = self.bucket_since_explore[bucket] >= cfg.revisit_spacing
        k, explore = switching.choose(
            scores,
            incumbent,
            steps_held,
            cfg.explore_steps,
            cfg.switch_confidence,
            may_revisit,
            self.bucket_played[bucket],
            switching.REVISIT_ODDS,
        )
        if self.prev_k >= 0 and k != self.prev_k:
            self.switches += 1
        if incumbent >= 0 and k != incumbent:
            self.oscillations += 1
        if explore:
            epoch = max(int(np.ceil(explore)), cfg.decision_interval)
            self.bucket_since_explore[bucket] = 0
        else:
            kept = k == incumbent and not kv_pressed
            best_share = float(np.mean(np.argmax(scores, axis=-1) == k))
            epoch = epochs.next_length(
                min(epoch, cfg.max_decision_interval),
                kept,
                lambda: best_share >= cfg.settle_confidence,
                cfg.decision_interval,
                cfg.max_decision_interval,
            )
        # An exploration visits k: the bucket's incumbent stays what it was, so the decision
        # after it compares every K with that incumbent again.
        self._epoch = self.bucket_epoch[bucket] = epoch
        if not explore:
            self.bucket_k[bucket] = k
        self.prev_k, self.prev_bucket = k, bucket
        return self._decide(k, bucket, batch, scores[0])

    def forget_blocked_k(self) -> None:
        """Drop incumbents outside ``config.k_set`` (state restored from a run with another arm
        set): such a bucket decides afresh, decode-only and next to chunks, and the next step
        decides instead of holding."""
        if self.prev_k >= 0 and self.k_blocked[self.prev_k]:
            self.prev_k, self.prev_bucket = -1, -1
        for incumbents in (self.bucket_k, self.chunk_k):
            incumbents[(incumbents >= 0) & self.k_blocked[np.maximum(incumbents, 0)]] = -1
        if self.k_blocked[self.chunk_explore_k]:
            self.chunk_hold = 0
        if self.last_k >= 0 and self.k_blocked[self.last_k]:
            self.last_k, self.last_bucket, self.last_chunk = -1, -1, False

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
        most = outcome.max_drafted
        if most > cfg.k_max:
            raise InvalidOutcomeError(f"outcome has a request with {most} drafts, above k_max={cfg.k_max}.")
        self.observations += 1
        # Credited when the posterior is next read, so that a held step does no arithmetic.
        self._posterior.queue(
            k,
            bucket,
            decision.num_decoding,
            min(outcome.step_duration_s, cfg.max_step_s),
            outcome.prefill_tokens,
            outcome,
            self.observations % cfg.regression_refresh == 0,
        )

    # ---- select's steps ------------------------------------------------------------

    def _decide(
        self, k: int, bucket: int, batch: int, scores: np.ndarray | None = None, chunk: bool = False
    ) -> Decision:
        self.k_counts[k] += 1
        if bucket >= 0 and not chunk:
            self.bucket_played[bucket, k] += 1
        self.last_k, self.last_bucket, self.last_chunk = k, bucket, chunk
        sampled = () if scores is None else tuple(scores.tolist())
        return Decision(k=k, bucket=bucket, num_decoding=batch, step_id=self.steps, sampled_goodput=sampled)

    def _consulted_cell(self, batch: int, context_tokens: int) -> int:
        """The cell of B's bucket and of the mean context's bucket, each with hysteresis,
        moved to only after ``bucket_dwell`` steps there."""
        cfg, nc, prev = self.config, self.config.num_context_buckets, self.prev_bucket
        prev_b, prev_c = divmod(prev, nc) if prev >= 0 else (-1, -1)
        raw = bucket_with_hysteresis(cfg.bucket_edges, batch, prev_b, cfg.bucket_hysteresis) * nc
        if nc > 1:
            mean_context = context_tokens // batch
            raw += bucket_with_hysteresis(cfg.context_edges, mean_context, prev_c, cfg.bucket_hysteresis)
        out, self._candidate_bucket, self._candidate_steps = debounced(
            raw, prev, self._candidate_bucket, self._candidate_steps, cfg.bucket_dwell
        )
        return out

    def _kv_factor(self, kv_usage: float) -> np.ndarray:
        cfg = self.config
        return scoring.kv_factor(kv_usage, cfg.kv_pressure_threshold, cfg.kv_pressure_weight, cfg.k_max)

    def _decode_scores(self, bucket: int, batch: int, kvf, incumbent: int, draws: int | None = None) -> np.ndarray:
        """Thompson scores of every K for a decode-only step (one draw, or ``draws`` rows),
        ``incumbent`` carrying the switching bonus."""
        tokens, t = self.posterior.draw(self._rng, bucket, batch, draws)
        scores = scoring.decode_scores(tokens * batch * kvf, t, incumbent, self.config.switch_penalty)
        scores[..., self.k_blocked] = -np.inf
        return scores

    def _expected_chunk(self, context: StepContext) -> int:
        """Prompt tokens the step is expected to compute: the announced chunk, else, where most
        recent steps ran a chunk (prompts arriving every step, each scheduled at once and so
        never announced), the usual size of those chunks."""
        ran = context.running_prefill_tokens
        self.running_chunk_share = CHUNK_SHARE_DECAY * self.running_chunk_share + (1.0 - CHUNK_SHARE_DECAY) * (ran > 0)
        if ran > 0:
            size = self.running_chunk_size
            self.running_chunk_size = ran if size == 0.0 else CHUNK_SHARE_DECAY * size + (1.0 - CHUNK_SHARE_DECAY) * ran
        if self.running_chunk_share >= CHUNK_SHARE_ON:
            self.expecting_chunks = True
        elif self.running_chunk_share < CHUNK_SHARE_OFF:
            self.expecting_chunks = False
        if context.prefill_tokens or not self.expecting_chunks:
            return context.prefill_tokens
        return int(self.running_chunk_size)

    def _select_chunk_step(self, context: StepContext, prefill: int, bucket: int, kv_pressed: bool) -> int:
        """K of the run of steps next to a prompt chunk that starts at this step.

        Such steps have their own incumbent per bucket, first the decode K, kept until its
        cell next to chunks holds ``CHUNK_LEARN_STEPS`` live steps. Then each run's first step
        decides as a decode epoch does (:func:`.switching.choose`) on draws of the score
        B E(K) - G* t_chunk(K, P): switch when sure, explore a K that may be better and whose
        cell there is thinner than ``CHUNK_EXPLORE_STEPS`` or half the incumbent's (held over
        the next such steps until its cell has doubled; revisits spaced as the decode epochs'
        are, on a clock of their own), else keep the incumbent. The run keeps that K: a
        prompt split into chunks of different sizes does not flip K from chunk to chunk. The
        decode K, its epoch and the switch count are left alone.
        """
        cfg, batch, post = self.config, context.num_decoding, self.posterior
        if self.chunk_hold > 0 and self.chunk_explore_bucket == bucket:  # an exploration goes on
            self.chunk_hold -= 1
            return self.chunk_explore_k
        self.chunk_hold = 0  # an exploration in another bucket ends when this one decides
        incumbent = int(self.chunk_k[bucket]) if self.chunk_k[bucket] >= 0 else self.prev_k
        self.chunk_k[bucket] = incumbent
        if post.data.mix_n[bucket, incumbent] < CHUNK_LEARN_STEPS:
            return incumbent
        m, n0, a, b = post.mixed_step_posterior(bucket, prefill, batch)
        kvf = self._kv_factor(context.kv_usage) if kv_pressed else 1.0
        mean_tokens = expected_tokens(post.acc_a / (post.acc_a + post.acc_b)) * batch * kvf
        rate = float(np.max(mean_tokens / (post.post_m[bucket] * post.batch_ratio(batch, bucket))))
        e_tokens, t = draw_tokens_and_times(self._rng, post.acc_a, post.acc_b, m, n0, a, b, SWITCH_DRAWS)
        drawn = scoring.chunk_step_scores(e_tokens * batch * kvf, rate, t, incumbent, cfg.switch_penalty)
        drawn[..., self.k_blocked] = -np.inf
        cell_n = post.data.mix_n[bucket] + post.prior_stats.mix_n[bucket]
        may_revisit = self.chunk_since_explore[bucket] >= cfg.revisit_spacing
        k, explore = switching.choose(drawn, incumbent, cell_n, CHUNK_EXPLORE_STEPS, cfg.switch_confidence, may_revisit)
        if explore:
            self.chunk_explore_k, self.chunk_explore_bucket = k, bucket
            self.chunk_since_explore[bucket] = 0
            self.chunk_hold = int(np.ceil(explore)) - 1
        else:
            self.chunk_k[bucket] = k
        return k

    # ---- the posterior, read -------------------------------------------------------

    def acceptance_params(self) -> tuple[np.ndarray, np.ndarray]:
        """Beta(a, b) per position: Beta(1, 1) + prior + data."""
        return self.posterior.acc_a.copy(), self.posterior.acc_b.copy()

    def latency_params(self, bucket: int | slice = slice(None)):
        """Normal-Inverse-Gamma posterior (m, k, a, b) of the mean step time per (bucket, K)."""
        return self.posterior.latency_params(bucket)

    def mixed_step_posterior(self, bucket: int, prefill_tokens: int, batch: int):
        """Posterior (m, k, a, b) per K of a step at ``batch`` next to a chunk of ``prefill_tokens``."""
        return self.posterior.mixed_step_posterior(bucket, prefill_tokens, batch)

    def latency_weights(self) -> np.ndarray:
        """Current posterior-mean weights of the parametric latency model."""
        return self.posterior.weights.copy()

    # ---- reporting -----------------------------------------------------------------

    def mean_goodput(self) -> np.ndarray:
        """Posterior-mean goodput (tokens/s) per (bucket, K) at each bucket's representative B."""
        post = self.posterior
        return summary.mean_goodput(post.acc_a, post.acc_b, post.latency_params()[0], post.rep_batch)

    def prob_best(self, samples: int = 2000, seed: int = 0) -> np.ndarray:
        """Monte-Carlo P(K is best) per (bucket, K), from a separate generator (state untouched)."""
        post = self.posterior
        return summary.prob_best(post.acc_a, post.acc_b, *post.latency_params(), samples=samples, seed=seed)

    def state_line(self) -> str:
        """One line for a server log: K histogram, acceptance per position, best K per visited bucket."""
        post = self.posterior
        seen = np.flatnonzero((post.data.cell_n + post.prior_stats.cell_n).sum(axis=1) > 0)
        return summary.state_line(
            self.steps,
            self.k_counts,
            post.acc_a,
            post.acc_b,
            self.switches,
            self.mean_goodput(),
            seen,
            [
                cell_label(self.config.bucket_edges, self.config.context_edges, i)
                for i in range(self.config.num_buckets)
            ],
        )

    def counters(self) -> dict:
        return {
            "steps": self.steps,
            "observations": self.observations,
            "switches": self.switches,
            "oscillations": self.oscillations,
            "outliers": self.outliers,
            "mixed_steps": self.mixed_steps,
            "k_counts": self.k_counts.tolist(),
        }

    # ---- state (for snapshots; its schema is governor.state.SCHEMA) ----------------

    def get_state(self) -> dict:
        """Everything that changes as the governor runs, as JSON types."""
        return state.dump(self)

    def set_state(self, raw: dict) -> None:
        """Restore :meth:`get_state` output; a bad field raises ``PriorFormatError`` naming it."""
        state.restore(self, raw)
