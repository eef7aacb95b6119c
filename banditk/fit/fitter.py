"""The whole fit: traces in, a checked prior out.

Examples:
    ``fit(["trace.jsonl"], FitOptions())`` returns a :class:`FitResult`;
    ``write_prior(result, "prior.json")`` writes it, or raises
    :class:`~banditk.fit.errors.DiagnosticsFailedError` if it failed its diagnostics.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from banditk import __version__
from banditk.core.buckets import DEFAULT_BUCKET_EDGES, NO_CONTEXT_EDGES, check_bucket_edges, check_context_edges
from banditk.core.errors import ConfigError
from banditk.fit import data as data_mod
from banditk.fit.acceptance import AcceptanceFit, fit_acceptance
from banditk.fit.build import context_parts, governor_regression, prior_stats
from banditk.fit.diagnostics import Thresholds, nuts_failures, ppc_failures, svi_failures
from banditk.fit.errors import DiagnosticsFailedError, FitInputError
from banditk.fit.model import MODEL_NAME, MODEL_SUMMARY, Posterior, model_inputs, single_thread
from banditk.fit.ppc import PpcResult, posterior_predictive
from banditk.fit.shape import LatencyShape, choose_shape
from banditk.io.prior import DrafterKey, Prior, now_iso
from banditk.io.priorfile import save_prior
from banditk.posterior.latency_model import FEATURES

METHODS = ("auto", "nuts", "svi")
#: ``--method auto`` uses NUTS up to this many steps and SVI above. The fit's cost does
#: not grow with steps (they are aggregated per (B, K)), but with many steps the
#: posterior is close to Gaussian (Bernstein-von Mises), which is exactly SVI's
#: multivariate-normal guide, so exact sampling buys nothing there.
NUTS_MAX_STEPS = 20_000
#: NUTS runs at the first target acceptance, and again at the next while it diverges too
#: often: a divergence means the step size is too large where the posterior bends (a
#: weight against 0), and a smaller step is the remedy; it costs ~5x the time, so only then.
NUTS_TARGET_ACCEPT = (0.85, 0.95)
#: A run whose chains disagree or mix slowly (r-hat or ESS short of the gate) is run again
#: with this many times the warmup and draws, up to :data:`NUTS_MAX_LENGTHEN` times. How many
#: draws a posterior needs depends on its shape and on the machine's floating-point paths (a
#: NUTS trajectory is chaotic), so a fixed length sits near the gate on some machines.
NUTS_LENGTHEN = 2
NUTS_MAX_LENGTHEN = 2


@dataclass(frozen=True)
class FitOptions:
    """Options of :func:`fit` (the CLI flags of ``banditk fit``)."""

    method: str = "auto"
    """``nuts``, ``svi`` or ``auto`` (NUTS up to :data:`NUTS_MAX_STEPS` steps, SVI above)."""
    strength: float = 200.0
    """Prior-strength cap: no cell, position or the regression weighs more than this many observations."""
    bucket_edges: tuple[int, ...] = DEFAULT_BUCKET_EDGES
    """Batch-size bucket edges of the prior's cells (must match the governor's)."""
    context_edges: tuple[int, ...] = NO_CONTEXT_EDGES
    """Context bucket edges (tokens per request) of the prior's cells (must match the governor's)."""
    k_max: int | None = None
    """Largest K of the prior (default: the traces' k_max)."""
    hardware: str | None = None
    """Hardware recorded in the prior (default: the trace header's ``hardware``)."""
    drafter_class: str | None = None
    """If given, refuse traces of any other drafter class."""
    seed: int = 0
    """Seed of all randomness in the fit."""
    chains: int = 2
    warmup: int = 400
    samples: int = 400
    svi_max_steps: int = 6000
    shape_terms: bool = True
    """Add the per-request, MoE-expert and compute-knee terms where BIC asks for them (banditk.fit.shape)."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise FitInputError(f"`method` must be one of {list(METHODS)}, got {self.method!r}.")
        if (
            isinstance(self.strength, bool)
            or not isinstance(self.strength, (int, float))
            or not 0 < self.strength < 1e12
        ):
            raise FitInputError(f"`strength` must be a positive number of observations, got {self.strength!r}.")
        try:
            object.__setattr__(self, "bucket_edges", check_bucket_edges(self.bucket_edges))
            object.__setattr__(self, "context_edges", check_context_edges(self.context_edges))
        except ConfigError as e:
            raise FitInputError(str(e)) from None
        for name, lo in (("chains", 1), ("warmup", 10), ("samples", 10), ("svi_max_steps", 100)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise FitInputError(f"`{name}` must be an integer >= {lo}, got {v!r}.")
        if not isinstance(self.shape_terms, bool):
            raise FitInputError(f"`shape_terms` must be true or false, got {self.shape_terms!r}.")
        if self.k_max is not None and (
            isinstance(self.k_max, bool) or not isinstance(self.k_max, int) or not 1 <= self.k_max <= 64
        ):
            raise FitInputError(f"`k_max` must be an integer in [1, 64], got {self.k_max!r}.")


@dataclass
class FitResult:
    """A fit and its checks.

    Attributes:
        prior: the prior to write.
        posterior: the latency posterior draws.
        acceptance: per-position acceptance posterior.
        ppc: the posterior predictive check.
        method: the inference method used.
        diagnostics: the convergence diagnostics (JSON types).
        failures: reasons the fit fails its diagnostics (empty: it passes).
        seconds: wall time of the fit.
    """

    prior: Prior
    posterior: Posterior
    acceptance: AcceptanceFit
    ppc: PpcResult
    method: str
    diagnostics: dict
    failures: list[str]
    seconds: float
    elbo: np.ndarray | None = None

    @property
    def ok(self) -> bool:
        return not self.failures


def choose_method(method: str, steps: int) -> str:
    """The inference method for ``--method`` and the number of steps.

    >>> choose_method("auto", 5_000), choose_method("auto", 50_000), choose_method("nuts", 50_000)
    ('nuts', 'svi', 'nuts')
    """
    if method != "auto":
        return method
    return "nuts" if steps <= NUTS_MAX_STEPS else "svi"


def fit(paths: list[str | os.PathLike], options: FitOptions = FitOptions()) -> FitResult:
    """Fit traces and build the prior; never writes anything (see :func:`write_prior`).

    Raises:
        FitInputError: unusable options or traces (too few distinct (B, K) to fit).
        banditk.core.errors.DrafterClassMismatchError: a trace of another class than ``options.drafter_class``.
        banditk.core.errors.PriorFormatError: a trace without a usable header or steps.
    """
    start = time.perf_counter()
    data = data_mod.load(
        paths,
        k_max=options.k_max,
        drafter_class=options.drafter_class,
        bucket_edges=options.bucket_edges,
        context_edges=options.context_edges,
    )
    groups = data.groups
    if len(groups) < len(FEATURES):
        raise FitInputError(
            f"the traces hold {len(groups)} distinct (B, K) pairs; the latency model has {len(FEATURES)} weights, "
            f"so it needs at least {len(FEATURES)} (vary the batch size and K)."
        )
    shape, shape_choice = (
        choose_shape(groups.batch, groups.k, groups.n, groups.mean) if options.shape_terms else (LatencyShape(), None)
    )
    inputs = model_inputs(groups, shape)
    method = choose_method(options.method, data.steps)
    th = options.thresholds
    elbo = None
    if method == "nuts":
        with single_thread():
            r, lengthened = _run_nuts_to_gate(inputs, shape.names, options)
        draws = r.chains * r.samples
        posterior = r.posterior
        diagnostics = {
            "method": "nuts",
            "chains": r.chains,
            "warmup": r.warmup,
            "samples_per_chain": r.samples,
            "target_accept": r.target_accept,
            "lengthened": lengthened,
            "rhat": _round(r.rhat),
            "ess": _round(r.ess, 1),
            "divergences": r.divergences,
        }
        failures = nuts_failures(r.rhat, r.ess, r.divergences, draws, th)
        if r.chains < 2:
            failures.append("r-hat needs at least 2 chains, got --chains 1")
    else:
        from banditk.fit.svi import run_svi

        with single_thread():
            r = run_svi(inputs, max_steps=options.svi_max_steps, seed=options.seed, progress=options.progress)
        posterior = r.posterior
        elbo = r.elbo
        diagnostics = {
            "method": "svi",
            "guide": "AutoMultivariateNormal",
            "steps": int(r.elbo.size),
            "window": r.window,
            "converged": r.converged,
            "final_elbo": round(float(np.mean(r.elbo[-r.window :])), 3),
            "rel_change": _num(r.rel_change),
            "abs_change": _num(r.abs_change),
        }
        failures = svi_failures(r.converged, r.rel_change, r.abs_change, int(r.elbo.size))
    context = context_parts(data, posterior)
    ppc = posterior_predictive(groups, posterior, options.bucket_edges, seed=options.seed, context=context)
    failures += ppc_failures(ppc.median_rel_error, th)
    diagnostics["ppc"] = ppc.to_dict()
    diagnostics["design_rank"] = inputs.design_rank
    diagnostics["latency_shape"] = shape_choice or {"shape": shape.to_dict()}
    acceptance = fit_acceptance(data.acc_successes, data.acc_failures)
    prior = _prior(data, posterior, acceptance, options, method, diagnostics, failures, context)
    return FitResult(
        prior, posterior, acceptance, ppc, method, diagnostics, failures, time.perf_counter() - start, elbo
    )


def _run_nuts_to_gate(inputs, names: tuple[str, ...], options: FitOptions):
    """NUTS at the first target acceptance that keeps divergences under the gate, lengthened
    while r-hat or the ESS falls short of it. Returns the last run and how often it was lengthened."""
    from banditk.fit.nuts import run_nuts

    th = options.thresholds
    warmup, samples = options.warmup, options.samples
    for lengthened in range(NUTS_MAX_LENGTHEN + 1):
        draws = options.chains * samples
        for target_accept in NUTS_TARGET_ACCEPT:
            r = run_nuts(
                inputs,
                names,
                chains=options.chains,
                warmup=warmup,
                samples=samples,
                seed=options.seed,
                progress=options.progress,
                target_accept=target_accept,
            )
            diverged = r.divergences > th.max_divergent_fraction * draws
            if not diverged:
                break
        if diverged or not nuts_failures(r.rhat, r.ess, r.divergences, draws, th):
            break  # it passes, or it diverges, which a longer run does not cure
        if lengthened < NUTS_MAX_LENGTHEN:
            warmup, samples = warmup * NUTS_LENGTHEN, samples * NUTS_LENGTHEN
    return r, lengthened


def write_prior(result: FitResult, path: str | os.PathLike, *, force: bool = False) -> None:
    """Write the prior atomically.

    Raises:
        DiagnosticsFailedError: the fit failed its diagnostics and ``force`` is False.
    """
    if result.failures and not force:
        raise DiagnosticsFailedError(result.failures)
    result.prior.provenance["forced"] = bool(result.failures)
    save_prior(path, result.prior)


def _prior(
    data: data_mod.FitData,
    posterior: Posterior,
    acceptance: AcceptanceFit,
    options: FitOptions,
    method: str,
    diagnostics: dict,
    failures: list[str],
    context: tuple = (),
) -> Prior:
    head = data.headers[0]
    drafter = head.get("drafter", {})
    hardware = options.hardware if options.hardware is not None else _first(data.headers, "hardware")
    key = DrafterKey(
        data.drafter_class,
        method=_str(drafter.get("method")),
        target_model=_str(drafter.get("target_model")),
        draft_model=_str(drafter.get("draft_model")),
        hardware=hardware,
    )
    stats = prior_stats(data, posterior, options.bucket_edges, options.strength)
    w = posterior.weights
    _, _, governor_weights = governor_regression(data.groups, posterior)
    provenance = {
        "source": "fit",
        "inputs": data.inputs,
        "trace_source": _first(data.headers, "source"),
        "steps": data.steps,
        # Kept apart as the prior's mixed cells (step time and chunk size per bucket and K).
        "steps_next_to_a_prompt_chunk": data.mixed.steps,
        **_context_provenance(context),
        "model": MODEL_NAME,
        "model_summary": MODEL_SUMMARY,
        "method": method,
        "diagnostics": diagnostics,
        "diagnostics_passed": not failures,
        "diagnostics_failures": list(failures),
        # The fit's own terms; the prior's latency_model.weights are their four-feature stand-in.
        "latency_fit": {
            "features": list(posterior.shape.names),
            "shape": posterior.shape.to_dict(),
            "summary": posterior.shape.summary(),
            "weights": [float(v) for v in w.mean(axis=0)],
            "weights_sd": [float(v) for v in w.std(axis=0)],
        },
        "noise_cv": round(float(np.mean(posterior.cv)), 6),
        "misfit_delta": round(float(np.mean(posterior.delta)), 6),
        "acceptance": acceptance.to_dict(),
        "vllm_version": _first(data.headers, "vllm_version"),
        "hardware": hardware,
        "fitted": now_iso(),
        "banditk_version": __version__,
        "seed": options.seed,
    }
    return Prior(
        key,
        data.k_max,
        tuple(options.bucket_edges),
        stats,
        float(options.strength),
        governor_weights,
        provenance,
        tuple(options.context_edges),
    )


def _context_provenance(context: tuple) -> dict:
    """Per context bucket (:func:`~banditk.fit.build.context_parts`), its decode-only steps and
    how much slower than the model they ran."""
    if not context:
        return {}
    return {
        "context_buckets": [
            {"from_tokens": edge, "steps": g.steps, "time_over_model": round(scale, 4) if len(g) else None}
            for edge, g, scale in context
        ]
    }


def _first(headers: list[dict], name: str) -> str:
    for h in headers:
        v = h.get(name)
        if isinstance(v, str) and v:
            return v
    return ""


def _str(v: object) -> str:
    return v if isinstance(v, str) else ""


def _num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def _round(d: dict[str, float], digits: int = 4) -> dict:
    return {k: (round(v, digits) if np.isfinite(v) else None) for k, v in d.items()}
