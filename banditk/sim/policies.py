"""Policy specs as the simulator runs them, with the server mode each implies.

Each policy runs in the mode its own server would run in on the scenario's hardware
(``server_mode`` of a run's summary says which; FULL and PIECEWISE become NONE on hardware
without graphs, ``cuda_graphs`` False):

- ``nospec`` (no drafter) and ``fixed:K`` (vLLM's static K): a static server, FULL graphs for
  decode-only batches, one FULL decode ladder.
- the governed policies (``bandit``, ``bandit+prior``, ``bandit+context``, ``ucb``, ``oracle``,
  ``random``: banditk's plugin picks K per step): the mode
  :func:`banditk.core.server_mode.governed_mode` gives, the one the plugin applies to a real
  server. On graph hardware that is Model Runner V2 with FULL graphs and one decode ladder per K
  of the dynamic table the plugin installs (K = 0..K_max: K_max + 1 ladders); a drafter class
  MRv2 cannot serve (:data:`MRV2_BLOCKERS`) keeps it on V1, PIECEWISE.
- vLLM's own dynamic table (``table``, ``table:[...]``, ``table-ctx:[...]``): the scenario's
  ``dynamic_cudagraph``, the mode the upstream measurement ran in (V1 PIECEWISE by default).
- ``peer:sglang``: FULL. SGLang's adaptive speculation captures a graph state per candidate
  depth (SGLang #21599), one ladder per candidate.
- ``peer:vllm-adaptive-k``: the scenario's ``dynamic_cudagraph``. What
  :class:`~banditk.policies.peers.VllmAdaptiveKPeer` models is vLLM's acceptance-adaptive K on
  top of vLLM's batch-size table (it asks the table for a cap every step): the dynamic-K path
  of vLLM's V1 runner, the one vLLM's ``table`` runs on, not a Model Runner V2 feature.

A suffix ``@FULL`` or ``@PIECEWISE`` on a per-step policy forces the mode: ``bandit@PIECEWISE``
is a governed server where MRv2 is blocked (V1, PIECEWISE), ``table@FULL`` a vLLM table on a
server that keeps full graphs (one ladder per K the table lists). Static policies take no
suffix.

A FULL server captures one decode ladder per K it can run; every ladder beyond the one a
static server captures comes off the KV cache (``graph_ladder_gib`` of the hardware,
:func:`banditk.sim.engine.capture_kv_tokens`). PIECEWISE graphs are not counted: a V1
server captures one piecewise set whatever K is, the same order as a static server's ladder.

``bandit-per-request`` is the bandit whose drafts are verified per request
(:class:`~banditk.governor.per_request.PerRequestGovernor`, docs/per-request.md): the bandit's K,
and each step a verification budget spent on the drafts most likely to be accepted. It runs in the
governed mode; where that is FULL, the uneven allotments are taken to stay inside varlen FULL
decode graphs, as adaptive verification's do (assumed).

``peer:vllm-adaptive-verification`` is vLLM's adaptive verification on Model Runner V2
(:mod:`banditk.sim.adaptive_verification`): K_max drafted every step, the verification budget from
the drafter's confidence and a start-up cost profile. A static-K server with varlen FULL decode
graphs ("MRv2 FULL varlen", one capture set).

``bandit+av`` is the bandit with vLLM's adaptive verification trimming inside its K
(:class:`~banditk.sim.adaptive_verification.GovernedAdaptiveVerification`): the governed server's
mode, whose FULL decode graphs are taken to serve adaptive verification's varlen batches, as
static K's do (assumed). It runs where adaptive verification does: on graph hardware, with a
drafter class Model Runner V2 serves.

``bandit+context`` is the bandit with context buckets
(:data:`banditk.core.buckets.DEFAULT_CONTEXT_EDGES`): K follows the batch's mean context too.

``peer:vllm-adaptive-k`` is capped by the table a governed server installs to
enable dynamic K (``[[1, max_num_seqs, K_max]]``, i.e. no cap), not by the
scenario's ``table``: that table's collapse is measured by the ``table`` policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from banditk.core.errors import ConfigError
from banditk.core.server_mode import FULL, NO_GRAPHS, PIECEWISE, governed_mode
from banditk.governor.per_request import PerRequestGovernor
from banditk.policies.base import Policy
from banditk.sim.adaptive_verification import GOVERNED_SPEC as BANDIT_AV
from banditk.sim.adaptive_verification import SPEC as AV_SPEC
from banditk.sim.adaptive_verification import AdaptiveVerificationPeer, GovernedAdaptiveVerification
from banditk.sim.hardware import get_hardware
from banditk.sim.oracle import OraclePolicy
from banditk.sim.scenario import Scenario

SIM_POLICY_SPECS = (
    "bandit",
    "bandit+prior",
    "bandit+context",
    "bandit-per-request",
    "bandit+av",
    "nospec",
    "fixed:K",
    "table",
    "table:[[lo,hi,K],...]",
    "table-ctx:[[bs_lo,bs_hi,ctx_lo,ctx_hi,K],...]",
    "ucb",
    "peer:sglang",
    "peer:vllm-adaptive-k",
    "peer:vllm-adaptive-verification",
    "oracle",
)

#: Per-step policies banditk's plugin serves: they run in :func:`governed_mode`'s mode.
GOVERNED = ("bandit", "bandit+prior", "bandit+context", "bandit-per-request", "bandit+av", "ucb", "oracle", "random")

#: Bandit policies that take a prior file and ``governor_config`` fields.
BANDITS = ("bandit", "bandit+prior", "bandit+context", "bandit-per-request", "bandit+av")

#: Mode suffixes a per-step policy spec may carry (``bandit@PIECEWISE``).
MODE_SUFFIXES = (FULL, PIECEWISE)

#: Drafter classes Model Runner V2 cannot serve, as vLLM names them: a governed server of such a
#: class stays on V1. vLLM 0.33.0's ``vllm/v1/worker/gpu/spec_decode/__init__.py``
#: (``init_speculator``) has no branch for suffix decoding and raises NotImplementedError.
MRV2_BLOCKERS: dict[str, str] = {"suffix": "speculative method 'suffix'"}


@dataclass
class SimPolicy:
    """A built policy and the server mode it runs in.

    Attributes:
        spec: the policy spec, mode suffix included.
        policy: the policy object.
        speculation: False for ``nospec``.
        dynamic: K changes per step (vLLM reserves K_max lookahead slots).
        graph_mode: FULL, PIECEWISE or NONE: the decode steps' graph mode.
        graph_ladders: FULL decode ladders the server captures (0 outside FULL).
        server_mode: the mode in words: "static FULL", "MRv2 FULL", "V1 PIECEWISE", ...
    """

    spec: str
    policy: Policy
    speculation: bool
    dynamic: bool
    graph_mode: str = FULL
    graph_ladders: int = 1
    server_mode: str = "static FULL"


def split_mode(spec: object) -> tuple[object, str | None]:
    """A policy spec without its mode suffix, and the suffix (None when it has none).

    >>> split_mode("bandit@PIECEWISE")
    ('bandit', 'PIECEWISE')
    >>> split_mode("table:[[1,4,2]]")
    ('table:[[1,4,2]]', None)

    Raises:
        ConfigError: the suffix is not one of :data:`MODE_SUFFIXES`; names ``--policy`` and the value.
    """
    if not isinstance(spec, str) or "@" not in spec:
        return spec, None
    base, _, mode = spec.rpartition("@")
    if mode not in MODE_SUFFIXES:
        raise ConfigError(
            f"`--policy`={spec!r}: the mode suffix {'@' + mode!r} must be one of "
            f"{', '.join('@' + m for m in MODE_SUFFIXES)} (e.g. bandit@PIECEWISE)."
        )
    return base, mode


def _mode(
    base: str, pol: Policy, scn: Scenario, static: bool, nospec: bool, forced: str | None
) -> tuple[str, int, str]:
    """``(graph_mode, FULL ladders, label)`` of the server that runs ``base`` (see the module doc)."""
    hw = get_hardware(scn.hardware)
    k_max = scn.k_max
    if base == AV_SPEC:
        mode = FULL if hw.cuda_graphs else NO_GRAPHS
        return mode, int(mode == FULL), f"MRv2 {mode} varlen" if hw.cuda_graphs else f"static {mode}"
    if static:
        mode = FULL if hw.cuda_graphs else NO_GRAPHS
        return mode, int(mode == FULL), ("nospec " if nospec else "static ") + mode
    if base in GOVERNED:
        if forced == PIECEWISE:
            sm = governed_mode(cuda_graphs=hw.cuda_graphs, user_forced_v1=True)
        elif forced == FULL:
            sm = governed_mode(cuda_graphs=hw.cuda_graphs)
        else:
            blockers = (MRV2_BLOCKERS[scn.drafter_class],) if scn.drafter_class in MRV2_BLOCKERS else ()
            sm = governed_mode(cuda_graphs=hw.cuda_graphs, v2_blockers=blockers)
        mode, label, ks = sm.cudagraph, sm.label, k_max + 1
    elif base == "peer:sglang":
        mode = forced or FULL
        ks = len(getattr(pol, "candidates", range(1, k_max + 1)))
        label = None
    else:  # vLLM's own dynamic K: table, table-ctx, peer:vllm-adaptive-k
        mode = forced or scn.dynamic_cudagraph
        table = getattr(pol, "table", None) if base.startswith("table") else None
        ks = len({min(int(row[-1]), k_max) for row in table}) if table else k_max + 1
        label = None
    if not hw.cuda_graphs:
        mode = NO_GRAPHS
    if label is None or not hw.cuda_graphs:
        if base == "peer:sglang":
            label = f"SGLang {mode}"
        else:
            label = ("MRv2 " if mode == FULL else "V1 ") + mode
    return mode, (ks if mode == FULL else 0), label


def runs_adaptive_verification(scn: Scenario) -> bool:
    """Adaptive verification needs FULL decode graphs on Model Runner V2: graph hardware and a
    drafter class MRv2 serves (:data:`MRV2_BLOCKERS`)."""
    return get_hardware(scn.hardware).cuda_graphs and scn.drafter_class not in MRV2_BLOCKERS


REPO_PRIORS = Path(__file__).resolve().parents[2] / "priors"


def find_shipped_prior(scn: Scenario, root: str | Path | None = None) -> Path | None:
    """The shipped prior for the scenario's drafter class and hardware, if one exists.

    Looks in ``root`` (default: the repository's ``priors/``) for a ``*.json``
    whose name contains the drafter class (``_`` and ``-`` alike) and ends with the
    hardware name, e.g. ``priors/mtp-qwen3.6-gb10.json``. A class name that is a prefix
    of another (``mtp`` of ``mtp-step``) only matches when followed by the
    hardware or a separator other than the longer class's suffix; a hardware name
    matches whole (``h200`` is not ``8xh200``).
    """
    d = Path(root) if root is not None else REPO_PRIORS
    if not d.is_dir():
        return None
    cls = scn.drafter_class.replace("_", "-")
    longer = [c.replace("_", "-") for c in ("mtp-step", "mtp-external") if c != cls and c.startswith(cls)]
    for p in sorted(d.glob("*.json")):
        n = p.name.replace("_", "-")
        stem = n[: -len(".json")]
        if (
            cls in stem
            and (stem == scn.hardware or stem.endswith("-" + scn.hardware))
            and not any(c in n for c in longer)
        ):
            return p
    return None


def build_policy(
    spec: str,
    scn: Scenario,
    *,
    seed: int = 0,
    prior_path: str | Path | None = None,
    governor_config: dict | None = None,
) -> SimPolicy:
    """Build the policy named ``spec`` for scenario ``scn``.

    ``table`` alone uses the scenario's table. ``bandit+prior`` needs
    ``prior_path`` (or a shipped prior found by :func:`find_shipped_prior`). A suffix
    ``@FULL`` / ``@PIECEWISE`` forces a per-step policy's graph mode (module doc).
    ``governor_config`` sets a bandit policy's :class:`~banditk.core.config.GovernorConfig`
    fields, as the plugin's ``governor_config`` key does.

    >>> from banditk.sim.scenario import parse_scenario
    >>> s = parse_scenario({"hardware": "gb10", "model": "qwen3.5-122b-a10b-int4",
    ...     "drafter": {"class": "mtp", "k_max": 2, "acceptance": [0.8, 0.6]},
    ...     "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180}})
    >>> b = build_policy("fixed:2", s)
    >>> (b.policy.name, b.speculation, b.dynamic, b.server_mode)
    ('fixed:2', True, False, 'static FULL')
    >>> b = build_policy("bandit", s)
    >>> (b.server_mode, b.graph_ladders), build_policy("bandit@PIECEWISE", s).server_mode
    (('MRv2 FULL', 3), 'V1 PIECEWISE')
    """
    full_spec = spec
    spec, forced = split_mode(spec)
    if forced is not None and not spec:
        raise ConfigError(f"`--policy`={full_spec!r} names no policy before the mode suffix.")
    built = _build(spec, scn, seed=seed, prior_path=prior_path, governor_config=governor_config)
    static = not built.dynamic
    if forced is not None and static:
        raise ConfigError(
            f"`--policy`={full_spec!r}: {spec!r} runs a static server; a mode suffix "
            "only applies to a policy that changes K per step."
        )
    base = "table" if built.spec.startswith("table") else spec
    mode, ladders, label = _mode(base, built.policy, scn, static, not built.speculation, forced)
    built.graph_mode, built.graph_ladders, built.server_mode = mode, ladders, label
    if forced is not None:
        built.spec = f"{built.spec}@{forced}"
        try:
            built.policy.name = built.spec
        except AttributeError:  # a read-only name: the summary still carries the spec
            pass
    return built


def _build(
    spec: str, scn: Scenario, *, seed: int, prior_path: str | Path | None, governor_config: dict | None
) -> SimPolicy:
    """:func:`build_policy` without the server mode."""
    from banditk.policies import make_policy  # the core's factory

    k_max, cls = scn.k_max, scn.drafter_class
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"`--policy`={spec!r} must be one of: {', '.join(SIM_POLICY_SPECS)}.")
    if spec == "oracle":
        return SimPolicy(spec, OraclePolicy(k_max), True, True)
    if spec == AV_SPEC:
        return SimPolicy(spec, AdaptiveVerificationPeer(k_max, seed=seed), True, False)
    if spec.startswith("peer:"):
        from banditk.policies.peers import make_peer

        try:
            peer = make_peer(spec.split(":", 1)[1], k_max=k_max)
        except ConfigError as e:
            raise ConfigError(f"`--policy`={spec!r}: {e}") from None
        return SimPolicy(spec, peer, True, True)
    if spec == "table":
        spec = "table:" + json.dumps(scn.table, separators=(",", ":"))
    if spec == "bandit+prior" and prior_path is None:
        prior_path = find_shipped_prior(scn)
        if prior_path is None:
            raise ConfigError(
                f"`--policy`='bandit+prior': no prior given (--prior) and none shipped for "
                f"drafter class {cls!r} on {scn.hardware!r} under priors/."
            )
    prior = None
    if prior_path is not None and spec in BANDITS:
        from banditk.governor.snapshot import load_prior

        prior = load_prior(prior_path, drafter_class=cls, k_max=k_max)
    config = None
    if spec == "bandit+context":
        from banditk.core.buckets import DEFAULT_CONTEXT_EDGES

        config = {"context_edges": DEFAULT_CONTEXT_EDGES}
    if governor_config and spec in BANDITS:
        config = {**(config or {}), **governor_config}
    base = "bandit" if spec in BANDITS else spec
    pol = make_policy(base, k_max=k_max, drafter_class=cls, seed=seed, prior=prior, config=config)
    if spec == "bandit-per-request":
        pol = PerRequestGovernor(pol, seed=seed)
    elif spec == BANDIT_AV:
        pol = GovernedAdaptiveVerification(pol, AdaptiveVerificationPeer(k_max, seed=seed))
    elif spec != base:
        pol.name = spec
    nospec = bool(getattr(pol, "disables_speculation", False))
    static = base.startswith("fixed:") or nospec
    return SimPolicy(spec, pol, not nospec, not static)
