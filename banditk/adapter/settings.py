"""The ``governor`` / ``governor_config`` keys of vLLM's speculative config.

vLLM's ``SpeculativeConfig`` forbids unknown keys, so the plugin takes these two
out of the user's dict before vLLM sees it (:func:`split_speculative_config`),
validates them here, and carries the result to the engine-core process as
plain JSON (:meth:`AdapterSettings.to_dict`). This module never imports vLLM,
so start-up validation can be tested without an engine.

``governor_config`` keys are of two kinds:

- adapter keys (:data:`ADAPTER_KEYS`): prior file, snapshot path and interval,
  telemetry log, fallback K, state-line interval, drafter-class override, per-request
  verification;
- governor hyperparameters: every other key is handed to
  :meth:`banditk.core.config.GovernorConfig.from_dict`, which rejects unknown
  fields by name (``bucket_edges``, ``switch_penalty``, ``discount``, ``seed``...).

Examples:
    >>> clean, s = split_speculative_config(
    ...     {"method": "ngram", "num_speculative_tokens": 3, "governor": "fixed:2",
    ...      "governor_config": {"fallback_k": 1}})
    >>> sorted(clean)
    ['method', 'num_speculative_tokens']
    >>> s.governor, s.fallback_k
    ('fixed:2', 1)
    >>> split_speculative_config({"method": "ngram"})[1] is None
    True
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from banditk.core.config import check_k_set
from banditk.core.drafters import VLLM_METHOD_TO_CLASS, check_drafter_class
from banditk.core.errors import ConfigError

#: The two keys banditk adds to vLLM's speculative config.
GOVERNOR_KEY = "governor"
GOVERNOR_CONFIG_KEY = "governor_config"

#: Key under ``VllmConfig.additional_config`` that carries the settings to the engine core.
ADDITIONAL_CONFIG_KEY = "banditk"

#: ``governor_config`` keys the adapter consumes itself (the rest go to GovernorConfig).
ADAPTER_KEYS = frozenset(
    {
        "prior",
        "snapshot_path",
        "snapshot_interval_s",
        "telemetry_log",
        "telemetry_log_max_bytes",
        "telemetry_log_backups",
        "fallback_k",
        "state_log_interval_s",
        "drafter_class",
        "request_history",
        "slow_call_ms",
        "per_request",
    }
)

_FIXED = re.compile(r"^fixed(:\d+)?$")
_SIMPLE = frozenset({"bandit", "nospec", "ucb", "random", "off"})


@dataclass(frozen=True)
class AdapterSettings:
    """Validated governor settings, carried from the front end to the engine core.

    Attributes:
        governor: policy spec: ``"bandit"``, ``"ucb"``, ``"nospec"``, ``"fixed"``
            (= K_max), ``"fixed:K"``, ``"table:[[lo,hi,K],...]"``, ``"peer:NAME"`` (a baseline
            from another engine, see :func:`banditk.policies.make_policy`), ``"random"``
            (every K at random: telemetry to fit a prior from), or ``"off"``.
        governor_config: hyperparameters for :class:`banditk.core.config.GovernorConfig`.
        prior: path of a prior/snapshot file to start from, or None.
        snapshot_path: where to write the live posterior, or None.
        snapshot_interval_s: seconds between periodic snapshots (0: only at shutdown).
        telemetry_log: path of a JSONL step log, or None.
        telemetry_log_max_bytes: the log rotates past this size.
        telemetry_log_backups: rotated files kept.
        fallback_k: K used when the governor raises or returns an invalid K
            (None: K_max, i.e. what vLLM would do without banditk; the largest K of
            ``governor_config.k_set`` when that leaves K_max out).
        state_log_interval_s: seconds between state lines in vLLM's log (0: never).
        drafter_class: overrides the class derived from vLLM's ``method``.
        request_history: per-request acceptance records kept (bounded ring); 0, the default,
            keeps none: nothing reads them but an operator debugging one request, and they cost
            a dictionary lookup and an append per request per step.
        slow_call_ms: the governor's budget per step (``select`` plus the previous
            ``observe``); a step over it is a fault, and a few in a row make the runtime
            use the fallback K and bypass the governor for a while
            (:mod:`banditk.adapter.breaker`). The bandit takes ~0.03-0.1 ms.
        per_request: verify each request's drafts by its own acceptance within one budget per
            step (:mod:`banditk.adapter.per_request`, docs/per-request.md); the bandit still
            chooses K. Needs ``governor: "bandit"``.
        k_max: vLLM's ``num_speculative_tokens`` (filled in once known).
        method: vLLM's speculative ``method`` (filled in once known).
    """

    governor: str
    governor_config: dict = field(default_factory=dict)
    prior: str | None = None
    snapshot_path: str | None = None
    snapshot_interval_s: float = 60.0
    telemetry_log: str | None = None
    telemetry_log_max_bytes: int = 16 * 1024 * 1024
    telemetry_log_backups: int = 2
    fallback_k: int | None = None
    state_log_interval_s: float = 30.0
    drafter_class: str | None = None
    request_history: int = 0
    slow_call_ms: float = 10.0
    per_request: bool = False
    k_max: int | None = None
    method: str | None = None

    @property
    def enabled(self) -> bool:
        """False for ``"off"``: vLLM then runs exactly as without banditk."""
        return self.governor != "off"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> AdapterSettings:
        """The settings the plugin stored in vLLM's config; a clear error where there are none."""
        if not isinstance(d, dict):
            raise ConfigError(
                "banditk's governed scheduler was selected but vLLM's config holds no banditk settings "
                f"(additional_config[{ADDITIONAL_CONFIG_KEY!r}] is {d!r}): start vLLM with "
                '"governor" in --speculative-config, which the banditk plugin turns into these settings.'
            )
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def resolve(self, *, method: str | None, k_max: int) -> AdapterSettings:
        """Fill in what vLLM decided (method, K_max) and check everything that depends on it.

        Raises:
            ConfigError: naming the field and value.
        """
        _check_int(k_max, "num_speculative_tokens", 1, 64)
        if self.fallback_k is not None and self.fallback_k > k_max:
            raise ConfigError(
                f"governor_config.fallback_k must be in [0, num_speculative_tokens={k_max}], got {self.fallback_k}."
            )
        m = re.match(r"^fixed:(\d+)$", self.governor)
        if m and int(m.group(1)) > k_max:
            raise ConfigError(f"governor={self.governor!r} asks for K above num_speculative_tokens={k_max}.")
        out = dataclasses.replace(self, k_max=int(k_max), method=method)
        out.drafter_class_for()  # raises if the method has no class
        arms = out.arm_set()
        if self.fallback_k is not None and self.fallback_k not in arms:
            raise ConfigError(
                f"governor_config.fallback_k={self.fallback_k} is not in governor_config.k_set={list(arms)}."
            )
        return out

    def arm_set(self) -> tuple[int, ...]:
        """The K the server may run: ``governor_config.k_set``, or every K in 0..K_max.

        On a GPU each of them gets its own FULL decode-graph ladder (:mod:`.graph_mode`).
        """
        k_max = int(self.k_max or 0)
        ks = self.governor_config.get("k_set")
        return tuple(range(k_max + 1)) if ks is None else check_k_set(ks, k_max, "governor_config.k_set")

    def drafter_class_for(self) -> str:
        """The drafter class: the override if given, else the class of vLLM's method."""
        if self.drafter_class is not None:
            return check_drafter_class(self.drafter_class, "governor_config.drafter_class")
        cls = VLLM_METHOD_TO_CLASS.get(self.method or "")
        if cls is None:
            raise ConfigError(
                f"speculative method={self.method!r} has no banditk drafter class; set "
                f"governor_config.drafter_class to one of {sorted(set(VLLM_METHOD_TO_CLASS.values()))}."
            )
        return cls

    @property
    def effective_fallback_k(self) -> int:
        if self.fallback_k is not None:
            return self.fallback_k
        return max(self.arm_set())  # K_max, unless k_set leaves it out


def split_speculative_config(spec: dict | None) -> tuple[dict | None, AdapterSettings | None]:
    """Take the banditk keys out of a speculative-config dict.

    Returns a copy of ``spec`` without ``governor``/``governor_config``, and the
    validated settings (None when ``governor`` is absent). The input is not modified.

    Raises:
        ConfigError: a governor key is malformed (the message names field and value).
    """
    if spec is None:
        return None, None
    if not isinstance(spec, dict):
        return spec, None
    norm = {str(k).replace("-", "_"): v for k, v in spec.items()}
    if GOVERNOR_KEY not in norm:
        if GOVERNOR_CONFIG_KEY in norm:
            raise ConfigError(
                'speculative_config has `governor_config` but no `governor`; add e.g. "governor": "bandit".'
            )
        return dict(spec), None
    clean = {k: v for k, v in spec.items() if str(k).replace("-", "_") not in (GOVERNOR_KEY, GOVERNOR_CONFIG_KEY)}
    settings = parse_settings(norm[GOVERNOR_KEY], norm.get(GOVERNOR_CONFIG_KEY))
    return clean, settings


def parse_settings(governor: Any, governor_config: Any) -> AdapterSettings:
    """Validate the two keys; see :class:`AdapterSettings` for their meaning.

    >>> parse_settings("bandit", {"snapshot_interval_s": -1})
    Traceback (most recent call last):
    ...
    banditk.core.errors.ConfigError: governor_config.snapshot_interval_s must be a number >= 0, got -1.
    """
    governor = _check_governor(governor)
    if governor_config is None:
        governor_config = {}
    if not isinstance(governor_config, dict):
        raise ConfigError(
            f"governor_config must be a JSON object, got {type(governor_config).__name__}: {governor_config!r}."
        )
    kw: dict[str, Any] = {}
    gov: dict[str, Any] = {}
    for key, value in governor_config.items():
        (kw if key in ADAPTER_KEYS else gov)[key] = value
    for key in ("drafter_class", "k_max"):
        if key in gov:
            raise ConfigError(
                f"governor_config.{key} is set by vLLM's speculative config, not here (got {gov[key]!r})."
            )
    for key in ("prior", "snapshot_path", "telemetry_log"):
        if key in kw and kw[key] is not None:
            kw[key] = _check_path(kw[key], key, must_exist=(key == "prior"))
    for key in ("snapshot_interval_s", "state_log_interval_s"):
        if key in kw:
            kw[key] = _check_seconds(kw[key], key)
    if "fallback_k" in kw and kw["fallback_k"] is not None:
        kw["fallback_k"] = _check_int(kw["fallback_k"], "governor_config.fallback_k", 0, 64)
    if "telemetry_log_max_bytes" in kw:
        kw["telemetry_log_max_bytes"] = _check_int(
            kw["telemetry_log_max_bytes"], "governor_config.telemetry_log_max_bytes", 1024, 1 << 40
        )
    if "telemetry_log_backups" in kw:
        kw["telemetry_log_backups"] = _check_int(
            kw["telemetry_log_backups"], "governor_config.telemetry_log_backups", 0, 100
        )
    if "request_history" in kw:
        kw["request_history"] = _check_int(kw["request_history"], "governor_config.request_history", 0, 100_000)
    if "slow_call_ms" in kw:
        v = kw["slow_call_ms"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"governor_config.slow_call_ms must be a number of milliseconds > 0, got {v!r}.")
        kw["slow_call_ms"] = float(v)
    if "per_request" in kw:
        if not isinstance(kw["per_request"], bool):
            raise ConfigError(f"governor_config.per_request must be true or false, got {kw['per_request']!r}.")
        if kw["per_request"] and governor != "bandit":
            raise ConfigError(
                f"governor_config.per_request needs governor 'bandit' (it wraps the bandit's K), got {governor!r}."
            )
    if "drafter_class" in kw and kw["drafter_class"] is not None:
        try:
            check_drafter_class(kw["drafter_class"], "governor_config.drafter_class")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return AdapterSettings(governor=governor, governor_config=gov, **kw)


def _check_governor(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"speculative_config.governor must be a string, got {type(value).__name__}: {value!r}.")
    v = value.strip()
    if v in _SIMPLE or _FIXED.match(v) or v.startswith(("table:", "peer:")):
        return v
    raise ConfigError(
        f"speculative_config.governor={value!r} is not a policy; expected one of "
        "'bandit', 'ucb', 'nospec', 'fixed', 'fixed:K', 'table:[[lo,hi,K],...]', 'peer:NAME', 'random', 'off'."
    )


def _check_int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}.")
    return int(value)


def _check_seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"governor_config.{key} must be a number >= 0, got {value!r}.")
    return float(value)


def _check_path(value: Any, key: str, *, must_exist: bool) -> str:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise ConfigError(f"governor_config.{key} must be a file path, got {value!r}.")
    path = os.fspath(value)
    if must_exist and not os.path.isfile(path):
        raise ConfigError(f"governor_config.{key}={path!r} does not exist or is not a file.")
    if not must_exist:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ConfigError(f"governor_config.{key}={path!r}: its directory {parent!r} does not exist.")
        if os.path.isdir(path):
            raise ConfigError(f"governor_config.{key}={path!r} is a directory; give a file name.")
        _probe_writable(parent, key, path)
    return path


def _probe_writable(folder: str, key: str, path: str) -> None:
    """Create and remove a file in ``folder``: a folder that exists but cannot be written fails
    at start-up, before the model loads, not at the first snapshot."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".banditk-write-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(
            f"governor_config.{key}={path!r}: its directory {folder!r} cannot be written ({e.strerror})."
        ) from None
