"""One live point from several runs of it: medians of what is timed, switch counts pooled.

Two runs of one policy at one point on a shared CPU differ by more than the protocol's
margins, even at the same K, so a check on one run can pass or fail by chance. The median
of an odd number of runs is robust to one slow run. Switch counts are rates of rare events:
they are pooled over every measured step, which weighs each run by its length.
"""

from __future__ import annotations

import statistics

#: Point fields that are timings: their median over the runs.
TIMED = ("throughput_tok_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s", "ttft_p99_s")
#: Point fields that count: their sum.
COUNTED = ("num_prompts", "completed", "duration_s", "decided_steps")


def _summed(dicts: list[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        for key, n in d.items():
            out[key] = out.get(key, 0) + n
    return out


def combine(runs: list[dict]) -> dict:
    """The point of ``runs`` (live sweep points of one policy and concurrency).

    Timings are medians, counts sums, switch rates recomputed from the pooled cause split
    (static policies, which record no split, keep their rate's mean); ``runs`` keeps each
    run's timings and switch counts.

    Raises:
        ValueError: no runs, or runs of different policies or concurrencies.

    >>> a = {"policy": "bandit", "concurrency": 2, "throughput_tok_s": 100.0, "decided_steps": 900,
    ...      "change_causes": {"bucket": 1, "decode_flip": 9}, "k_hist": {"3": 900}}
    >>> b = {**a, "throughput_tok_s": 90.0, "decided_steps": 100, "change_causes": {"bucket": 0, "decode_flip": 1},
    ...      "k_hist": {"2": 100}}
    >>> c = combine([a, b, {**b, "throughput_tok_s": 95.0}])
    >>> c["throughput_tok_s"], c["decided_steps"], c["oscillations_per_1000"], c["k_hist"]
    (95.0, 1100, 10.0, {'3': 900, '2': 200})
    """
    if not runs:
        raise ValueError("combine() needs at least one run of the point.")
    keys = {(r.get("policy"), r.get("concurrency")) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"runs of one point must share policy and concurrency, got {sorted(map(str, keys))}.")
    out = {key: value for key, value in runs[0].items() if key not in ("repeat",)}
    for key in TIMED:
        if all(isinstance(r.get(key), int | float) for r in runs):
            out[key] = statistics.median(r[key] for r in runs)
    for key in COUNTED:
        if all(isinstance(r.get(key), int | float) for r in runs):
            out[key] = sum(r[key] for r in runs)
    if all(isinstance(r.get("change_causes"), dict) for r in runs) and out.get("decided_steps"):
        causes = _summed([r["change_causes"] for r in runs])
        per = 1000.0 / out["decided_steps"]
        out["change_causes"] = causes
        out["k_switches_per_1000"] = sum(causes.values()) * per
        out["oscillations_per_1000"] = (causes.get("chunk_flip", 0) + causes.get("decode_flip", 0)) * per
        for key in ("decode_flips_by_bucket", "k_hist"):
            if all(isinstance(r.get(key), dict) for r in runs):
                out[key] = _summed([r[key] for r in runs])
    else:
        for key in ("k_switches_per_1000", "oscillations_per_1000"):
            if all(isinstance(r.get(key), int | float) for r in runs):
                out[key] = statistics.fmean(r[key] for r in runs)
    kept = (*TIMED, "decided_steps", "k_switches_per_1000", "oscillations_per_1000")
    out["runs"] = [{key: r[key] for key in kept if key in r} for r in runs]
    return out
