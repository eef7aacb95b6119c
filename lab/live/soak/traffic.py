"""Open-loop soak traffic: a seeded Poisson schedule of short and long prompts, streamed or not, some
aborted mid-stream, played against a server from a thread pool.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields

import numpy as np

#: First non-special token id of the tiny models (``<s>``, ``</s>``, ``<pad>`` come first).
FIRST_TOKEN = 3


@dataclass(frozen=True)
class SoakConfig:
    """Everything a soak run is set up with (recorded in the report's ``setup``)."""

    minutes: float = 30.0
    rate: float = 2.0  # requests per second (Poisson)
    seed: int = 0
    long_fraction: float = 0.3
    short_len: int = 32
    long_len: int = 384
    min_tokens: int = 16
    max_tokens: int = 96
    # Of the traffic (probes are always greedy). 0 by default: with sampled traffic in the batch,
    # vLLM's own static K (no governor) already answered greedy probes differently on CPU (0.32).
    temperature: float = 0.0
    stream_fraction: float = 0.6
    abort_fraction: float = 0.3  # of streamed requests
    probe_interval_s: float = 30.0
    probe_count: int = 6
    probe_tokens: int = 48
    rss_interval_s: float = 5.0
    k_max: int = 3
    max_num_seqs: int = 32
    vocab_size: int = 512
    snapshot_interval_s: float = 1.0
    progress_s: float = 30.0
    workers: int = 96  # client threads: open loop as long as fewer requests are in flight
    policy: str = "bandit"  # the soaked server's policy; fixed:K is a control (same traffic, no governor)


# ---- traffic --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One scheduled request: when (seconds from start), its prompt and how the client treats it."""

    t: float
    prompt: tuple[int, ...]
    max_tokens: int
    stream: bool
    abort_after: int | None  # streamed chunks after which the client hangs up; None: read to the end

    @property
    def kind(self) -> str:
        return "long" if len(self.prompt) > 64 else "short"


def random_prompt(rng: np.random.Generator, length: int, vocab_size: int) -> tuple[int, ...]:
    """``length`` random non-special token ids."""
    return tuple(int(x) for x in rng.integers(FIRST_TOKEN, vocab_size, size=length))


def poisson_schedule(cfg: SoakConfig, duration_s: float) -> list[Arrival]:
    """Open-loop arrivals at ``cfg.rate`` per second over ``duration_s``, reproducible by ``cfg.seed``.

    >>> a = poisson_schedule(SoakConfig(rate=5, seed=1), 10.0)
    >>> a == poisson_schedule(SoakConfig(rate=5, seed=1), 10.0), all(0 <= x.t < 10 for x in a)
    (True, True)
    """
    rng = np.random.default_rng(cfg.seed)
    out, t = [], 0.0
    while True:
        t += float(rng.exponential(1.0 / cfg.rate))
        if t >= duration_s:
            return out
        long = bool(rng.random() < cfg.long_fraction)
        prompt = random_prompt(rng, cfg.long_len if long else cfg.short_len, cfg.vocab_size)
        max_tokens = int(rng.integers(cfg.min_tokens, cfg.max_tokens + 1))
        stream = bool(rng.random() < cfg.stream_fraction)
        abort = stream and bool(rng.random() < cfg.abort_fraction)
        abort_after = int(rng.integers(1, max(2, max_tokens // 2))) if abort else None
        out.append(Arrival(round(t, 6), prompt, max_tokens, stream, abort_after))


def _post(base_url: str, body: dict, timeout_s: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def complete(base_url: str, model: str, prompt, max_tokens: int, timeout_s: float = 600.0) -> dict:
    """A greedy, non-streamed completion: ``{"text", "token_ids"}``; raises on any HTTP error."""
    body = {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    conn, r = _post(base_url, body, timeout_s)
    try:
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        choice = json.loads(data)["choices"][0]
        return {"text": choice["text"], "token_ids": choice.get("token_ids")}
    finally:
        conn.close()


def send(base_url: str, model: str, a: Arrival, temperature: float = 1.0, timeout_s: float = 600.0) -> str:
    """Send one request; returns ``"completed"``, ``"aborted"`` (the client hung up) or ``"error"``."""
    body = {
        "model": model,
        "prompt": list(a.prompt),
        "max_tokens": a.max_tokens,
        "temperature": temperature,
        "ignore_eos": True,
        "stream": a.stream,
    }
    try:
        conn, r = _post(base_url, body, timeout_s)
    except OSError:
        return "error"
    try:
        if r.status != 200:
            r.read()
            return "error"
        if not a.stream:
            json.loads(r.read())["choices"][0]["text"]
            return "completed"
        chunks = 0
        while True:
            line = r.readline()
            if not line:
                return "error"  # the stream ended without [DONE]
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return "completed"
            chunk = json.loads(payload)
            if "error" in chunk:
                return "error"
            chunks += 1
            if a.abort_after is not None and chunks >= a.abort_after:
                return "aborted"  # closing the connection below is the abort
    except (OSError, ValueError, KeyError, IndexError, http.client.HTTPException):
        return "error"
    finally:
        conn.close()


@dataclass
class Counts:
    """Traffic counters (thread-safe through :meth:`add`)."""

    sent: int = 0
    completed: int = 0
    aborted: int = 0
    http_errors: int = 0
    sent_by_kind: dict = field(default_factory=lambda: {"short": 0, "long": 0})
    streamed: int = 0
    max_dispatch_lag_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                setattr(self, k, getattr(self, k) + v)

    @property
    def in_flight(self) -> int:
        return self.sent - self.completed - self.aborted - self.http_errors

    def as_dict(self) -> dict:
        with self._lock:
            d = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
            d["sent_by_kind"] = dict(self.sent_by_kind)
            d["in_flight"] = self.in_flight
        return d


class Traffic:
    """Plays ``schedule`` (open loop) against a server on a background thread."""

    def __init__(
        self, base_url: str, model: str, schedule: list[Arrival], workers: int = 96, temperature: float = 1.0
    ) -> None:
        self.base_url, self.model, self.schedule, self.temperature = base_url, model, schedule, temperature
        self.counts = Counts()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="soak")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._dispatch, name="soak-dispatch", daemon=True)

    def start(self, t0: float) -> Traffic:
        self.t0 = t0
        self._thread.start()
        return self

    def _dispatch(self) -> None:
        for a in self.schedule:
            delay = self.t0 + a.t - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                return
            lag = max(0.0, time.monotonic() - (self.t0 + a.t))
            with self.counts._lock:
                self.counts.sent += 1
                self.counts.sent_by_kind[a.kind] += 1
                self.counts.streamed += a.stream
                self.counts.max_dispatch_lag_s = max(self.counts.max_dispatch_lag_s, round(lag, 3))
            self._pool.submit(self._one, a)

    def _one(self, a: Arrival) -> None:
        outcome = send(self.base_url, self.model, a, self.temperature)
        key = {"completed": "completed", "aborted": "aborted"}.get(outcome, "http_errors")
        self.counts.add(**{key: 1})

    def finish(self, timeout_s: float = 600.0) -> None:
        """Stop dispatching and wait (up to ``timeout_s``) for requests in flight."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + timeout_s
        while self.counts.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---- probes ---------------------------------------------------------------------------------
