"""Run an experiment's independent jobs on a process pool, with a progress line on stderr.

Standard library only: importing it adds nothing to a report's banditk/ closure
(experiments/source_closure.py), so a script that uses it stays current.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Sequence


def run_pooled(job: Callable, jobs: Sequence, workers: int, label: str) -> list:
    """``job`` over ``jobs`` on ``workers`` forked processes (at least one); results in the
    order they finish, so a caller that needs order sorts them by what they carry.

    >>> sorted(run_pooled(abs, [-2, 1, -3], 1, "doctest"))
    [1, 2, 3]
    """
    t0, out = time.time(), []
    with mp.get_context("fork").Pool(max(1, workers)) as pool:
        for i, r in enumerate(pool.imap_unordered(job, jobs), 1):
            out.append(r)
            el = time.time() - t0
            sys.stderr.write(f"\r[{label}] {i}/{len(jobs)} runs {el:5.0f}s eta {el / i * (len(jobs) - i):5.0f}s ")
            sys.stderr.flush()
    sys.stderr.write("\n")
    return out
