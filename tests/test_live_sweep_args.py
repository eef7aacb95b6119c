"""experiments/live_sweep.py's policy list: every name its --help lists is one it runs."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("vllm")
SPEC = importlib.util.spec_from_file_location(
    "live_sweep", Path(__file__).resolve().parents[1] / "experiments" / "live_sweep.py"
)
live_sweep = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(live_sweep)


def test_a_bare_table_is_the_table_flag_and_every_policy_builds_a_config(tmp_path):
    from banditk.live.policies import speculative_config

    args = live_sweep.parse_args(["--policies", "nospec,table,bandit", "--table", "[[1,4,2],[5,256,0]]"])
    assert args.policies == ["nospec", "table:[[1,4,2],[5,256,0]]", "bandit"]
    for policy in args.policies:  # the sweep died here, after running every earlier policy
        speculative_config(policy, draft="/draft", k_max=args.k_max, work_dir=tmp_path)
