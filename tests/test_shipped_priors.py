"""Every shipped prior loads, names its class and hardware as its file name does, and is
refused by a governor of another class."""

from pathlib import Path

import pytest

from banditk.config import GovernorConfig
from banditk.errors import DrafterClassMismatchError
from banditk.governor import BanditGovernor
from banditk.priorfile import load_prior

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
