"""Step traces: the JSONL telemetry format shared by the vLLM adapter, the simulator and ``banditk fit``.

The first line is a header, every other line one step::

    {"trace": "banditk/trace", "version": 1, "drafter": {"class": "mtp", ...}, "k_max": 4,
     "source": "vllm" | "sim", "hardware": "gb10", "vllm_version": "0.32.0", ...}
    {"step": 17, "B": 8, "k": 2, "step_s": 0.0231, "draft_s": 0.004, "target_s": 0.017,
     "acc_s": [7, 5, 0, 0], "acc_f": [1, 2, 0, 0], "prefill": 0, "ctx": 9412, "kv": 0.31, "queue": 0}

``B`` counts requests that decoded; ``prefill`` the prompt tokens computed in the same
step (absent means 0); ``ctx`` the decoding requests' context tokens (prompt and generated,
in the KV cache), summed, as the governor's ``StepContext.context_tokens`` had them (absent
in logs from before it was traced: not known); ``k`` is the K the step's drafts were proposed with; ``bucket`` the
batch bucket its decision consulted (-1 for policies without buckets; absent in older
logs); ``acc_s``/``acc_f`` are per-position successes and first failures (see
:mod:`banditk.posterior.acceptance`); ``draft_s``/``target_s`` may be null. A line with
an ``"event"`` key is not a step: ``{"event": "fallback", "kind": ..., "k": ..., "B": ...,
"t": ...}`` marks a step that ran the fallback K; readers of steps skip it. Rotated logs
(``path.N`` ... ``path.1``, ``path``) are read oldest first. Malformed lines are
skipped and counted, never fatal: a log cut off by a crash is still usable.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from banditk.core.drafters import check_drafter_class
from banditk.core.errors import PriorFormatError
from banditk.core.types import Decision, StepOutcome

TRACE_SCHEMA = "banditk/trace"
TRACE_VERSION = 1


def header(drafter_class: str, k_max: int, source: str, **extra) -> dict:
    """The first line of a trace."""
    check_drafter_class(drafter_class)
    drafter = {"class": drafter_class, **extra.pop("drafter", {})}
    return {
        "trace": TRACE_SCHEMA,
        "version": TRACE_VERSION,
        "drafter": drafter,
        "k_max": int(k_max),
        "source": source,
        **extra,
    }


def step_record(decision: Decision, outcome: StepOutcome, k_max: int, **extra) -> dict:
    """One step line from the decision and the outcome credited to it."""
    succ, fail = outcome.position_counts(k_max)
    rec = {
        "step": decision.step_id,
        "B": decision.num_decoding,
        "k": decision.k,
        "bucket": decision.bucket,
        "step_s": round(outcome.step_duration_s, 7),
        "draft_s": None if outcome.draft_duration_s is None else round(outcome.draft_duration_s, 7),
        "target_s": None if outcome.target_duration_s is None else round(outcome.target_duration_s, 7),
        "acc_s": succ,
        "acc_f": fail,
        "prefill": outcome.prefill_tokens,
    }
    rec.update(extra)
    return rec


def fallback_record(k: int, batch: int, kind: str, t: float) -> dict:
    """An event line: a step ran the fallback K (``kind`` says why); it is not a step line."""
    return {"event": "fallback", "kind": kind, "k": int(k), "B": int(batch), "t": round(t, 3)}


@dataclass
class Trace:
    """A trace as columns. ``draft_s``/``target_s`` hold NaN where not measured."""

    header: dict
    batch: np.ndarray
    k: np.ndarray
    step_s: np.ndarray
    draft_s: np.ndarray
    target_s: np.ndarray
    acc_s: np.ndarray  # (steps, k_max)
    acc_f: np.ndarray
    prefill: np.ndarray
    context: np.ndarray  # the ``ctx`` column; -1 where the line has none
    skipped: int = 0

    @property
    def k_max(self) -> int:
        return int(self.header["k_max"])

    @property
    def drafter_class(self) -> str:
        return self.header["drafter"]["class"]

    def __len__(self) -> int:
        return int(self.batch.size)


def trace_files(path: str | os.PathLike) -> list[Path]:
    """``path`` and its rotated predecessors, oldest first."""
    p = Path(path)
    rotated = []
    i = 1
    while Path(f"{p}.{i}").exists():
        rotated.append(Path(f"{p}.{i}"))
        i += 1
    return [*reversed(rotated), p] if p.exists() else list(reversed(rotated))


def read_trace(path: str | os.PathLike, *, max_steps: int | None = None) -> Trace:
    """Read a trace (with its rotated parts). Raises :class:`PriorFormatError` if no header or no step is usable."""
    files = trace_files(path)
    if not files:
        raise PriorFormatError(f"Cannot read trace {str(path)!r}: no such file.")
    head = None
    rows: list[tuple] = []
    skipped = 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    skipped += 1
                    continue
                if not isinstance(rec, dict):
                    skipped += 1
                    continue
                if rec.get("trace") == TRACE_SCHEMA:
                    head = head or _check_header(rec, str(f))
                    continue
                if "event" in rec:  # an event line (a fallback step): no step time to learn from
                    continue
                if head is None:
                    skipped += 1
                    continue
                row = _parse_step(rec, head["k_max"])
                if row is None:
                    skipped += 1
                    continue
                rows.append(row)
                if max_steps is not None and len(rows) >= max_steps:
                    break
    if head is None:
        raise PriorFormatError(f'{str(path)!r} is not a banditk trace: no header line with "trace": {TRACE_SCHEMA!r}.')
    if not rows:
        raise PriorFormatError(f"{str(path)!r} has a header but no usable step lines ({skipped} skipped).")
    cols = list(zip(*rows))
    return Trace(
        head,
        np.array(cols[0], dtype=np.int64),
        np.array(cols[1], dtype=np.int64),
        np.array(cols[2], dtype=float),
        np.array(cols[3], dtype=float),
        np.array(cols[4], dtype=float),
        np.array(cols[5], dtype=float),
        np.array(cols[6], dtype=float),
        np.array(cols[7], dtype=np.int64),
        np.array(cols[8], dtype=np.int64),
        skipped,
    )


def _check_header(rec: dict, name: str) -> dict:
    if rec.get("version") != TRACE_VERSION:
        raise PriorFormatError(f"{name!r}: unknown trace `version`={rec.get('version')!r}, expected {TRACE_VERSION}.")
    drafter = rec.get("drafter")
    if not isinstance(drafter, dict):
        raise PriorFormatError(f"{name!r}: trace header `drafter` must be an object, got {drafter!r}.")
    check_drafter_class(drafter.get("class"), "drafter.class")
    k_max = rec.get("k_max")
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= 64:
        raise PriorFormatError(f"{name!r}: trace header `k_max` must be an integer in [1, 64], got {k_max!r}.")
    return rec


#: Largest batch or token count a step line may carry (it must fit the int64 columns).
_MAX_COUNT = 2**31
#: Largest summed context a step line may carry: a batch's sum outgrows an int32, not an int64.
_MAX_CONTEXT = 2**62
#: Longest step a line may report: no scheduler step takes hours, and a finite but huge time
#: (1e200) would overflow the fit's sums of squares.
MAX_STEP_S = 3600.0


def _num(v, lo: float = 0.0, hi: float = math.inf) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        return None
    return float(v)


def _parse_step(rec: dict, k_max: int) -> tuple | None:
    b, k, t = rec.get("B"), rec.get("k"), _num(rec.get("step_s"), hi=MAX_STEP_S)
    if (
        isinstance(b, bool)
        or not isinstance(b, int)
        or not 1 <= b <= _MAX_COUNT
        or isinstance(k, bool)
        or not isinstance(k, int)
    ):
        return None
    if not 0 <= k <= k_max or t is None or t <= 0:
        return None
    acc_s, acc_f = rec.get("acc_s", [0] * k_max), rec.get("acc_f", [0] * k_max)
    if (
        not isinstance(acc_s, list)
        or not isinstance(acc_f, list)
        or len(acc_s) != k_max
        or len(acc_f) != k_max
        or any(_num(v) is None for v in acc_s + acc_f)
    ):
        return None
    draft = _num(rec.get("draft_s"), hi=MAX_STEP_S)
    target = _num(rec.get("target_s"), hi=MAX_STEP_S)
    prefill = rec.get("prefill", 0)
    if isinstance(prefill, bool) or not isinstance(prefill, int) or not 0 <= prefill <= _MAX_COUNT:
        return None
    ctx = rec.get("ctx", -1)
    if isinstance(ctx, bool) or not isinstance(ctx, int) or not -1 <= ctx <= _MAX_CONTEXT:
        return None
    return (
        b,
        k,
        t,
        math.nan if draft is None else draft,
        math.nan if target is None else target,
        acc_s,
        acc_f,
        prefill,
        ctx,
    )
