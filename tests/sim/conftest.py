import copy

import pytest

from banditk.sim.scenario import parse_scenario

BASE = {
    "name": "t",
    "hardware": "gb10",
    "model": "qwen3.5-122b-a10b-int4",
    "drafter": {"class": "mtp", "k_max": 2, "acceptance": [0.88, 0.75], "request_dispersion": 20.0},
    "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180},
    "table": [[1, 4, 2], [5, 512, 0]],
    "steps": 600,
    "seed": 0,
}


@pytest.fixture
def base_dict():
    return copy.deepcopy(BASE)


@pytest.fixture
def scn(base_dict):
    return parse_scenario(base_dict)
