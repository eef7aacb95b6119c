"""Steps too slow to credit: a clock jump, a GC or swap pause, a shape warming up.

A step far slower than its cell's posterior mean expects is not learnt from, unless such
steps have become the rule: after ``OUTLIER_RUN`` in a row the machine did get slower, and
they are credited again.
"""

from __future__ import annotations

#: Consecutive outlier steps after which slow steps are the new normal and are credited.
OUTLIER_RUN = 8
#: Observations a cell needs before its mean is trusted to call a step an outlier.
OUTLIER_MIN_N = 3.0


def judge(t: float, expected: float, cell_n: float, factor: float, run: int) -> tuple[bool, int]:
    """(is the step an outlier, outlier run after it) for a step of ``t`` seconds whose cell
    of weight ``cell_n`` expects ``expected``; ``run`` outliers came just before it.

    >>> judge(1.0, 0.05, 10.0, 10.0, 0), judge(0.2, 0.05, 10.0, 10.0, 3), judge(1.0, 0.05, 1.0, 10.0, 3)
    ((True, 1), (False, 0), (False, 3))
    >>> judge(1.0, 0.05, 10.0, 10.0, OUTLIER_RUN)
    (False, 9)
    """
    if cell_n < OUTLIER_MIN_N:
        return False, run
    if t <= factor * expected:
        return False, 0
    run += 1
    return run <= OUTLIER_RUN, run
