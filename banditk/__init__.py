"""banditk: a load-aware Bayesian speculative-depth governor for vLLM.

Layers, each importing only those above it:

- ``core``: step types, config, errors, drafter classes, buckets;
- ``posterior``: the conjugate maths (acceptance, Normal-Inverse-Gamma, latency model);
- ``governor``: :class:`BanditGovernor`, Thompson sampling over K, one rule per module;
- ``policies``: the governor and its baselines behind one interface (fixed, table, UCB, peers);
- ``io``: prior and snapshot files, traces;
- ``adapter``: the vLLM plugin (optional extra ``cpu`` / ``vllm``);
- ``sim``: the step-level serving simulator; ``live``: sweeps against a real server;
- ``fit``: offline prior fitting with Pyro (optional extra ``fit``);
- ``evaluation``: the protocol's checks, shared by ``sim`` and ``live``;
- ``tools``: the ``banditk`` command, the demo, the soak.
"""

__version__ = "0.1.0"

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.errors import BanditkError  # noqa: E402
from banditk.core.types import Decision, StepContext, StepOutcome  # noqa: E402
from banditk.governor import BanditGovernor  # noqa: E402
from banditk.governor.snapshot import load_snapshot, save_snapshot
from banditk.io.priorfile import load_prior

__all__ = [
    "BanditGovernor",
    "BanditkError",
    "Decision",
    "GovernorConfig",
    "StepContext",
    "StepOutcome",
    "load_prior",
    "load_snapshot",
    "save_snapshot",
    "__version__",
]
