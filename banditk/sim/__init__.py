"""A step-level serving simulator for judging K-choosing policies against the truth.

Modules, one idea each:

- :mod:`~banditk.sim.hardware`, :mod:`~banditk.sim.models`: profiles, every number sourced or marked assumed.
- :mod:`~banditk.sim.roofline`, :mod:`~banditk.sim.drafter_cost`, :mod:`~banditk.sim.step_time`: step time.
- :mod:`~banditk.sim.acceptance`: per-request acceptance heterogeneity and sampled outcomes.
- :mod:`~banditk.sim.scenario`: scenario files and their validation.
- :mod:`~banditk.sim.engine`: continuous batching, chunked prefill, KV capacity, preemption.
- :mod:`~banditk.sim.oracle`: the oracle policy and regret.
- :mod:`~banditk.sim.metrics`, :mod:`~banditk.sim.run`: a run's report.
- :mod:`~banditk.sim.protocol`, :mod:`~banditk.sim.checks`, :mod:`~banditk.sim.plots`: docs/evaluation.md's protocol.
- :mod:`~banditk.sim.cli`: ``banditk sim``.

The simulator never imports vLLM or torch.
"""

from banditk.sim.engine import SimulationError, Simulator
from banditk.sim.oracle import OraclePolicy, regret_fraction
from banditk.sim.run import RunResult, run_policy
from banditk.sim.scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = [
    "Simulator",
    "SimulationError",
    "OraclePolicy",
    "regret_fraction",
    "RunResult",
    "run_policy",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "parse_scenario",
]
