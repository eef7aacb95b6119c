"""Data parallelism in lockstep: ranks with their own requests, one K per step for all of them.

Under expert parallelism every rank runs every forward together, drafter forwards included, so
every rank must draft the same K at a step, and the step lasts as long as its slowest rank.
Each rank here is a :class:`~banditk.sim.engine.Simulator` with its own requests and seed.
A :class:`RankPolicy` stands in for the rank's policy: it asks the rank's own policy for a vote,
hands the vote to the :class:`Lockstep` group and plays the K the group agrees on. A rank with
nothing to decode casts no vote (vLLM runs it a dummy batch). After the step every rank's clock
moves to the slowest rank's, and each rank's policy is credited the K it played and that
lockstep time, as the adapter credits each rank (docs/data-parallel.md).

Rules for the step's K (:data:`RULES`):
- ``max``: the largest vote, the adapter's rule: each scheduler verifies no more drafts than
  were made;
- ``per-rank``: each rank plays its own vote, still in lockstep. Upstream cannot run it (ranks
  must agree); it is the informational upper bound.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from banditk.sim.engine import Simulator, Trace
from banditk.sim.policies import build_policy
from banditk.sim.scenario import Scenario

RULES = ("max", "per-rank")


class RankPolicy:
    """One rank's policy as its Simulator sees it: the vote goes to the group, the credit waits
    for the lockstep time."""

    needs_oracle = False
    needs_step_view = False

    def __init__(self, inner: Any, group: Lockstep, rank: int) -> None:
        self.inner, self.group, self.rank = inner, group, rank
        self.name = getattr(inner, "name", type(inner).__name__)
        self.pending: tuple[Any, Any] | None = None

    def select(self, ctx):
        vote = self.inner.select(ctx)
        k = self.group.agree(self.rank, int(vote.k))
        return vote if k == vote.k else dataclasses.replace(vote, k=k)

    def observe(self, decision, outcome) -> None:
        self.pending = (decision, outcome)


class Lockstep:
    """Ranks stepping together: each step runs every rank's Simulator in its own thread up to
    its vote, agrees K once every rank voted or finished without one, then syncs the clocks."""

    def __init__(self, sims: list[Simulator], policies: list[RankPolicy], rule: str) -> None:
        if rule not in RULES:
            raise ValueError(f"`rule`={rule!r} must be one of {', '.join(RULES)}.")
        self.sims, self.policies, self.rule = sims, policies, rule
        self._cv = threading.Condition()
        self._votes: list[int | None] = []
        self._state: list[str] = []
        self._k: int | None = None
        self._error: BaseException | None = None
        self.durations: list[float] = []
        self.agreed: list[int] = []  # the step's K; -1 where no rank voted
        self.split: int = 0  # steps where ranks played different K (per-rank only)

    def agree(self, rank: int, vote: int) -> int:
        with self._cv:
            self._votes[rank], self._state[rank] = vote, "voted"
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._k is not None)
            return vote if self.rule == "per-rank" else self._k

    def step(self, traces: list[Trace]) -> None:
        n = len(self.sims)
        start = self.sims[0].now
        self._votes, self._state, self._k = [None] * n, ["run"] * n, None
        threads = [threading.Thread(target=self._run, args=(r, traces[r])) for r in range(n)]
        for t in threads:
            t.start()
        with self._cv:
            self._cv.wait_for(lambda: all(s != "run" for s in self._state))
            votes = [v for v in self._votes if v is not None]
            self._k = max(votes) if votes else -1
            self._cv.notify_all()
        for t in threads:
            t.join()
        if self._error is not None:
            raise self._error
        end = max(s.now for s in self.sims)
        for s in self.sims:
            s.now = end
        self.durations.append(end - start)
        self.agreed.append(self._k)
        self.split += len(set(votes)) > 1 and self.rule == "per-rank"
        for p in self.policies:
            if p.pending is not None:
                decision, outcome = p.pending
                p.pending = None
                p.inner.observe(decision, dataclasses.replace(outcome, step_duration_s=end - start))

    def _run(self, rank: int, trace: Trace) -> None:
        try:
            self.sims[rank].step(trace)
        except BaseException as e:  # re-raised by step() once every thread is back
            self._error = e
        finally:
            with self._cv:
                self._state[rank] = "done"
                self._cv.notify_all()


def rank_scenario(base: Scenario, concurrency: int) -> Scenario:
    """``base`` with one rank's closed-loop load."""
    return base.with_workload(concurrency=int(concurrency))


def build_group(base: Scenario, loads: list[int], spec: str, rule: str, seed: int = 0, inner=None) -> Lockstep:
    """A lockstep group serving ``loads`` (one closed-loop concurrency per rank) under policy
    ``spec`` on every rank; ``inner(rank, scenario)``, where given, builds each rank's policy
    instead (tests)."""
    group = Lockstep([], [], rule)
    for r, c in enumerate(loads):
        scn = rank_scenario(base, c)
        built = build_policy(spec, scn, seed=seed * 1000 + r)
        policy = RankPolicy(built.policy if inner is None else inner(r, scn), group, r)
        group.sims.append(
            Simulator(
                scn,
                policy,
                seed=seed * 1000 + r,
                speculation=built.speculation,
                dynamic=built.dynamic,
                graph_mode=built.graph_mode,
                graph_ladders=built.graph_ladders,
            )
        )
        group.policies.append(policy)
    return group


def run_lockstep(
    base: Scenario, loads: list[int], spec: str, rule: str = "max", *, seed: int = 0, steps: int, warmup: int
) -> dict:
    """Serve ``loads`` in lockstep under ``spec`` on every rank; return the group's throughput
    (tokens of every rank over the lockstep time) and how K moved."""
    group = build_group(base, loads, spec, rule, seed)
    traces = [Trace.empty(steps) for _ in loads]
    for _ in range(steps):
        group.step(traces)
    tokens = sum(int(t.tokens[warmup:].sum()) for t in traces)
    seconds = float(np.sum(group.durations[warmup:]))
    ks = np.asarray(group.agreed[warmup:])
    played = ks[ks >= 0]
    return {
        "policy": spec,
        "rule": rule,
        "loads": list(loads),
        "seed": seed,
        "tok_s": tokens / seconds if seconds > 0 else 0.0,
        "k_changes_per_1000": 1000.0 * float(np.count_nonzero(np.diff(played))) / max(played.size, 1),
        "k_hist": np.bincount(played, minlength=base.k_max + 1).tolist() if played.size else [],
        "split_steps": group.split,
    }
