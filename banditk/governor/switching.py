"""When a decision leaves the current K: switch when sure, explore while unsure, else stay.

At a decision every K is scored on the same posterior draws, the incumbent's score carrying
its switching bonus; ``wins`` is, per K, the share of draws in which it beats the incumbent.
The challenger is the K with the most wins, or where several beat the incumbent surely,
the one of them with the best mean score. Then:

- ``wins`` >= ``confidence``: switch to it;
- ``wins`` >= 1 - ``confidence`` (it may be better) and its cell holds fewer than
  ``explore_steps`` observations (a first look) or, when the bucket may revisit, under half
  the incumbent's: explore it, held long enough to double what its cell holds (at least
  ``explore_steps``), so each visit measures it better than all earlier ones together, and
  a K stops being explored once it is decided either way or known half as well as the
  incumbent, whose discounted cell is bounded: exploration is front-loaded and finite. The
  caller spaces revisits, which on a noisy clock would otherwise come every few hundred
  steps while near-tied Ks stay plausible;
- otherwise keep the incumbent. On a noisy clock a single draw of two known, near-tied Ks
  favours each in turn; the share of draws does not.

The first decision, with no incumbent, plays the first draw's best K (Thompson sampling).
"""

from __future__ import annotations

import numpy as np


def choose(
    scores: np.ndarray,
    incumbent: int,
    cell_n: np.ndarray,
    explore_steps: float,
    confidence: float,
    may_revisit: bool = True,
) -> tuple[int, float]:
    """(K to play, observations to hold it for as an exploration, 0 if it is not one) from
    ``scores`` of shape (draws, K_max + 1).

    ``incumbent`` is -1 when nothing is in play yet; ``cell_n`` holds the observations per K
    of the bucket's cells; ``may_revisit`` False allows first looks only.

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
    """
    if incumbent < 0:
        return int(np.argmax(scores[0])), 0.0
    wins = np.mean(scores > scores[:, incumbent : incumbent + 1], axis=0)
    wins[incumbent] = -1.0
    wins[np.isneginf(scores[0])] = -1.0  # a K outside the arm set is never a challenger
    sure = wins >= confidence
    # Several Ks beat a poor incumbent in every draw: their wins tie, their scores do not.
    challenger = int(np.argmax(np.where(sure, scores.mean(axis=0), -np.inf))) if sure.any() else int(np.argmax(wins))
    share, n = float(wins[challenger]), float(cell_n[challenger])
    if share >= confidence:
        return challenger, 0.0
    if share >= 1.0 - confidence and (n < explore_steps or (may_revisit and 2.0 * n < cell_n[incumbent])):
        return challenger, max(float(explore_steps), n)
    return incumbent, 0.0
