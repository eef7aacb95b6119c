"""Decision epochs: how many steps a sampled K is held before the posterior is drawn again.

Holding turns one sampled advantage into several observations instead of a switch and a
switch back. A decision that keeps K in the same bucket, with that K the posterior's clear
favourite, doubles the next epoch up to a ceiling (lazy Thompson sampling, the epoch
schedule of switching-cost bandits); a switch, a new bucket or KV pressure goes back to the
shortest epoch, so a change of load is answered at once.
"""

from __future__ import annotations

from collections.abc import Callable


def holds(held: int, length: int, same_bucket: bool, kv_pressed: bool) -> bool:
    """True while the step is inside the current epoch (``held`` steps of ``length`` so far).

    >>> holds(0, 8, True, False), holds(7, 8, True, False), holds(0, 8, False, False)
    (True, False, False)
    """
    return same_bucket and held < length - 1 and not kv_pressed


def next_length(length: int, kept: bool, settled: Callable[[], bool], base: int, ceiling: int) -> int:
    """Length of the epoch that starts after a decision.

    ``kept``: the decision kept K in the same bucket without KV pressure. ``settled`` is asked
    only when a kept epoch could double: it draws from the posterior.

    >>> next_length(8, True, lambda: True, 8, 32), next_length(32, True, lambda: True, 8, 32)
    (16, 32)
    >>> next_length(16, True, lambda: False, 8, 32), next_length(16, False, lambda: True, 8, 32)
    (16, 8)
    """
    if not kept:
        return base
    if length < ceiling and settled():
        return min(2 * length, ceiling)
    return length
