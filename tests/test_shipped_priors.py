"""Every shipped prior loads, names its class and hardware as its file name does, and is
refused by a governor of another class."""

from pathlib import Path

import pytest

from banditk.core.config import GovernorConfig
from banditk.core.errors import DrafterClassMismatchError
from banditk.governor import BanditGovernor
from banditk.io.priorfile import load_prior_file as load_prior

PRIORS = sorted((Path(__file__).resolve().parents[1] / "priors").glob("*.json"))


def test_there_is_a_prior_per_row_and_box():
    assert len(PRIORS) >= 14, [p.name for p in PRIORS]


@pytest.mark.parametrize("path", PRIORS, ids=lambda p: p.stem)
def test_shipped_prior_loads_and_matches_its_name(path):
    prior = load_prior(path)
    assert path.stem.startswith(prior.key.drafter_class + "-")
    assert path.stem.endswith("-" + prior.key.hardware)
    BanditGovernor(GovernorConfig(drafter_class=prior.key.drafter_class, k_max=prior.k_max), prior)
    other = "eagle" if prior.key.drafter_class != "eagle" else "mtp"
    with pytest.raises(DrafterClassMismatchError):
        BanditGovernor(GovernorConfig(drafter_class=other, k_max=prior.k_max), prior)


SIM_PRIORS = [p for p in PRIORS if load_prior(p).provenance.get("trace_source") == "sim"]


@pytest.mark.parametrize("path", SIM_PRIORS, ids=lambda p: p.stem)
def test_simulator_prior_has_cells_in_every_bucket_its_trace_reached(path):
    # The governor falls back to the linear latency model in a bucket without cells, and
    # that form misses the roofline's bend (DFlash/GB10: 217 ms predicted where a step takes
    # 166 ms). A trace over docs/evaluation.md's concurrency points leaves no bucket empty below
    # the largest batch it reached.
    prior = load_prior(path)
    filled = prior.stats.cell_n.sum(axis=1) > 0
    top = int(filled.nonzero()[0].max())
    assert filled[: top + 1].all(), [e for e, f in zip(prior.bucket_edges, filled[: top + 1]) if not f]
    assert prior.bucket_edges[top] >= 32, prior.bucket_edges[top]
    assert (prior.stats.cell_n[: top + 1] > 0).all(), "a bucket has cells for only some K"
