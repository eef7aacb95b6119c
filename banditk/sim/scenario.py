"""Scenario files: what the simulator serves, on what, and how it changes.

A scenario is JSON (see ``experiments/scenarios/``)::

    {"name": "...", "hardware": "gb10", "model": "qwen3.5-122b-a10b-int4",
     "drafter": {"class": "mtp", "k_max": 4, "acceptance": [0.85, 0.75, 0.65, 0.55],
                 "request_dispersion": 20.0},
     "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 256},
     "phases": [{"at_step": 5000, "drafter": {"acceptance": [0.5, 0.3, 0.2, 0.1]}},
                {"at_step": 8000, "workload": {"concurrency": 32}}],
     "steps": 20000, "seed": 0}

``acceptance`` is per-position conditional acceptance. Requests drawn from several populations
(code against chat, a quoted passage against fresh text) give ``drafter.populations`` instead::

    "drafter": {"class": "mtp", "k_max": 4, "request_dispersion": 20.0,
                "populations": [{"name": "code", "weight": 1, "acceptance": [0.95, 0.9, 0.85, 0.8]},
                                {"name": "chat", "weight": 3, "acceptance": [0.5, 0.35, 0.25, 0.2]}]}

Each request is admitted from one population, drawn by ``weight`` (relative, each > 0), and draws
its own acceptance around that population's as a single-population scenario does, at the
population's ``request_dispersion`` (the drafter's when absent). ``drafter.acceptance`` is then
the mixture's mean per position (a summary; requests never draw from it). A phase may give
``populations`` too; a phase of a mixture scenario may not give ``acceptance`` or
``request_dispersion``. ``workload`` gives
either ``concurrency`` (closed loop) or ``arrival_rate`` (requests/s, Poisson
open loop). Optional fields: ``workload.max_num_seqs`` (256),
``workload.max_num_batched_tokens`` (8192), ``workload.kv_capacity_tokens``
(derived from device memory when absent), ``table`` (the vLLM batch-size table
used by the ``table`` policy, default ``[[1,4,2],[5,512,0]]`` scaled to k_max),
``workload.prefix_cached_tokens`` (0: the first N tokens of a prompt are a prefix held in
vLLM's prefix cache, as in vLLM's ``prefix_repetition`` benchmark, fixed per admitted request:
each request keeps the value in force when it was admitted, even after a phase changes it, and
the requests admitted with the same value share one prefix, held once; it is neither prefilled
again nor counted per request against the KV cache, but attention still reads it for every
request), ``workload.max_model_len`` (the model profile's
context limit when absent: no request's prompt plus output may exceed it),
``noise_cv`` (0.03, step-time noise: the log-normal spread of one step), ``noise_ar1`` (0: the
lag-1 correlation of that noise from step to step, a clock whose speed drifts), ``noise_spike_p``
and ``noise_spike_mean`` (0: the share of steps that stall, and a stall's mean extra time as a
fraction of the step, exponential), ``dynamic_cudagraph`` ("PIECEWISE": the
mode vLLM's own dynamic K runs in, i.e. the ``table`` policies and ``peer:vllm-adaptive-k``;
governed policies run in their plugin's mode, see :mod:`banditk.sim.policies`),
``warmup_steps`` (200).
Every error names the field and shows the value.

``workload.prompt_tokens`` is an integer (every request the same) or a distribution drawn per
request at admission with the simulator's seeded generator (deterministic under a seed):

- ``{"mix": [[400, 1], [4000, 1]]}``: a prompt of 400 or 4,000 tokens, weights relative
  (normalised to sum 1; each weight > 0, tokens >= 1);
- ``{"lognormal": {"median": 1000, "sigma": 1.0, "max": 32768}}``: a long tail,
  ``round(median * exp(sigma * N(0, 1)))`` clipped to ``[min, max]`` (``min`` optional, 1).

A phase may change ``prompt_tokens`` (e.g. short prompts first, then long ones): requests
admitted from its ``at_step`` on draw from the new one. An integer ``prompt_tokens`` draws
nothing, so such a scenario replays exactly as before the distributions existed.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from banditk.core.drafters import DRAFTER_CLASSES
from banditk.core.errors import ConfigError
from banditk.sim.hardware import HARDWARE
from banditk.sim.models import MODELS


class ScenarioError(ConfigError):
    """A scenario file is malformed; the message names the field and the value."""


_TOP = {
    "name",
    "hardware",
    "model",
    "drafter",
    "workload",
    "phases",
    "steps",
    "seed",
    "table",
    "noise_cv",
    "noise_ar1",
    "noise_spike_p",
    "noise_spike_mean",
    "dynamic_cudagraph",
    "warmup_steps",
    "description",
}
_DRAFTER = {"class", "k_max", "acceptance", "request_dispersion", "populations"}
_POPULATION = {"name", "weight", "acceptance", "request_dispersion"}
_WORKLOAD = {
    "concurrency",
    "arrival_rate",
    "prompt_tokens",
    "output_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_capacity_tokens",
    "prefix_cached_tokens",
    "max_model_len",
}


def _fail(where: str, field_: str, value: Any, why: str) -> ScenarioError:
    return ScenarioError(f"{where}: `{field_}`={value!r} {why}")


def _int(d: dict, key: str, where: str, prefix: str, lo: int, default: Any = ...) -> int:
    if key not in d:
        if default is ...:
            raise ScenarioError(f"{where}: missing required field `{prefix}{key}`.")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, prefix + key, v, "must be an integer.")
    if v < lo:
        raise _fail(where, prefix + key, v, f"must be >= {lo}.")
    return v


def _num(d: dict, key: str, where: str, prefix: str, lo: float, default: Any = ..., strict: bool = True) -> float:
    if key not in d:
        if default is ...:
            raise ScenarioError(f"{where}: missing required field `{prefix}{key}`.")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _fail(where, prefix + key, v, "must be a finite number.")
    if v < lo or (strict and v == lo):
        raise _fail(where, prefix + key, v, f"must be {'>' if strict else '>='} {lo}.")
    return float(v)


def _unknown(d: dict, allowed: set[str], where: str, prefix: str) -> None:
    for k in d:
        if k not in allowed:
            raise _fail(where, prefix + str(k), d[k], f"is not a known field (known: {', '.join(sorted(allowed))}).")


def _acceptance(v: Any, k_max: int, where: str, prefix: str) -> list[float]:
    if not isinstance(v, list) or not v:
        raise _fail(where, prefix + "acceptance", v, "must be a non-empty list of probabilities.")
    if len(v) != k_max:
        raise _fail(where, prefix + "acceptance", v, f"must have k_max={k_max} entries, has {len(v)}.")
    for i, p in enumerate(v):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 <= p <= 1.0):
            raise _fail(where, f"{prefix}acceptance[{i}]", p, "must be a probability in [0, 1].")
    return [float(p) for p in v]


def _dispersion(d: dict, where: str, prefix: str, default: float) -> float:
    if "request_dispersion" not in d:
        return default
    v = d["request_dispersion"]
    if v is None:
        return math.inf
    return _num(d, "request_dispersion", where, prefix, 0.0)


def _populations(v: Any, k_max: int, where: str, prefix: str, disp: float) -> list[Population]:
    """``drafter.populations``: a non-empty list of {name?, weight, acceptance, request_dispersion?}."""
    field_ = prefix + "populations"
    if not isinstance(v, list) or not v:
        raise _fail(where, field_, v, "must be a non-empty list of {weight, acceptance} objects.")
    pops, names = [], set()
    for i, p in enumerate(v):
        pre = f"{field_}[{i}]."
        if not isinstance(p, dict):
            raise _fail(where, f"{field_}[{i}]", p, "must be an object with weight and acceptance.")
        _unknown(p, _POPULATION, where, pre)
        name = p.get("name", f"population-{i}")
        if not isinstance(name, str) or not name or name in names:
            raise _fail(where, pre + "name", name, "must be a non-empty string, unique among the populations.")
        names.add(name)
        weight = _num(p, "weight", where, pre, 0.0)
        acc = _acceptance(p.get("acceptance"), k_max, where, pre)
        pops.append(Population(name, weight, acc, _dispersion(p, where, pre, disp)))
    total = sum(p.weight for p in pops)
    return [Population(p.name, p.weight / total, p.acceptance, p.request_dispersion) for p in pops]


def mixture_mean(pops: list[Population]) -> list[float]:
    """The populations' acceptance per position, averaged by weight.

    >>> mixture_mean([Population("a", 0.25, [1.0], 20.0), Population("b", 0.75, [0.6], 20.0)])
    [0.7]
    """
    return [round(sum(p.weight * p.acceptance[i] for p in pops), 12) for i in range(len(pops[0].acceptance))]


def _positive_int(v: Any, where: str, field_: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, field_, v, "must be an integer.")
    if v < 1:
        raise _fail(where, field_, v, "must be >= 1.")
    return v


def parse_prompt_tokens(v: Any, where: str = "scenario", field_: str = "workload.prompt_tokens") -> int | dict:
    """Validate ``prompt_tokens``: an integer, ``{"mix": ...}`` or ``{"lognormal": ...}``.

    Returns the integer, or the distribution in a normal form (mix weights summing to 1,
    lognormal with ``min``). Raises :class:`ScenarioError` naming the field and the value.

    >>> parse_prompt_tokens({"mix": [[400, 1], [4000, 3]]})
    {'mix': [[400, 0.25], [4000, 0.75]]}
    >>> parse_prompt_tokens({"lognormal": {"median": 900, "sigma": 0.5, "max": 8192}})
    {'lognormal': {'median': 900, 'sigma': 0.5, 'max': 8192, 'min': 1}}
    """
    if not isinstance(v, dict):
        return _positive_int(v, where, field_)
    if len(v) != 1 or next(iter(v)) not in ("mix", "lognormal"):
        raise _fail(
            where,
            field_,
            v,
            'must be an integer, {"mix": [[tokens, weight], ...]} or '
            '{"lognormal": {"median": N, "sigma": s, "max": M}}.',
        )
    kind, body = next(iter(v.items()))
    f = f"{field_}.{kind}"
    if kind == "mix":
        if not isinstance(body, list) or not body:
            raise _fail(where, f, body, "must be a non-empty list of [tokens, weight] pairs.")
        rows = []
        for i, row in enumerate(body):
            if not isinstance(row, list) or len(row) != 2:
                raise _fail(where, f"{f}[{i}]", row, "must be a [tokens, weight] pair.")
            tok = _positive_int(row[0], where, f"{f}[{i}][0]")
            w = row[1]
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
                raise _fail(where, f"{f}[{i}][1]", w, "must be a weight > 0.")
            rows.append([tok, float(w)])
        total = sum(w for _, w in rows)
        return {"mix": [[t, w / total] for t, w in rows]}
    if not isinstance(body, dict):
        raise _fail(where, f, body, 'must be an object {"median": N, "sigma": s, "max": M}.')
    _unknown(body, {"median", "sigma", "max", "min"}, where, f + ".")
    median = _num(body, "median", where, f + ".", 0.0)
    sigma = _num(body, "sigma", where, f + ".", 0.0, strict=False)
    hi = _int(body, "max", where, f + ".", 1)
    lo = _int(body, "min", where, f + ".", 1, 1)
    if lo > hi:
        raise _fail(where, f + ".min", lo, f"must be <= `{f}.max`={hi}.")
    if not lo <= median <= hi:
        raise _fail(where, f + ".median", body["median"], f"must lie in [min={lo}, max={hi}].")
    return {"lognormal": {"median": body["median"], "sigma": sigma, "max": hi, "min": lo}}


def prompt_bounds(spec: int | dict) -> tuple[int, int]:
    """Smallest and largest prompt a ``prompt_tokens`` value can draw."""
    if isinstance(spec, dict):
        if "mix" in spec:
            toks = [t for t, _ in spec["mix"]]
            return min(toks), max(toks)
        ln = spec["lognormal"]
        return int(ln["min"]), int(ln["max"])
    return int(spec), int(spec)


def prompt_mean(spec: int | dict) -> float:
    """Expected prompt length of a ``prompt_tokens`` value (lognormal: before clipping, then clipped)."""
    if isinstance(spec, dict):
        if "mix" in spec:
            return float(sum(t * w for t, w in spec["mix"]))
        ln = spec["lognormal"]
        m = ln["median"] * math.exp(0.5 * ln["sigma"] ** 2)
        return float(min(max(m, ln["min"]), ln["max"]))
    return float(spec)


def draw_prompt_tokens(spec: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` prompt lengths from a distribution (a dict of :func:`parse_prompt_tokens`).

    >>> spec = parse_prompt_tokens({"mix": [[400, 1], [4000, 1]]})
    >>> sorted(set(draw_prompt_tokens(spec, 50, np.random.default_rng(0)).tolist()))
    [400, 4000]
    """
    if "mix" in spec:
        toks = np.array([t for t, _ in spec["mix"]], dtype=np.int64)
        p = np.array([w for _, w in spec["mix"]], dtype=float)
        return toks[rng.choice(toks.size, size=n, p=p / p.sum())]
    ln = spec["lognormal"]
    x = np.rint(ln["median"] * np.exp(ln["sigma"] * rng.standard_normal(n)))
    return np.clip(x, ln["min"], ln["max"]).astype(np.int64)


def _workload(w: Any, where: str, prefix: str, base: dict | None) -> dict:
    if not isinstance(w, dict):
        raise _fail(where, prefix.rstrip("."), w, "must be an object.")
    _unknown(w, _WORKLOAD, where, prefix)
    if "concurrency" in w and "arrival_rate" in w:
        raise _fail(where, prefix + "arrival_rate", w["arrival_rate"], "cannot be given together with `concurrency`.")
    out = dict(base or {})
    if "concurrency" in w:
        out["concurrency"] = _int(w, "concurrency", where, prefix, 1)
        out["arrival_rate"] = None
    if "arrival_rate" in w:
        out["arrival_rate"] = _num(w, "arrival_rate", where, prefix, 0.0)
        out["concurrency"] = None
    if base is None and out.get("concurrency") is None and out.get("arrival_rate") is None:
        raise ScenarioError(f"{where}: `{prefix}` needs `concurrency` (closed loop) or `arrival_rate` (open loop).")
    for key, lo, dflt in (
        ("prompt_tokens", 1, None),
        ("output_tokens", 1, None),
        ("max_num_seqs", 1, 256),
        ("max_num_batched_tokens", 1, 8192),
        ("kv_capacity_tokens", 1, None),
        ("prefix_cached_tokens", 0, 0),
        ("max_model_len", 1, None),
    ):
        if key == "prompt_tokens" and key in w:
            out[key] = parse_prompt_tokens(w[key], where, prefix + key)
        elif key in w:
            out[key] = _int(w, key, where, prefix, lo)
        elif base is None:
            if dflt is None and key in ("prompt_tokens", "output_tokens"):
                raise ScenarioError(f"{where}: missing required field `{prefix}{key}`.")
            out[key] = dflt
    return out


def _table(v: Any, where: str, k_max: int) -> list[list[int]]:
    if not isinstance(v, list) or not v:
        raise _fail(where, "table", v, "must be a non-empty list of [lo, hi, K] rows.")
    for i, row in enumerate(v):
        if (
            not isinstance(row, list)
            or len(row) != 3
            or any(isinstance(x, bool) or not isinstance(x, int) for x in row)
        ):
            raise _fail(where, f"table[{i}]", row, "must be [lo, hi, K] integers.")
        lo, hi, k = row
        if lo < 1 or hi < lo:
            raise _fail(where, f"table[{i}]", row, "needs 1 <= lo <= hi.")
        if not 0 <= k <= k_max:
            raise _fail(where, f"table[{i}][2]", k, f"must be in [0, k_max={k_max}].")
    return [list(r) for r in v]


def _check_context(wl: dict, phases: list, model_limit: int, where: str) -> None:
    """Every workload in force (the base, then each phase on top) fits the context limit, and
    the shared prefix is shorter than every prompt."""
    cur = dict(wl)
    for i, ph in enumerate([None, *phases]):
        pre = "workload." if ph is None else f"phases[{i - 1}].workload."
        if ph is not None:
            if not ph.workload:
                continue
            cur.update({k: v for k, v in ph.workload.items() if v is not None})
        lo, hi = prompt_bounds(cur["prompt_tokens"])
        limit = cur.get("max_model_len") or model_limit
        if limit and hi + cur["output_tokens"] > limit:
            raise ScenarioError(
                f"{where}: `{pre}prompt_tokens`={cur['prompt_tokens']!r} (up to {hi} tokens) plus "
                f"`output_tokens`={cur['output_tokens']} exceeds the context limit max_model_len={limit}."
            )
        cached = cur.get("prefix_cached_tokens") or 0
        if cached >= lo:
            raise _fail(
                where,
                pre + "prefix_cached_tokens",
                cached,
                f"must be shorter than the shortest prompt ({lo} tokens of `prompt_tokens`).",
            )


@dataclass(frozen=True)
class Population:
    """A share of the requests and the acceptance they draw around (``drafter.populations``).

    Attributes:
        name: a label for reports ("code", "chat"); ``population-<i>`` when the file gives none.
        weight: the share of admitted requests, normalised over the scenario's populations.
        acceptance: per-position conditional acceptance, k_max entries.
        request_dispersion: the Beta concentration of a request's draw around ``acceptance``.
    """

    name: str
    weight: float
    acceptance: list[float]
    request_dispersion: float


@dataclass
class Phase:
    """A change applied from step ``at_step`` on."""

    at_step: int
    acceptance: list[float] | None = None
    request_dispersion: float | None = None
    workload: dict | None = None
    populations: list[Population] | None = None


@dataclass
class Scenario:
    """A validated scenario. Build with :func:`load_scenario` or :func:`parse_scenario`."""

    name: str
    hardware: str
    model: str
    drafter_class: str
    k_max: int
    acceptance: list[float]
    request_dispersion: float
    workload: dict
    phases: list[Phase] = field(default_factory=list)
    steps: int = 2200
    seed: int = 0
    table: list[list[int]] = field(default_factory=list)
    noise_cv: float = 0.03
    noise_ar1: float = 0.0
    noise_spike_p: float = 0.0
    noise_spike_mean: float = 0.0
    dynamic_cudagraph: str = "PIECEWISE"
    warmup_steps: int = 200
    raw: dict = field(default_factory=dict, repr=False)
    #: The request populations; empty: one population, ``acceptance`` at ``request_dispersion``.
    populations: list[Population] = field(default_factory=list)

    def with_workload(self, **changes: Any) -> Scenario:
        """A copy with workload fields replaced (e.g. ``concurrency=16``) and no load phases."""
        s = copy.deepcopy(self)
        if "concurrency" in changes:
            s.workload["arrival_rate"] = None
        if changes.get("arrival_rate") is not None:
            s.workload["concurrency"] = None
        s.workload.update(changes)
        s.phases = [p for p in s.phases if p.workload is None]
        return s


def parse_scenario(data: Any, where: str = "scenario") -> Scenario:
    """Validate a scenario dict; raise :class:`ScenarioError` naming the field and value.

    >>> s = parse_scenario({"name": "x", "hardware": "gb10", "model": "qwen3.5-122b-a10b-int4",
    ...     "drafter": {"class": "mtp", "k_max": 2, "acceptance": [0.8, 0.6]},
    ...     "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180}})
    >>> s.table
    [[1, 4, 2], [5, 512, 0]]
    """
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: must be a JSON object, got {type(data).__name__}.")
    _unknown(data, _TOP, where, "")
    name = data.get("name", "unnamed")
    if not isinstance(name, str) or not name:
        raise _fail(where, "name", name, "must be a non-empty string.")
    hw = data.get("hardware")
    if hw not in HARDWARE:
        raise _fail(where, "hardware", hw, f"is not a known hardware profile ({', '.join(sorted(HARDWARE))}).")
    model = data.get("model")
    if model not in MODELS:
        raise _fail(where, "model", model, f"is not a known model profile ({', '.join(sorted(MODELS))}).")
    d = data.get("drafter")
    if not isinstance(d, dict):
        raise _fail(where, "drafter", d, "must be an object with class, k_max, acceptance.")
    _unknown(d, _DRAFTER, where, "drafter.")
    cls = d.get("class")
    if cls not in DRAFTER_CLASSES:
        raise _fail(where, "drafter.class", cls, f"is not a drafter class ({', '.join(sorted(DRAFTER_CLASSES))}).")
    if cls not in MODELS[model].drafters:
        have = ", ".join(sorted(MODELS[model].drafters)) or "none"
        raise _fail(where, "drafter.class", cls, f"has no row for model {model!r} (rows: {have}).")
    k_max = _int(d, "k_max", where, "drafter.", 1)
    if k_max > 16:
        raise _fail(where, "drafter.k_max", k_max, "must be <= 16.")
    disp = _dispersion(d, where, "drafter.", 20.0)
    pops: list[Population] = []
    if "populations" in d:
        if "acceptance" in d:
            raise _fail(
                where, "drafter.acceptance", d["acceptance"], "must be left out when `drafter.populations` is given."
            )
        pops = _populations(d["populations"], k_max, where, "drafter.", disp)
        acc = mixture_mean(pops)
    else:
        acc = _acceptance(d.get("acceptance"), k_max, where, "drafter.")
    wl = _workload(data.get("workload"), where, "workload.", None)
    steps = _int(data, "steps", where, "", 1, 2200)
    seed = _int(data, "seed", where, "", 0, 0)
    warm = _int(data, "warmup_steps", where, "", 0, 200)
    noise = _num(data, "noise_cv", where, "", 0.0, 0.03, strict=False)
    ar1 = _num(data, "noise_ar1", where, "", 0.0, 0.0, strict=False)
    if ar1 >= 1.0:
        raise _fail(where, "noise_ar1", ar1, "must be in [0, 1).")
    spike_p = _num(data, "noise_spike_p", where, "", 0.0, 0.0, strict=False)
    if spike_p > 1.0:
        raise _fail(where, "noise_spike_p", spike_p, "must be a probability in [0, 1].")
    spike_mean = _num(data, "noise_spike_mean", where, "", 0.0, 0.0, strict=False)
    mode = data.get("dynamic_cudagraph", "PIECEWISE")
    if mode not in ("PIECEWISE", "FULL"):
        raise _fail(where, "dynamic_cudagraph", mode, "must be 'PIECEWISE' or 'FULL'.")
    if "table" in data:
        table = _table(data["table"], where, k_max)
    else:
        table = [[1, 4, min(2, k_max)], [5, 512, 0]]
    phases_raw = data.get("phases", [])
    if not isinstance(phases_raw, list):
        raise _fail(where, "phases", phases_raw, "must be a list.")
    phases: list[Phase] = []
    # A scenario with populations anywhere changes its requests only through populations.
    mixture = bool(pops) or any(
        isinstance(p, dict) and isinstance(p.get("drafter"), dict) and "populations" in p["drafter"] for p in phases_raw
    )
    for i, p in enumerate(phases_raw):
        pre = f"phases[{i}]."
        if not isinstance(p, dict):
            raise _fail(where, f"phases[{i}]", p, "must be an object.")
        _unknown(p, {"at_step", "drafter", "workload"}, where, pre)
        ph = Phase(at_step=_int(p, "at_step", where, pre, 0))
        if "drafter" in p:
            pd = p["drafter"]
            if not isinstance(pd, dict):
                raise _fail(where, pre + "drafter", pd, "must be an object.")
            _unknown(pd, {"acceptance", "request_dispersion", "populations"}, where, pre + "drafter.")
            for key in ("acceptance", "request_dispersion"):
                if mixture and key in pd:
                    raise _fail(
                        where, f"{pre}drafter.{key}", pd[key],
                        "cannot change a mixture scenario's requests; give the phase `populations`.",
                    )  # fmt: skip
            if "populations" in pd:
                ph.populations = _populations(pd["populations"], k_max, where, pre + "drafter.", disp)
            if "acceptance" in pd:
                ph.acceptance = _acceptance(pd["acceptance"], k_max, where, pre + "drafter.")
            if "request_dispersion" in pd:
                ph.request_dispersion = _dispersion(pd, where, pre + "drafter.", disp)
        if "workload" in p:
            ph.workload = _workload(p["workload"], where, pre + "workload.", {})
        phases.append(ph)
    phases.sort(key=lambda ph: ph.at_step)
    _check_context(wl, phases, MODELS[model].max_model_len, where)
    return Scenario(
        name=name,
        hardware=hw,
        model=model,
        drafter_class=cls,
        k_max=k_max,
        acceptance=acc,
        request_dispersion=disp,
        workload=wl,
        phases=phases,
        steps=steps,
        seed=seed,
        table=table,
        noise_cv=noise,
        noise_ar1=ar1,
        noise_spike_p=spike_p,
        noise_spike_mean=spike_mean,
        dynamic_cudagraph=mode,
        warmup_steps=warm,
        raw=copy.deepcopy(data),
        populations=pops,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario JSON file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"`--scenario`={str(path)!r} cannot be read: {e.strerror}.") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}).") from e
    return parse_scenario(data, where=str(p))
