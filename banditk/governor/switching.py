"""When a decision leaves the current K: switch when sure, explore while unsure, else stay.

At a decision every K is scored on the same posterior draws, the incumbent's score carrying
its switching bonus; ``wins`` is, per K, the share of draws in which it beats the incumbent.
Then:

- a K with ``wins`` >= ``confidence``: switch to it (where several beat a poor incumbent in
  every draw, the one of them with the best mean score);
- else explore, among the Ks that may be better (``wins`` >= 1 - ``confidence``), the one
  with the most wins that is either
  - a first look: its cell holds fewer than ``explore_steps`` observations and the bucket has
    decided it on fewer than ``explore_steps`` steps (``played``: a cell whose weighed count
    the clock's correlation took back under a look's worth is not looked at again), or
  - a revisit, when the bucket may revisit: a K known less than half as well as the incumbent
    that beats it in at least ``revisit_odds`` of the draws (more likely better than not, for
    decode steps: a K that is plausible but probably worse has had its first look);

  held long enough to double what its cell holds (at least ``explore_steps``), so each visit
  measures it better than all earlier ones together. Every plausible K is a candidate, not
  only the one that leads the draws: a plausible K never measured does not wait behind a
  measured one that may not be revisited yet, so a cold bucket's first looks come first.
  A K stops being explored once it is decided either way or known half as well as the
  incumbent, whose discounted cell is bounded: exploration is front-loaded and finite. The
  caller spaces revisits, which on a noisy clock would otherwise come every few hundred steps
  while near-tied Ks stay plausible;
- otherwise keep the incumbent. On a noisy clock a single draw of two known, near-tied Ks
  favours each in turn; the share of draws does not.

The first decision, with no incumbent, plays the first draw's best K (Thompson sampling).
"""

from __future__ import annotations

import numpy as np

#: Decode steps revisit a measured K only where it beats the incumbent in at least this share
#: of the draws (docs/decisions.md, thirty-third session).
REVISIT_ODDS = 0.5


def choose(
    scores: np.ndarray,
    incumbent: int,
    cell_n: np.ndarray,
    explore_steps: float,
    confidence: float,
    may_revisit: bool = True,
    played: np.ndarray | None = None,
    revisit_odds: float = 0.0,
) -> tuple[int, float]:
    """(K to play, observations to hold it for as an exploration, 0 if it is not one) from
    ``scores`` of shape (draws, K_max + 1).

    ``incumbent`` is -1 when nothing is in play yet; ``cell_n`` holds the observations per K
    of the bucket's cells; ``may_revisit`` False allows first looks only; ``played`` (optional)
    the steps the bucket decided each K; ``revisit_odds`` the wins a revisited K needs.

    >>> s = np.array([[1.0, 2.0], [3.0, 2.0], [3.0, 2.0], [3.0, 2.0]])
    >>> choose(s, -1, np.zeros(2), 32, 0.9), choose(s, 1, np.array([40.0, 40.0]), 32, 0.7)
    ((1, 0.0), (0, 0.0))
    >>> choose(s, 1, np.array([5.0, 40.0]), 32, 0.9)  # K=0 may be better and is barely known
    (0, 32.0)
    >>> choose(s, 1, np.array([50.0, 90.0]), 32, 0.9)  # known half as well as K=1, undecided: stay
    (1, 0.0)
    >>> choose(s, 1, np.array([40.0, 90.0]), 32, 0.9), choose(s, 1, np.array([40.0, 90.0]), 32, 0.9, False)
    ((0, 40.0), (1, 0.0))
    >>> choose(s, 0, np.array([40.0, 40.0]), 32, 0.9)  # K=1 wins a quarter of the draws
    (0, 0.0)
    >>> choose(np.array([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]), 0, np.full(3, 40.0), 32, 0.9)  # both beat K=0
    (2, 0.0)

    K=0 leads the draws but is measured and may not be revisited; K=2, plausible, never is:

    >>> s3 = np.array([[3.0, 2.0, 2.5], [3.0, 2.0, 1.0], [3.0, 2.0, 3.0], [1.0, 2.0, 1.0]])
    >>> choose(s3, 1, np.array([40.0, 90.0, 0.0]), 32, 0.9, False)
    (2, 32.0)
    >>> choose(s3, 1, np.array([40.0, 90.0, 20.0]), 32, 0.9, False, played=np.array([40, 90, 32]))  # looked at
    (1, 0.0)
    >>> choose(s3, 1, np.array([40.0, 90.0, 40.0]), 32, 0.9, True, revisit_odds=0.6)  # only K=0 is likely better
    (0, 40.0)
    >>> choose(s3, 1, np.array([40.0, 90.0, 40.0]), 32, 0.9, True, revisit_odds=0.8)
    (1, 0.0)
    """
    if incumbent < 0:
        return int(np.argmax(scores[0])), 0.0
    wins = np.mean(scores > scores[:, incumbent : incumbent + 1], axis=0)
    wins[incumbent] = -1.0
    wins[np.isneginf(scores[0])] = -1.0  # a K outside the arm set is never a challenger
    sure = wins >= confidence
    if sure.any():  # several Ks beat a poor incumbent in every draw: their wins tie, their scores do not
        return int(np.argmax(np.where(sure, scores.mean(axis=0), -np.inf))), 0.0
    known = cell_n if played is None else np.maximum(cell_n, played)
    plausible = wins >= 1.0 - confidence
    first = plausible & (known < explore_steps)
    revisit = plausible & ~first & may_revisit & (wins >= revisit_odds) & (2.0 * cell_n < cell_n[incumbent])
    eligible = first | revisit
    if not eligible.any():
        return incumbent, 0.0
    k = int(np.argmax(np.where(eligible, wins, -np.inf)))
    return k, max(float(explore_steps), float(cell_n[k]))
