"""Lockstep data parallelism in the simulator: one K per step for every rank, the slowest rank's
time for all, each rank credited the K it played and that time."""

import pytest

from banditk.core.types import Decision
from banditk.sim.engine import Trace
from banditk.sim.scenario import parse_scenario
from lab.lockstep_sim import Lockstep, build_group, run_lockstep

BASE = parse_scenario(
    {
        "hardware": "h200",
        "model": "qwen3.6-35b-a3b",
        "drafter": {"class": "mtp", "k_max": 4, "acceptance": [0.86, 0.76, 0.67, 0.58]},
        "workload": {"concurrency": 4, "prompt_tokens": 256, "output_tokens": 64},
        "steps": 100,
    }
)


class Voter:
    """Votes a fixed K (or raises at ``fail_at``) and records what it is credited."""

    name = "voter"

    def __init__(self, k, fail_at=None):
        self.k, self.fail_at, self.calls, self.observed = k, fail_at, 0, []

    def select(self, ctx):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("governor failed")
        return Decision(k=self.k, bucket=0, num_decoding=ctx.num_decoding, step_id=self.calls)

    def observe(self, decision, outcome):
        self.observed.append((decision.k, outcome.step_duration_s))


def _group(votes, rule="max", loads=(4, 16), fail_at=None):
    voters = [Voter(k, fail_at if r == 0 else None) for r, k in enumerate(votes)]
    group = build_group(BASE, list(loads), "bandit", rule, inner=lambda r, scn: voters[r])
    return group, voters, [Trace.empty(60) for _ in loads]


def test_every_rank_plays_the_largest_vote_and_the_slowest_ranks_time():
    group, voters, traces = _group([1, 3])
    for _ in range(60):
        group.step(traces)
        assert len({s.now for s in group.sims}) == 1  # the clocks move together
    decided = [i for i in range(60) if min(t.k[i] for t in traces) >= 0]
    assert decided and all(traces[0].k[i] == traces[1].k[i] == 3 for i in decided)
    assert group.split == 0
    for v in voters:  # credited the K played and the lockstep step time, never its own
        assert {k for k, _ in v.observed} == {3}
        assert all(d in group.durations for _, d in v.observed)
    own = [traces[r].duration[decided[-1]] for r in (0, 1)]
    assert group.durations[decided[-1]] == pytest.approx(max(own))


def test_per_rank_rule_lets_ranks_differ_and_counts_it():
    group, voters, traces = _group([1, 3], rule="per-rank")
    for _ in range(60):
        group.step(traces)
    assert {k for k, _ in voters[0].observed} == {1}
    assert {k for k, _ in voters[1].observed} == {3}
    assert group.split > 0


def test_a_step_no_rank_decodes_in_agrees_no_k():
    group, _, traces = _group([2, 2])
    group.step(traces)  # the first step only prefills: nobody votes
    assert group.agreed[0] == -1 and traces[0].k[0] == traces[1].k[0] == -1


def test_a_rank_whose_policy_fails_raises_without_hanging_the_others():
    group, _, traces = _group([2, 2], fail_at=3)
    with pytest.raises(RuntimeError, match="governor failed"):
        for _ in range(60):
            group.step(traces)


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="`rule`='min' must be one of max, per-rank"):
        Lockstep([], [], "min")


def test_the_bandit_in_lockstep_runs_and_reports_the_group():
    r = run_lockstep(BASE, [4, 16], "bandit", steps=120, warmup=20)
    assert r["tok_s"] > 0 and sum(r["k_hist"]) > 0 and r["split_steps"] == 0
    fixed = run_lockstep(BASE, [4, 16], "fixed:2", steps=120, warmup=20)
    assert fixed["k_hist"][2] == sum(fixed["k_hist"]) and fixed["k_changes_per_1000"] == 0
