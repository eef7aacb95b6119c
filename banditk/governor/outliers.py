"""Steps too slow to credit as they are: a clock jump, a GC or swap pause, a shape warming up.

A step far slower than its cell's posterior mean expects is not learnt from, unless such
steps have become the rule: after ``OUTLIER_RUN`` in a row the machine did get slower, and
they are credited again. A step that stalled less is credited at a cap: stalls (the OS, a
garbage collector, a client on the same cores) hit every K alike, so a few of them must not
decide between Ks; a run of them is a slower machine, credited as it is.
"""

from __future__ import annotations

#: Consecutive outlier steps after which slow steps are the new normal and are credited.
OUTLIER_RUN = 8
#: Observations a cell needs before its mean is trusted to call a step an outlier.
OUTLIER_MIN_N = 3.0


def judge(t: float, expected: float, cell_n: float, factor: float, clip: float, run: int) -> tuple[float | None, int]:
    """(the time to credit, None for an outlier; the run of slow steps after it) for a step of
    ``t`` seconds whose cell of weight ``cell_n`` expects ``expected``; ``run`` steps slower
    than ``clip`` times that came just before it.

    A step above ``factor`` times the expectation is an outlier, one above ``clip`` times a
    stall credited at the cap; once more than ``OUTLIER_RUN`` slow steps came in a row the
    machine did get slower, and they are credited as they are.

    >>> judge(1.0, 0.05, 10.0, 10.0, 1.5, 0), judge(0.1, 0.05, 10.0, 10.0, 1.5, 0)
    ((None, 1), (0.07500000000000001, 1))
    >>> judge(0.06, 0.05, 10.0, 10.0, 1.5, 3), judge(1.0, 0.05, 1.0, 10.0, 1.5, 3)
    ((0.06, 0), (1.0, 3))
    >>> judge(1.0, 0.05, 10.0, 10.0, 1.5, OUTLIER_RUN)
    (1.0, 9)
    """
    if cell_n < OUTLIER_MIN_N:
        return t, run
    if t <= clip * expected:
        return t, 0
    run += 1
    if run > OUTLIER_RUN:
        return t, run
    return (None if t > factor * expected else clip * expected), run
