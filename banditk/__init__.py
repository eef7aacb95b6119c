"""banditk: a load-aware Bayesian speculative-depth governor for vLLM.

Layers, each importing only those above it:

- ``core``: step types, config, errors, drafter classes, buckets;
- ``posterior``: the conjugate maths (acceptance, Normal-Inverse-Gamma, latency model);
- ``governor``: :class:`BanditGovernor`, Thompson sampling over K, one rule per module;
- ``policies``: the governor and its baselines behind one interface (fixed, table, UCB, peers);
- ``io``: prior files, traces, atomic writes;
- ``adapter``: the vLLM plugin (optional extra ``cpu`` / ``vllm``);
- ``sim``: the step-level serving simulator; ``live``: sweeps against a real server;
- ``fit``: offline prior fitting with Pyro (optional extra ``fit``);
- ``evaluation``: the protocol's checks, shared by ``sim`` and ``live``;
- ``tools``: the ``banditk`` command, the demo, the soak.

The public names below are imported on first use: the vLLM plugin imports ``banditk`` in
every vLLM process, which must not pay for numpy, scipy and the governor to register it.
"""

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "BanditGovernor": "banditk.governor.bandit",
    "BanditkError": "banditk.core.errors",
    "Decision": "banditk.core.types",
    "GovernorConfig": "banditk.core.config",
    "StepContext": "banditk.core.types",
    "StepOutcome": "banditk.core.types",
    "load_prior": "banditk.governor.snapshot",
    "load_snapshot": "banditk.governor.snapshot",
    "save_snapshot": "banditk.governor.snapshot",
}

__all__ = [*_PUBLIC, "__version__"]


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'banditk' has no attribute {name!r}")
