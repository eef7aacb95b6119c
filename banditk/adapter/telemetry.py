"""Live telemetry of the governed scheduler: bounded, cheap, JSON-friendly.

- totals and per-position acceptance, the same numbers vLLM's spec-decoding
  metrics count (both come from ``make_spec_decoding_stats``);
- per-request acceptance history (off unless asked for): a bounded ring per live request, evicted
  when the request leaves the scheduler;
- step, draft and target durations, and the share of step time in draft,
  verify (target) and the rest;
- KV-cache usage and queue length at the last decision;
- error counters per kind;
- an optional JSONL step log, size-bounded and rotated (:class:`RotatingJsonl`).

Examples:
    >>> import numpy as np
    >>> t = Telemetry(k_max=3, request_history=2)
    >>> t.observe_request("a", drafted=3, accepted=1)
    >>> t.accepted_per_position.tolist(), t.drafted_per_position.tolist()
    ([1, 0, 0], [1, 1, 1])
    >>> t.acceptance_per_position().tolist()[:2]
    [1.0, 0.0]
    >>> t.evict(live=set()); t.request_history("a")
    []
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque

import numpy as np

logger = logging.getLogger("vllm.banditk")


class RotatingJsonl:
    """Append-only JSON-lines file that rotates to ``path.1 .. path.N`` past ``max_bytes``.

    Write errors are counted, never raised: telemetry must not stop an engine.
    """

    def __init__(self, path: str, max_bytes: int, backups: int, header: dict | None = None) -> None:
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        # Written at the top of every file, so each rotated part is a readable trace.
        self.header = None if header is None else json.dumps(header, separators=(",", ":")) + "\n"
        self.errors = 0
        self._failing = False
        self._fh = None
        self._size = 0

    def write(self, record: dict) -> None:
        try:
            if self._fh is None:
                self._fh = open(self.path, "a", encoding="utf-8")
                self._size = self._fh.tell()
                self._write_header()
            line = json.dumps(record, separators=(",", ":")) + "\n"
            if self._size + len(line) > self.max_bytes and self._size > 0:
                self._rotate()
                self._write_header()
            self._fh.write(line)
            self._size += len(line)
        except OSError as e:
            self._failed(e)
        else:
            self._recovered()

    def _failed(self, e: OSError) -> None:
        """Count a failed write; log the first of a run of failures (once, not every step)."""
        self.errors += 1
        if not self._failing:
            self._failing = True
            logger.error(
                "banditk: telemetry log %s cannot be written (%s); steps are not recorded until it can.", self.path, e
            )
        try:  # reopen at the next write, in case the file was moved or its folder restored
            if self._fh is not None:
                self._fh.close()
        except OSError:
            pass
        self._fh = None

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            logger.warning("banditk: telemetry log %s is written again after %d failed writes.", self.path, self.errors)

    def _write_header(self) -> None:
        if self.header is not None and self._size == 0:
            self._fh.write(self.header)
            self._size += len(self.header)

    def _rotate(self) -> None:
        self._fh.close()
        self._fh = None
        if self.backups == 0:
            os.remove(self.path)
        else:
            for i in range(self.backups - 1, 0, -1):
                if os.path.exists(f"{self.path}.{i}"):
                    os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
            os.replace(self.path, f"{self.path}.1")
        self._fh = open(self.path, "a", encoding="utf-8")
        self._size = 0

    def flush(self) -> None:
        if self._fh is not None:
            try:
                self._fh.flush()
            except OSError:
                self.errors += 1

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                self.errors += 1
            self._fh = None


class Telemetry:
    """Counters and bounded histories kept by the governed scheduler."""

    def __init__(self, k_max: int, request_history: int = 0) -> None:
        self.k_max = k_max
        self._hist_len = request_history
        self._requests: dict[str, deque] = {}
        # Verifications by (drafted, accepted), drafted clamped to K_max, one increment a request:
        # the totals and the per-position counts are read from it (a report, not every step).
        self._pairs = [0] * (k_max + 1) ** 2
        self.fallbacks: dict[str, int] = {}  # steps that ran the fallback K, by why
        # New decode requests padded with placeholder drafts (vLLM counts those drafts rejected).
        self.padded_requests = 0
        self.steps = 0
        self.decisions = 0
        self.k_histogram = [0] * (k_max + 1)
        self.step_s = 0.0
        self.draft_s = 0.0
        self.target_s = 0.0
        self.timed_steps = 0
        self.timed_step_s = 0.0
        self.kv_usage = 0.0
        self.queue_len = 0
        self.errors: dict[str, int] = {}

    # ---- per step ------------------------------------------------------------------------

    def observe_request(self, req_id: str, drafted: int, accepted: int) -> None:
        """One request verified ``drafted`` drafts and accepted ``accepted``."""
        self.observe_requests([(req_id, drafted, accepted)])

    def observe_requests(self, verified) -> None:
        """A step's verifications: an iterable of ``(request_id, drafted, accepted)``."""
        k, hist_len, requests, pairs = self.k_max, self._hist_len, self._requests, self._pairs
        width = k + 1
        for req_id, drafted, accepted in verified:
            if drafted <= 0:
                continue
            d = drafted if drafted < k else k
            pairs[d * width + (accepted if accepted < d else d)] += 1
            if not hist_len:
                continue
            hist = requests.get(req_id)
            if hist is None:
                hist = requests[req_id] = deque(maxlen=hist_len)
            hist.append((drafted, accepted))

    @property
    def keeps_histories(self) -> bool:
        """Whether each request's history is kept (then a step is observed request by request)."""
        return self._hist_len > 0

    def observe_pairs(self, pairs: tuple[int, ...]) -> None:
        """A step's verifications counted per (drafted, accepted) pair, in the layout of
        ``StepOutcome.pairs`` for this K_max (requests that drafted nothing are not counted)."""
        own = self._pairs
        for i in range(self.k_max + 1, len(own)):
            n = pairs[i]
            if n:
                own[i] += n

    @property
    def num_drafts(self) -> int:
        """Request-steps that verified at least one draft."""
        return sum(self._pairs[self.k_max + 1 :])

    @property
    def num_draft_tokens(self) -> int:
        w = self.k_max + 1
        return sum((i // w) * n for i, n in enumerate(self._pairs) if n)

    @property
    def num_accepted_tokens(self) -> int:
        w = self.k_max + 1
        return sum((i % w) * n for i, n in enumerate(self._pairs) if n)

    def _per_position(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(drafted, accepted, reached) per position from the (drafted, accepted) counts."""
        k = self.k_max
        n = np.array(self._pairs, dtype=np.int64).reshape(k + 1, k + 1)  # [drafted, accepted]
        pos = np.arange(k)
        d, a = np.arange(k + 1)[:, None], np.arange(k + 1)[None, :]
        per = lambda mask: (n[None] * mask).sum(axis=(1, 2))  # noqa: E731  [position]
        drafted = per(d[None] > pos[:, None, None])
        accepted = per(a[None] > pos[:, None, None])
        # Position i is reached when the drafts before it were all accepted (a >= i) and i was drafted.
        reached = per((a[None] >= pos[:, None, None]) & (d[None] > pos[:, None, None]))
        return drafted, accepted, reached

    @property
    def drafted_per_position(self) -> np.ndarray:
        """Requests that verified a draft at position i (drafted >= i + 1)."""
        return self._per_position()[0]

    @property
    def accepted_per_position(self) -> np.ndarray:
        """Drafts accepted at position i: vLLM's ``num_accepted_tokens_per_pos``."""
        return self._per_position()[1]

    @property
    def reached_per_position(self) -> np.ndarray:
        """Drafts verified at position i with positions 1..i-1 accepted (alpha_i's trials)."""
        return self._per_position()[2]

    def observe_decision(self, k: int, kv_usage: float, queue_len: int) -> None:
        self.decisions += 1
        self.k_histogram[min(max(k, 0), self.k_max)] += 1
        self.kv_usage, self.queue_len = kv_usage, queue_len

    def observe_step(self, step_s: float, target_s: float | None, draft_s: float | None) -> None:
        self.steps += 1
        self.step_s += step_s
        if target_s is not None and draft_s is not None:
            self.timed_steps += 1
            self.timed_step_s += step_s
            self.target_s += target_s
            self.draft_s += draft_s

    def observe_forwards(self, target_s: float, draft_s: float) -> None:
        """A step timed apart from its cycle (CUDA events): its forwards are its whole timed time."""
        self.timed_steps += 1
        self.timed_step_s += target_s + draft_s
        self.target_s += target_s
        self.draft_s += draft_s

    def count_error(self, kind: str) -> int:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        return self.errors[kind]

    def evict(self, live) -> None:
        """Drop histories of requests no longer in ``live`` (a container of request ids)."""
        for req_id in [r for r in self._requests if r not in live]:
            del self._requests[req_id]

    # ---- reading -------------------------------------------------------------------------

    def request_history(self, req_id: str) -> list[tuple[int, int]]:
        return list(self._requests.get(req_id, ()))

    @property
    def num_tracked_requests(self) -> int:
        return len(self._requests)

    def acceptance_per_position(self) -> np.ndarray:
        """Conditional acceptance at position i: accepted there / verified there with 1..i-1 accepted.

        This is the governor's alpha_i (nan where never reached).
        """
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.accepted_per_position / np.where(
                self.reached_per_position > 0, self.reached_per_position, np.nan
            )

    def time_shares(self) -> dict[str, float] | None:
        """Share of timed step time in draft, verify (target) and the rest; None if untimed."""
        if self.timed_steps == 0 or self.timed_step_s <= 0:
            return None
        total = max(self.timed_step_s, self.draft_s + self.target_s)
        d, t = self.draft_s / total, self.target_s / total
        return {"draft": d, "verify": t, "other": max(0.0, 1.0 - d - t)}

    def summary(self) -> dict:
        shares = self.time_shares()
        return {
            "steps": self.steps,
            "decisions": self.decisions,
            "k_histogram": list(self.k_histogram),
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": self.accepted_per_position.tolist(),
            "drafted_per_position": self.drafted_per_position.tolist(),
            "reached_per_position": self.reached_per_position.tolist(),
            "mean_step_ms": 1e3 * self.step_s / self.steps if self.steps else None,
            "time_shares": shares,
            "kv_usage": self.kv_usage,
            "queue_len": self.queue_len,
            "tracked_requests": len(self._requests),
            "errors": dict(self.errors),
        }

    def line(self) -> str:
        """A short human summary for the state line."""
        acc = self.acceptance_per_position()
        acc_s = " ".join("-" if np.isnan(a) else f"{a:.2f}" for a in acc)
        shares = self.time_shares()
        sh = (
            "n/a"
            if shares is None
            else f"draft={shares['draft']:.0%} verify={shares['verify']:.0%} other={shares['other']:.0%}"
        )
        mean = f"{1e3 * self.step_s / self.steps:.1f}ms" if self.steps else "n/a"
        err = f" errors={self.errors}" if self.errors else ""
        pad = f" padded={self.padded_requests}" if self.padded_requests else ""
        return (
            f"telemetry steps={self.steps} step={mean} accept/pos[{acc_s}] "
            f"kv={self.kv_usage:.0%} queue={self.queue_len} time[{sh}]{pad}{err}"
        )
