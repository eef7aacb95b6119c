"""Steps too slow to credit as they are: a clock jump, a GC or swap pause, a shape warming up.

A step far slower than its cell's posterior mean expects is not learnt from, unless such
steps have become the rule: after ``OUTLIER_RUN`` in a row the machine did get slower, and
they are credited again. A step that stalled less is credited at a cap: stalls (the OS, a
garbage collector, a client on the same cores) hit every K alike, so a few of them must not
decide between Ks; a run of them is a slower machine, credited as it is.

A cell with fewer than ``OUTLIER_MIN_N`` observations expects what the latency model
predicts for it. That is good enough to catch a clock jump, not to cap a stall, so a thin
cell drops outliers and credits a stall as it is (counting it toward the run). Before the
model has a scale there is nothing to judge by.
"""

from __future__ import annotations

#: Consecutive outlier steps after which slow steps are the new normal and are credited.
OUTLIER_RUN = 8
#: Observations a cell needs before its mean is trusted to cap a stall.
OUTLIER_MIN_N = 3.0


def judge(
    t: float, expected: float | None, cell_n: float, factor: float, clip: float, run: int
) -> tuple[float | None, int]:
    """(the time to credit, None for an outlier; the run of slow steps after it) for a step of
    ``t`` seconds whose cell of weight ``cell_n`` expects ``expected`` (None: no scale yet);
    ``run`` steps slower than ``clip`` times that came just before it.

    A step above ``factor`` times the expectation is an outlier, one above ``clip`` times a
    stall credited at the cap (in a cell of at least ``OUTLIER_MIN_N`` observations); once
    more than ``OUTLIER_RUN`` slow steps came in a row the machine did get slower, and they
    are credited as they are.

    >>> judge(1.0, 0.05, 10.0, 10.0, 1.5, 0), judge(0.1, 0.05, 10.0, 10.0, 1.5, 0)
    ((None, 1), (0.07500000000000001, 1))
    >>> judge(0.06, 0.05, 10.0, 10.0, 1.5, 3), judge(1.0, None, 10.0, 10.0, 1.5, 3)
    ((0.06, 0), (1.0, 3))
    >>> judge(1.0, 0.05, 1.0, 10.0, 1.5, 0), judge(0.1, 0.05, 1.0, 10.0, 1.5, 0)  # a thin cell
    ((None, 1), (0.1, 1))
    >>> judge(1.0, 0.05, 10.0, 10.0, 1.5, OUTLIER_RUN)
    (1.0, 9)
    """
    if expected is None:
        return t, run
    if t <= clip * expected:
        return t, 0
    run += 1
    if run > OUTLIER_RUN:
        return t, run
    if t > factor * expected:
        return None, run
    return (clip * expected if cell_n >= OUTLIER_MIN_N else t), run
