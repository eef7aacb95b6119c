"""A Simulator for a policy spec, in the server mode ``build_policy`` gives it (as ``run_policy``
builds it), for tests that need the simulator object itself."""

from banditk.sim.engine import Simulator
from banditk.sim.policies import build_policy


def simulator_for(scn, spec, seed=0):
    b = build_policy(spec, scn, seed=seed)
    return Simulator(
        scn,
        b.policy,
        seed=seed,
        speculation=b.speculation,
        dynamic=b.dynamic,
        graph_mode=b.graph_mode,
        graph_ladders=b.graph_ladders,
    )
