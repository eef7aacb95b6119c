"""Exploration rules of the bandit governor under study, installed into this process.

    python experiments/oscillation_actions.py --variant front-loaded-looks --out /tmp/x
    python experiments/sweep_variant.py --variant relative-ridge+front-loaded-looks --out .cache/v

``likely-revisits`` is now the shipped rule (:mod:`banditk.governor.switching`); "the shipped
rule" below is the one before it, which explored only the leading K (docs/decisions.md).

``front-loaded-looks`` makes three changes to how the bandit governor explores, each
aimed at a cause of the simulator's oscillations after warm-up (results/oscillation-actions):

- **Every plausible K is a candidate.** The shipped rule explores only the K with the most
  wins against the incumbent; when that K is measured and may not be revisited yet, plausible
  Ks never measured wait until they happen to lead the draws, so a cold bucket's first looks
  trickle over thousands of steps. Here the K explored is the most winning one among those
  that may be explored: a first look at any plausible K the bucket does not know, else (when
  the bucket may revisit) a revisit of a plausible K known less than half as well as the
  incumbent.
- **A K the bucket played a look's worth of steps is looked at.** The cells count observations
  weighed by the clock's correlation, which a cell's early, still-moving mean inflates, so a K
  looked at once can fall back under ``explore_steps`` and be looked at again, unspaced. Here
  a first look needs the cell to hold fewer than ``explore_steps`` observations *and* the
  bucket to have decided that K on fewer than ``explore_steps`` decode steps; anything else is
  a revisit, spaced.
- **Revisits spaced by 1,000 steps** (``revisit_spacing``), where 500 were shipped: a revisit
  is two K changes, and the protocol allows two per 1,000 steps at stationary load.

Four more rules, each a subset or a variation of those changes:

- ``plausible-candidates``: the first change alone (no played gate, revisits spaced 500).
- ``odds-spaced-looks``: the first two changes, and revisits spaced by the challenger's odds:
  a K that beats the incumbent in at least :data:`LIKELY_BETTER` of the draws keeps the
  shipped ``revisit_spacing`` (a K that is probably better is found as fast as before, which
  on a noisy clock takes three or four revisits); any other plausible K waits twice as long.
- ``likely-revisits``: the first two changes, revisits at the shipped spacing, and only of a
  K that beats the incumbent in at least :data:`LIKELY_BETTER` of the draws: a K that is
  plausible but probably worse gets its first look and no more.
- ``effective-looks``: the first and the last change, the second replaced: a look holds until
  the K's cell has gained ``explore_steps`` *effective* observations (a step counts as
  :func:`banditk.governor.clock_weight.weight` observations, so a look lasts longer on a
  correlated clock, at most :data:`LOOK_CAP` times as long), and a K whose cell holds half a
  look of effective observations is looked at.

:func:`install` patches :func:`switching.choose` and three methods of
:class:`~banditk.governor.bandit.BanditGovernor`; forked workers inherit it. The functions here
are the change as it would land in ``governor/switching.py`` and ``governor/bandit.py`` (the
played counts would be a field of the governor's state and of its snapshots).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.governor import bandit, switching

#: The exploration rules here, by variant name.
RULES = (
    "front-loaded-looks",
    "effective-looks",
    "plausible-candidates",
    "odds-spaced-looks",
    "likely-revisits",
)
#: The defaults each rule would ship with.
WIRED_DEFAULTS = {
    "front-loaded-looks": {"revisit_spacing": 1000},
    "effective-looks": {"revisit_spacing": 1000},
    "plausible-candidates": {},
    "odds-spaced-looks": {},
    "likely-revisits": {},
}
#: ``odds-spaced-looks``: a K that beats the incumbent in at least this share of the draws is
#: more likely better than not; its revisits keep the shipped spacing.
LIKELY_BETTER = 0.5

#: ``effective-looks``: a look lasts at most this many times ``explore_steps`` effective observations' steps.
LOOK_CAP = 4.0

# The decode steps the deciding bucket has played at each K, set for the decode decision that
# is being made (None for a decision next to a prompt chunk, whose cells count steps already),
# and the observations one decode step is worth on the clock then.
_played: np.ndarray | None = None
_step_weight = 1.0
# ``odds-spaced-looks``: the deciding bucket's steps since it last explored, and the spacing.
_since, _spacing = 0, 500
# ``plausible-candidates``: the first change alone (no played gate, the shipped spacing).
_candidates_only = False
# ``odds-spaced-looks``: the front-loaded rule with revisits spaced by the challenger's odds.
_odds_rule = False
# ``likely-revisits``: the front-loaded rule revisiting only Ks more likely better than not.
_likely_rule = False


def _wins(scores: np.ndarray, incumbent: int, confidence: float) -> tuple[np.ndarray, tuple[int, float] | None]:
    """The shipped rule's first steps, which every rule here keeps: each K's share of draws beating
    the incumbent, and the decision where no exploration is weighed (no incumbent yet, or a K
    surely better), else None."""
    if incumbent < 0:
        return np.zeros(scores.shape[-1]), (int(np.argmax(scores[0])), 0.0)
    wins = np.mean(scores > scores[:, incumbent : incumbent + 1], axis=0)
    wins[incumbent] = -1.0
    wins[np.isneginf(scores[0])] = -1.0  # a K outside the arm set is never a challenger
    sure = wins >= confidence
    if sure.any():  # several Ks beat a poor incumbent in every draw: their wins tie, their scores do not
        return wins, (int(np.argmax(np.where(sure, scores.mean(axis=0), -np.inf))), 0.0)
    return wins, None


def choose(
    scores: np.ndarray,
    incumbent: int,
    cell_n: np.ndarray,
    explore_steps: float,
    confidence: float,
    may_revisit: bool = True,
    *_wired: object,  # the shipped choose's played counts and odds, which these rules replace
) -> tuple[int, float]:
    """:func:`switching.choose` with every plausible K a candidate for exploration.

    >>> s = np.array([[3.0, 2.0, 2.5], [3.0, 2.0, 1.0], [3.0, 2.0, 3.0], [1.0, 2.0, 1.0]])
    >>> choose(s, 1, np.array([40.0, 90.0, 0.0]), 32, 0.9, False)  # K=0 leads, may not be revisited; K=2 never looked at
    (2, 32.0)
    """
    wins, decided = _wins(scores, incumbent, confidence)
    if decided is not None:
        return decided
    if _odds_rule and _played is not None:  # a K less likely better than not waits twice as long
        may_revisit = np.where(wins >= LIKELY_BETTER, may_revisit, may_revisit and _since >= 2 * _spacing)
    if _likely_rule and _played is not None:  # only a K more likely better than not is revisited
        may_revisit = may_revisit & (wins >= LIKELY_BETTER)
    gated = _played is not None and not _candidates_only
    known = np.maximum(cell_n, _played) if gated else cell_n
    plausible = wins >= 1.0 - confidence
    first = plausible & (known < explore_steps)
    revisit = plausible & ~first & may_revisit & (2.0 * cell_n < cell_n[incumbent])
    eligible = first | revisit
    if not eligible.any():
        return incumbent, 0.0
    k = int(np.argmax(np.where(eligible, wins, -np.inf)))
    return k, max(float(explore_steps), float(cell_n[k]))


def choose_effective(
    scores: np.ndarray,
    incumbent: int,
    cell_n: np.ndarray,
    explore_steps: float,
    confidence: float,
    may_revisit: bool = True,
    *_wired: object,  # the shipped choose's played counts and odds, which these rules replace
) -> tuple[int, float]:
    """``effective-looks``: :func:`choose`'s candidates, with looks counted in effective
    observations (``cell_n`` holds steps, the cells' observations over the step weight).

    >>> s = np.array([[3.0, 2.0, 2.5], [3.0, 2.0, 1.0], [3.0, 2.0, 3.0], [1.0, 2.0, 1.0]])
    >>> choose_effective(s, 1, np.array([40.0, 90.0, 0.0]), 32, 0.9, False)  # weight 1: a 32-step look
    (2, 32.0)
    """
    wins, decided = _wins(scores, incumbent, confidence)
    if decided is not None:
        return decided
    w = _step_weight if _played is not None else 1.0  # next to a chunk the cells count steps
    n = cell_n * w
    plausible = wins >= 1.0 - confidence
    first = plausible & (n < 0.5 * explore_steps)
    revisit = plausible & ~first & may_revisit & (2.0 * n < n[incumbent])
    eligible = first | revisit
    if not eligible.any():
        return incumbent, 0.0
    k = int(np.argmax(np.where(eligible, wins, -np.inf)))
    look = max(float(explore_steps), float(n[k]))
    return k, min(look / w, LOOK_CAP * look)


def _explored_at(gov) -> np.ndarray:
    """The step at which each bucket last started an exploration (long ago: never)."""
    if not hasattr(gov, "explored_at"):
        gov.explored_at = np.full(gov.config.num_buckets, -(10**9), dtype=np.int64)
    return gov.explored_at


def _played_counts(gov) -> np.ndarray:
    if not hasattr(gov, "played_steps"):
        gov.played_steps = np.zeros((gov.config.num_buckets, gov.config.k_max + 1))
    return gov.played_steps


def install(with_defaults: bool = False, rule: str = "front-loaded-looks") -> None:
    """Make the bandit governor explore by :func:`choose` (``rule`` "front-loaded-looks",
    counting the decode steps each bucket plays at each K) or :func:`choose_effective`
    ("effective-looks"); with :data:`WIRED_DEFAULTS` in place of the shipped defaults if asked."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    cls = bandit.BanditGovernor
    if getattr(cls, "_front_loaded", False):
        return
    init, decode_scores, chunk_step, decide = cls.__init__, cls._decode_scores, cls._select_chunk_step, cls._decide
    shipped = GovernorConfig.__dataclass_fields__

    def __init__(self, config, prior=None):
        if with_defaults:
            same = {k: v for k, v in WIRED_DEFAULTS[rule].items() if getattr(config, k) == shipped[k].default}
            config = dataclasses.replace(config, **same)
        init(self, config, prior)
        _played_counts(self)

    def _decode_scores(self, bucket, batch, kvf, incumbent, draws=None):
        global _played, _step_weight, _since, _spacing
        _played = _played_counts(self)[bucket]
        _step_weight = self.posterior.step_weight()
        # the steps since the bucket last explored: the governor's own count stops at the spacing
        _since, _spacing = self.steps - _explored_at(self)[bucket], self.config.revisit_spacing
        return decode_scores(self, bucket, batch, kvf, incumbent, draws)

    def _select_chunk_step(self, context, prefill, bucket, kv_pressed):
        global _played
        _played = None
        return chunk_step(self, context, prefill, bucket, kv_pressed)

    def _decide(self, k, bucket, batch, scores=None, chunk=False):
        if bucket >= 0 and not chunk:
            _played_counts(self)[bucket, k] += 1.0
            if self.bucket_since_explore[bucket] == 0:  # an exploration starts at this step
                _explored_at(self)[bucket] = self.steps
        return decide(self, k, bucket, batch, scores, chunk)

    cls.__init__, cls._decode_scores, cls._select_chunk_step, cls._decide = (
        __init__,
        _decode_scores,
        _select_chunk_step,
        _decide,
    )
    cls._front_loaded = True
    global _candidates_only, _odds_rule, _likely_rule
    _candidates_only = rule == "plausible-candidates"
    _odds_rule, _likely_rule = rule == "odds-spaced-looks", rule == "likely-revisits"
    switching.choose = choose_effective if rule == "effective-looks" else choose
