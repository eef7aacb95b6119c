"""The governor on vLLM's Prometheus ``/metrics``: ``banditk:*`` next to ``vllm:*``.

Two halves, one per process:

- engine core: :class:`Publisher` (called by the governed scheduler after each step)
  turns the runtime's cumulative counters into a small JSON payload (:func:`payload`)
  at most every ``interval_s`` and when the engine runs dry, and attaches it to the
  step's ``SchedulerStats``, which vLLM already sends to the front end;
- front end: ``BanditkStatLogger``, a ``vllm.stat_logger_plugins`` entry point, takes
  the payload out of the stats in ``record()`` and exposes it through a Prometheus
  collector (:func:`samples` is the mapping, vLLM-free and unit-tested).

The carrier: ``SchedulerStats`` is a dataclass that vLLM encodes with msgspec and
decodes by its declared field types, so an extra attribute is dropped on the way and
a typed field must keep its type. The payload rides as one key of
``num_kv_fetch_reqs_by_stage`` (``dict[str, int]``): the key is ``"banditk:" + JSON``
and the value 0. vLLM's own loggers read only their known stages from that dict and
log it only when a value is non-zero, so the key is inert even where this logger is
not loaded (the dict-typed connector fields are not: vLLM's logging logger asserts a
configured connector as soon as they are non-empty). Counters travel as cumulative
totals, so a payload that is skipped or arrives late loses nothing.

Nothing here raises into vLLM: failures are logged once and the metrics go stale.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from typing import Any

logger = logging.getLogger("vllm.banditk")

#: Prefix of metric names (vLLM's are ``vllm:``) and of the carrier key.
PREFIX = "banditk:"
#: The ``SchedulerStats`` field that carries the payload.
CARRIER_FIELD = "num_kv_fetch_reqs_by_stage"
#: Payload format; the front end ignores a payload of another version.
PAYLOAD_VERSION = 1
#: Seconds between payloads while the engine is busy (one is also sent when it runs dry).
PUBLISH_INTERVAL_S = 1.0
#: Entry-point name in the ``vllm.stat_logger_plugins`` group (``VLLM_PLUGINS`` filters by it).
ENTRY_POINT_NAME = "banditk_metrics"


# ---- engine core --------------------------------------------------------------------------


def payload(runtime: Any) -> dict:
    """The runtime's state as JSON types: cumulative counts plus the posterior read-outs."""
    tel = runtime.telemetry
    policy = runtime.policy
    out: dict[str, Any] = {
        "v": PAYLOAD_VERSION,
        "policy": str(getattr(policy, "name", type(policy).__name__)),
        "drafter_class": str(runtime.drafter_class),
        "k_max": int(runtime.k_max),
        "k_last": int(runtime.last_k),
        "decisions": int(tel.decisions),
        "k_hist": [int(x) for x in tel.k_histogram],
        "steps": int(tel.steps),
        "faults": {str(k): int(v) for k, v in tel.errors.items()},
        # Steps run at the fallback K by reason, where the runtime counts them (``Telemetry.fallbacks``).
        "fallbacks": {str(k): int(v) for k, v in (getattr(tel, "fallbacks", None) or {}).items()},
        "bypassed": int(runtime.breaker.bypassed),
        "breaker_trips": int(runtime.breaker.trips),
        "accepted": [int(x) for x in tel.accepted_per_position],
        "reached": [int(x) for x in tel.reached_per_position],
    }
    counters = getattr(policy, "counters", None)
    if callable(counters):
        c = counters()
        for key in ("observations", "switches", "oscillations", "outliers"):
            v = c.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = int(v)
    if callable(getattr(policy, "acceptance_params", None)):
        a, b = policy.acceptance_params()
        out["posterior_acceptance"] = [float(x) for x in a / (a + b)]
    if callable(getattr(policy, "mean_goodput", None)):
        out.update(_buckets(policy))
    return out


def _buckets(policy: Any) -> dict:
    """Posterior-mean goodput per (bucket, K), for buckets with prior or live data only."""
    g = policy.mean_goodput()
    edges = [int(e) for e in policy.config.bucket_edges]
    context = [int(e) for e in getattr(policy.config, "context_edges", (0,))]
    cells = len(edges) * len(context)
    try:  # a bucket nothing was learnt about has the flat prior's arbitrary best K: leave it out
        post = policy.posterior
        n = (post.data.cell_n + post.prior_stats.cell_n).sum(axis=1)
        seen = [i for i in range(cells) if n[i] > 0]
    except AttributeError:
        seen = list(range(cells))
    return {
        "bucket_edges": edges,
        **({"context_edges": context} if len(context) > 1 else {}),
        "goodput": {str(i): [float(x) if math.isfinite(x) else None for x in g[i]] for i in seen},
    }


def attach(stats: Any, data: dict) -> None:
    """Put ``data`` into ``stats`` (a ``SchedulerStats``), replacing an earlier payload."""
    carrier = getattr(stats, CARRIER_FIELD)
    for key in [k for k in carrier if k.startswith(PREFIX)]:
        del carrier[key]
    carrier[PREFIX + json.dumps(data, separators=(",", ":"), allow_nan=False)] = 0


def take(stats: Any) -> dict | None:
    """Remove the payload from ``stats`` and return it (None if there is none)."""
    carrier = getattr(stats, CARRIER_FIELD, None)
    if not isinstance(carrier, dict):
        return None
    found = None
    for key in [k for k in carrier if isinstance(k, str) and k.startswith(PREFIX)]:
        del carrier[key]
        found = json.loads(key[len(PREFIX) :])
    return found if isinstance(found, dict) and found.get("v") == PAYLOAD_VERSION else None


def carrier_supported() -> bool:
    """Whether this vLLM's ``SchedulerStats`` has the carrier with the type the payload needs.

    A key of another type would fail vLLM's typed decoding in the front end, so a vLLM
    without ``dict[str, int]`` there gets no payload at all.
    """
    try:
        from vllm.v1.metrics.stats import SchedulerStats

        field = {f.name: f for f in dataclasses.fields(SchedulerStats)}.get(CARRIER_FIELD)
    except Exception:
        return False
    return field is not None and field.type in (dict[str, int], "dict[str, int]")


class Publisher:
    """Attaches a payload to the step's stats every ``interval_s`` and when the engine runs dry.

    Args:
        enabled: False sends nothing (the scheduler passes :func:`carrier_supported`).
    """

    def __init__(self, interval_s: float = PUBLISH_INTERVAL_S, clock=time.monotonic, enabled: bool = True) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.enabled = enabled
        self._last = -math.inf
        self._failed = False

    @classmethod
    def for_this_vllm(cls) -> Publisher:
        """A publisher, off (and said so once) where this vLLM cannot carry the payload."""
        ok = carrier_supported()
        if not ok:
            logger.warning(
                "banditk: this vLLM's SchedulerStats.%s is not a dict[str, int]; banditk:* metrics are off.",
                CARRIER_FIELD,
            )
        return cls(enabled=ok)

    def publish(self, runtime: Any, scheduler: Any, outputs: Any) -> None:
        """Called after every ``update_from_output``; costs one clock read when nothing is due."""
        if not self.enabled:
            return
        try:
            now = self.clock()
            # A running request means work goes on: vLLM's own call chain only when none runs.
            busy = getattr(scheduler, "running", None) or scheduler.has_unfinished_requests()
            if now - self._last < self.interval_s and busy:
                return
            self._last = now
            stats = _scheduler_stats(outputs)
            if stats is not None:  # None when vLLM runs with stats off
                attach(stats, payload(runtime))
        except Exception as e:  # metrics must never stop the engine
            if not self._failed:
                self._failed = True
                logger.error(
                    "banditk: metrics payload failed (%s: %s); banditk:* metrics go stale.", type(e).__name__, e
                )


def _scheduler_stats(outputs: Any) -> Any:
    for eco in (outputs or {}).values():
        stats = getattr(eco, "scheduler_stats", None)
        if stats is not None:
            return stats
    return None


# ---- front end: the mapping ---------------------------------------------------------------

#: name -> (type, help); every sample :func:`samples` yields has one of these names.
METRICS: dict[str, tuple[str, str]] = {
    "banditk:info": ("gauge", "Governor and server mode (labels); always 1."),
    "banditk:k_chosen": ("histogram", "K chosen by the governor per decision."),
    "banditk:k_current": ("gauge", "K in force at the last step."),
    "banditk:decisions": ("counter", "Steps where the governor chose K."),
    "banditk:steps": ("counter", "Executed steps the runtime timed."),
    "banditk:observations": ("counter", "Steps credited to the posterior (lines of the telemetry log)."),
    "banditk:k_changes": ("counter", "Changes of the decode K."),
    "banditk:oscillations": ("counter", "Changes of the decode K within one batch-size bucket (the bandit's count)."),
    "banditk:outlier_steps": ("counter", "Step times the posterior set aside as outliers."),
    "banditk:faults": ("counter", "Governor faults by kind; each used the fallback K."),
    "banditk:fallback_steps": ("counter", "Steps run at the fallback K, by reason."),
    "banditk:bypassed_steps": ("counter", "Steps that used the fallback K because a slow governor was bypassed."),
    "banditk:breaker_trips": ("counter", "Times a slow governor was bypassed."),
    "banditk:acceptance": ("gauge", "Observed conditional acceptance at a draft position, since start."),
    "banditk:drafts_reached": ("counter", "Drafts verified at a position with the earlier positions accepted."),
    "banditk:drafts_accepted": ("counter", "Drafts accepted at a position."),
    "banditk:posterior_acceptance": ("gauge", "Posterior-mean acceptance at a draft position."),
    "banditk:best_k": ("gauge", "K with the highest posterior-mean goodput in a batch-size bucket."),
    "banditk:goodput_tokens_per_second": ("gauge", "Posterior-mean goodput (tokens/s) per bucket and K."),
}

_COUNTER_KEYS = {
    "decisions": "banditk:decisions",
    "steps": "banditk:steps",
    "observations": "banditk:observations",
    "switches": "banditk:k_changes",
    "oscillations": "banditk:oscillations",
    "outliers": "banditk:outlier_steps",
    "bypassed": "banditk:bypassed_steps",
    "breaker_trips": "banditk:breaker_trips",
}


def bucket_label(edges: list[int], i: int) -> str:
    """Batch sizes of bucket ``i``: ``"4"``, ``"6-7"``, ``"256+"``.

    >>> [bucket_label([1, 2, 4, 8], i) for i in range(4)]
    ['1', '2-3', '4-7', '8+']
    """
    lo = edges[i]
    if i + 1 >= len(edges):
        return f"{lo}+"
    hi = edges[i + 1] - 1
    return str(lo) if hi == lo else f"{lo}-{hi}"


def samples(data: dict, labels: dict[str, str], mode: dict[str, str] | None = None) -> list[tuple[str, dict, float]]:
    """``(name, labels, value)`` for one engine's payload; histogram samples carry their suffix.

    Counters are named without ``_total`` here (the exposition adds it).
    """
    out: list[tuple[str, dict, float]] = []

    def add(name: str, value: float, **extra: str) -> None:
        out.append((name, {**labels, **extra}, float(value)))

    add(
        "banditk:info",
        1,
        governor=data["policy"],
        drafter_class=data["drafter_class"],
        k_max=str(data["k_max"]),
        **(mode or {}),
    )
    hist = data["k_hist"]
    cum = 0
    for k, n in enumerate(hist):
        cum += n
        add("banditk:k_chosen_bucket", cum, le=str(float(k)))
    add("banditk:k_chosen_bucket", cum, le="+Inf")
    add("banditk:k_chosen_count", cum)
    add("banditk:k_chosen_sum", sum(k * n for k, n in enumerate(hist)))
    add("banditk:k_current", data["k_last"])
    for key, name in _COUNTER_KEYS.items():
        if key in data:
            add(name, data[key])
    for kind, n in sorted(data["faults"].items()):
        add("banditk:faults", n, kind=kind)
    for reason, n in sorted(data.get("fallbacks", {}).items()):
        add("banditk:fallback_steps", n, reason=reason)
    # Positions count from 0, as in vllm:spec_decode_num_accepted_tokens_per_pos.
    for i, (acc, reached) in enumerate(zip(data["accepted"], data["reached"])):
        pos = str(i)
        add("banditk:drafts_reached", reached, position=pos)
        add("banditk:drafts_accepted", acc, position=pos)
        if reached > 0:
            add("banditk:acceptance", acc / reached, position=pos)
    for i, p in enumerate(data.get("posterior_acceptance", ())):
        add("banditk:posterior_acceptance", p, position=str(i))
    edges, context = data.get("bucket_edges"), data.get("context_edges") or [0]
    for i, row in sorted(data.get("goodput", {}).items(), key=lambda kv: int(kv[0])):
        b, c = divmod(int(i), len(context))  # cells are (batch bucket, context bucket), flat
        bucket = bucket_label(edges, b) + (f",ctx={bucket_label(context, c)}" if len(context) > 1 else "")
        finite = [(g, k) for k, g in enumerate(row) if g is not None]
        if finite:  # the first K of the highest goodput, as the state line's argmax
            add("banditk:best_k", max(finite, key=lambda gk: gk[0])[1], bucket=bucket)
        for g, k in finite:
            add("banditk:goodput_tokens_per_second", g, bucket=bucket, k=str(k))
    return out


def server_mode(vllm_config: Any) -> dict[str, str]:
    """Labels of ``banditk:info`` for the server mode: model runner and CUDA-graph mode."""
    from banditk.adapter import vllm_compat

    mode = {"runner": "mrv2" if vllm_compat.uses_model_runner_v2(vllm_config) else "v1"}
    cg = getattr(getattr(vllm_config, "compilation_config", None), "cudagraph_mode", None)
    mode["cudagraph"] = "none" if cg is None else str(getattr(cg, "name", cg)).lower()
    return mode


# ---- front end: vLLM's stat-logger plugin -------------------------------------------------


class _Collector:
    """A Prometheus collector over the latest payload of each engine."""

    def __init__(self, labelnames: list[str], per_engine_labels: dict[int, list[str]], mode: dict[str, str]) -> None:
        self.labelnames = labelnames
        self.per_engine_labels = per_engine_labels
        self.mode = mode
        self.latest: dict[int, dict] = {}

    def describe(self):
        return []  # unchecked collector: families appear once payloads arrive

    def collect(self):
        from prometheus_client.core import Metric

        families: dict[str, Metric] = {}
        for idx, data in sorted(dict(self.latest).items()):
            labels = dict(zip(self.labelnames, self.per_engine_labels.get(idx, [str(idx)] * len(self.labelnames))))
            for name, sample_labels, value in samples(data, labels, self.mode):
                base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
                if base not in METRICS:
                    base = name
                kind, doc = METRICS[base]
                fam = families.get(base)
                if fam is None:
                    fam = families[base] = Metric(base, doc, kind)
                fam.add_sample(name + ("_total" if kind == "counter" else ""), sample_labels, value)
        yield from families.values()


_collector: _Collector | None = None


def _stat_logger_class() -> type:
    from vllm.v1.metrics.loggers import AggregateStatLoggerBase

    class BanditkStatLogger(AggregateStatLoggerBase):
        """vLLM stat-logger plugin: ``banditk:*`` metrics from the payload in ``SchedulerStats``.

        Inert (registers nothing) when the server runs without a banditk governor.
        """

        def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
            self.collector: _Collector | None = None
            self._failed = False
            try:
                from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY

                extra = getattr(vllm_config, "additional_config", None) or {}
                if not isinstance(extra, dict) or ADDITIONAL_CONFIG_KEY not in extra:
                    return
                self.collector = _register(vllm_config, list(engine_indexes or [0]))
            except Exception as e:
                logger.error("banditk: /metrics collector not registered (%s: %s).", type(e).__name__, e)

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            if self.collector is None or scheduler_stats is None:
                return
            try:
                data = take(scheduler_stats)
                if data is not None:
                    self.collector.latest[engine_idx] = data
            except Exception as e:  # never raise into vLLM's output loop
                if not self._failed:
                    self._failed = True
                    logger.error("banditk: metrics payload unreadable (%s: %s).", type(e).__name__, e)

        def log_engine_initialized(self) -> None:
            pass

    BanditkStatLogger.__module__ = __name__
    BanditkStatLogger.__qualname__ = "BanditkStatLogger"
    return BanditkStatLogger


def _register(vllm_config: Any, engine_indexes: list[int]) -> _Collector:
    """Register one collector in the default registry (replacing an earlier one: tests build several)."""
    global _collector
    from prometheus_client import REGISTRY

    model = getattr(getattr(vllm_config, "model_config", None), "served_model_name", None)
    model = model[0] if isinstance(model, (list, tuple)) and model else model
    per_engine = {idx: [str(model), str(idx)] for idx in engine_indexes}
    if _collector is not None:
        try:
            REGISTRY.unregister(_collector)
        except KeyError:
            pass
    _collector = _Collector(["model_name", "engine"], per_engine, server_mode(vllm_config))
    REGISTRY.register(_collector)
    return _collector


_logger_cls: type | None = None


def __getattr__(name: str) -> Any:
    # The entry point resolves ``BanditkStatLogger`` here; built on first use, so importing
    # this module (the engine core does) does not import vLLM's metrics stack.
    global _logger_cls
    if name == "BanditkStatLogger":
        if _logger_cls is None:
            _logger_cls = _stat_logger_class()
        return _logger_cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
