"""The step loop: continuous batching, chunked prefill, KV capacity, preemption.

One call of :meth:`Simulator.step` is one vLLM scheduler step:

1. arrivals (closed loop refills to the concurrency; open loop draws Poisson
   arrival times) enter the waiting queue;
2. decoding requests are scheduled first (charged ``1 + K`` tokens of the budget and
   their lookahead of the cache, as of the step before), then prefill chunks from the
   queue within ``max_num_batched_tokens`` and the free KV cache; a waiting request is
   admitted only if its whole sequence fits (vLLM's ``scheduler_reserve_full_isl``);
3. the policy is asked for K (prefill-only steps ask nothing), each decoding
   request reserves ``1 + K_max`` slots (``1 + K`` for a static K, as vLLM reserves
   lookahead for ``num_speculative_tokens``), and the newest requests are
   preempted (recompute) while the cache overflows;
4. a policy that verifies per request (``allot``: the per-request governor, vLLM's adaptive
   verification) chooses how many of each request's K drafts are verified (:meth:`_allot`);
5. the step takes its roofline time (:mod:`banditk.sim.step_time`, in the server's graph
   mode: FULL, PIECEWISE or NONE, see :mod:`banditk.sim.policies`) times log-normal noise; drafts are verified in the same step; the policy observes
   the per-request verified/accepted counts and the noisy duration.

Each step the oracle scores every K from the true per-request acceptance and
the noise-free step time, for regret (:mod:`banditk.sim.oracle`).

Common random numbers: a run's randomness comes from separate streams of its seed, so that
runs of different policies at one seed meet the same world. The n-th request admitted draws its
prompt length, population, acceptance and one uniform per output position from its own stream
(:data:`_REQUESTS`, n); arrival times and the step clock's noise each have one stream. Whatever
K a policy drafts and however its timing moves the admissions, request n is the same request
with the same acceptance outcome at each position (:func:`~banditk.sim.acceptance.accepted_from_uniforms`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from banditk.core.server_mode import FULL, GRAPH_MODES, NO_GRAPHS
from banditk.core.types import StepContext, StepOutcome
from banditk.policies.base import Policy
from banditk.sim.acceptance import accepted_from_uniforms, draw_mixture_acceptance, expected_tokens
from banditk.sim.hardware import get_hardware
from banditk.sim.models import get_model
from banditk.sim.scenario import (
    Population,
    Scenario,
    ScenarioError,
    draw_prompt_tokens,
    prompt_bounds,
    prompt_mean,
)
from banditk.sim.step_time import StepCostModel
from banditk.switch_counts import protocol_bucket

EMPTY, PREFILL, DECODE, WAITING = 0, 1, 2, 3

#: Weight of the newest decode-only step in the oracle's running decode rate (~200-step memory).
ORACLE_RATE_WEIGHT = 1.0 / 200.0

#: Stream tags under a run's seed: each request's draws, the arrival times, the clock's noise.
_REQUESTS, _ARRIVALS, _CLOCK = 0x52455131, 0x41525249, 0x434C4F43


class SimulationError(RuntimeError):
    """A policy or the simulator produced an impossible step."""


@dataclass(frozen=True)
class StepView:
    """What a peer that models a GPU-side mechanism sees of one step (``needs_step_view``).

    Attributes:
        alpha: the decoding requests' true per-position acceptance, shape (B, k_max); a peer
            turns it into the drafter's confidence, never reads it as knowledge.
        times: expected step seconds for a number of verified drafts (array in, array out):
            the cost profile a server times at start-up, here without its error.
        batch: decoding requests B.
    """

    alpha: np.ndarray
    times: object
    batch: int


def _population_arrays(pops: list[Population]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Names, weights, acceptance rows and dispersions of a list of populations."""
    return (
        [p.name for p in pops],
        np.array([p.weight for p in pops], dtype=float),
        np.array([p.acceptance for p in pops], dtype=float),
        np.array([p.request_dispersion for p in pops], dtype=float),
    )


@dataclass
class Trace:
    """Per-step record (arrays of length ``steps``)."""

    duration: np.ndarray
    k: np.ndarray
    n_dec: np.ndarray
    n_sched: np.ndarray
    tokens: np.ndarray
    expected_tokens: np.ndarray
    oracle_tokens: np.ndarray
    k_star: np.ndarray
    kv_usage: np.ndarray
    preemptions: np.ndarray
    bucket: np.ndarray  # the bucket the decision consulted (protocol buckets for bucketless policies)
    prefill: np.ndarray  # prompt tokens computed in the step
    verified: np.ndarray  # drafts verified over the batch (B K unless a policy cut them)

    @classmethod
    def empty(cls, n: int) -> Trace:
        f = lambda dt: np.zeros(n, dtype=dt)  # noqa: E731
        t = cls(
            f(float),
            f(np.int16),
            f(np.int32),
            f(np.int32),
            f(float),
            f(float),
            f(float),
            f(np.int16),
            f(float),
            f(np.int32),
            f(np.int16),
            f(np.int32),
            f(np.int32),
        )
        t.k[:] = -1
        t.bucket[:] = -1
        t.k_star[:] = -1
        return t


@dataclass
class Requests:
    """Completed requests: arrival, first-token and finish times (s), output tokens, finish step."""

    arrival: list = field(default_factory=list)
    first: list = field(default_factory=list)
    finish: list = field(default_factory=list)
    out: list = field(default_factory=list)
    step: list = field(default_factory=list)


def _kv_bytes_per_token(model, request_tokens: int) -> float:
    """Average KV bytes per token of a request of ``request_tokens`` tokens.

    Sliding-window layers hold at most ``swa_window`` tokens of each request.
    """
    swa = (
        model.swa_kv_bytes_per_token * min(1.0, model.swa_window / max(request_tokens, 1))
        if model.swa_kv_bytes_per_token
        else 0.0
    )
    return model.kv_bytes_per_token + swa


def kv_capacity_tokens(model_name: str, hardware_name: str, request_tokens: int, utilization: float = 0.9) -> int:
    """Tokens of KV cache left after the weights at ``utilization`` of the box's memory.

    Sliding-window layers are counted at their window (per request of
    ``request_tokens`` tokens). Raises :class:`ValueError` where nothing is left.
    """
    hw, m = get_hardware(hardware_name), get_model(model_name)
    weights = m.total_params * m.bytes_per_param + m.lm_head_params * m.lm_head_bytes_per_param * 2
    free = utilization * hw.memory_bytes - weights
    if free <= 0:
        raise ValueError(
            f"`model`={model_name!r} ({weights / 1e9:.0f} GB of weights) does not fit `hardware`="
            f"{hardware_name!r} ({hw.memory_bytes / 1e9:.0f} GB) at memory utilization {utilization}"
        )
    return int(free / max(_kv_bytes_per_token(m, request_tokens), 1.0))


def _request_tokens(scn: Scenario) -> int:
    """Prompt + output tokens of the workload's mean request (a distribution at its mean)."""
    prompt = scn.workload.get("prompt_tokens") or 0
    if isinstance(prompt, dict):
        prompt = int(round(prompt_mean(prompt)))
    return prompt + (scn.workload.get("output_tokens") or 0)


def default_kv_capacity(scn: Scenario) -> int:
    """Tokens of KV cache left after weights at 90% memory utilisation (vLLM's default).

    A prompt-length distribution counts at its mean for the sliding-window share.
    """
    try:
        return kv_capacity_tokens(scn.model, scn.hardware, _request_tokens(scn))
    except ValueError as e:
        raise ScenarioError(f"{scn.name}: {e}; set `workload.kv_capacity_tokens`.") from None


def capture_kv_tokens(scn: Scenario, ladders: int) -> int:
    """KV-cache tokens lost to the FULL decode graph ladders a server captures beyond one.

    A static FULL server captures one ladder, the baseline every capacity here already
    leaves room for; each further ladder (a Model Runner V2 server captures one per K of
    its dynamic table) takes the hardware's ``graph_ladder_gib``, at the model's KV bytes
    per token (sliding-window layers counted at their window for the workload's mean
    request, as :func:`default_kv_capacity` counts them). Ladders share vLLM's global graph
    pool, so this is an upper bound.

    >>> from banditk.sim.scenario import parse_scenario
    >>> s = parse_scenario({"hardware": "gb10", "model": "qwen3.5-122b-a10b-int4",
    ...     "drafter": {"class": "mtp", "k_max": 2, "acceptance": [0.8, 0.6]},
    ...     "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180}})
    >>> capture_kv_tokens(s, 1), capture_kv_tokens(s, 3) > 0
    (0, True)
    """
    extra = max(0, int(ladders) - 1)
    hw = get_hardware(scn.hardware)
    if not extra or hw.graph_ladder_gib <= 0:
        return 0
    per_token = max(_kv_bytes_per_token(get_model(scn.model), _request_tokens(scn)), 1.0)
    return int(math.ceil(extra * hw.graph_ladder_gib * 2**30 / per_token))


class Simulator:
    """Serve one scenario under one policy.

    Args:
        scenario: the validated scenario.
        policy: a :class:`~banditk.policies.base.Policy`.
        seed: seed of every random draw (arrivals, acceptance, noise).
        speculation: False for a server without speculative decoding (``nospec``).
        dynamic: True when K changes per step (vLLM reserves K_max lookahead slots);
            False for static K.
        graph_mode: the server's decode-step graph mode (FULL, PIECEWISE, NONE), as
            :func:`banditk.sim.policies.build_policy` gives it. When absent: the scenario's
            ``dynamic_cudagraph`` for a dynamic server, FULL for a static one (NONE on
            hardware without graphs), as before the modes were per policy.
        graph_ladders: FULL decode ladders the server captures; those beyond one come off
            the KV cache (:func:`capture_kv_tokens`). When absent: 1 in FULL mode, else 0.
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        *,
        seed: int = 0,
        speculation: bool = True,
        dynamic: bool = True,
        graph_mode: str | None = None,
        graph_ladders: int | None = None,
    ) -> None:
        self.scn = scenario
        self.policy = policy
        self.spec = bool(speculation)
        self.k_max = scenario.k_max
        self._seed = seed
        self._arrival_rng = np.random.default_rng([seed, _ARRIVALS])
        self._clock_rng = np.random.default_rng([seed, _CLOCK])
        self._log_clock = 0.0
        hw, m = get_hardware(scenario.hardware), get_model(scenario.model)
        if graph_mode is None:
            graph_mode = (scenario.dynamic_cudagraph if dynamic else FULL) if hw.cuda_graphs else NO_GRAPHS
        if graph_mode not in GRAPH_MODES:
            raise ValueError(f"`graph_mode`={graph_mode!r} must be one of {', '.join(GRAPH_MODES)}.")
        if graph_ladders is None:
            graph_ladders = int(graph_mode == FULL)
        self.graph_mode = graph_mode
        self.graph_ladders = int(graph_ladders)
        self.cost = StepCostModel(hw, m, scenario.drafter_class, scenario.k_max, graph_mode=graph_mode)
        self.dynamic = bool(dynamic)
        self.wl = dict(scenario.workload)
        pops = scenario.populations or [Population("all", 1.0, list(scenario.acceptance), scenario.request_dispersion)]
        self.pop_names, self.pop_weight, self.pop_mu, self.pop_disp = _population_arrays(pops)
        #: Per population name, [drafts proposed, drafts verified] where a policy allotted them.
        self.verified_by_population: dict[str, list[int]] = {}
        self.kv_cap = self.wl.get("kv_capacity_tokens") or default_kv_capacity(scenario)
        self._check_capacity()
        #: KV tokens the graph ladders took, and whether the capacity was clipped at the floor.
        self.graph_kv_tokens, self.graph_kv_clipped = self._take_capture_memory()
        open_loop = self.wl.get("arrival_rate") is not None or any(
            p.workload and p.workload.get("arrival_rate") is not None for p in scenario.phases
        )
        conc = [self.wl.get("concurrency") or 0] + [(p.workload or {}).get("concurrency") or 0 for p in scenario.phases]
        n = self.wl["max_num_seqs"] if open_loop else max(conc)
        self.n_slots = int(max(n, 1))
        s = self.n_slots
        self.state = np.zeros(s, dtype=np.int8)
        self.prompt = np.zeros(s, dtype=np.int64)
        self.out_len = np.zeros(s, dtype=np.int64)
        self.gen = np.zeros(s, dtype=np.int64)
        self.computed = np.zeros(s, dtype=np.int64)
        # Each request's prefix-cache hit, fixed at admission: a phase that changes the
        # workload's prefix leaves the requests already admitted with their own.
        self.cached = np.zeros(s, dtype=np.int64)
        self.arrival = np.zeros(s)
        self.first = np.full(s, np.nan)
        self.order = np.zeros(s, dtype=np.int64)
        self.population = np.zeros(s, dtype=np.int64)  # each request's population (index)
        self.alpha = np.zeros((s, self.k_max))
        self.ecum = np.zeros((s, self.k_max + 1))
        # One uniform per (request, output position), for the drafts that meet it.
        self.uniform = np.zeros((s, self._longest_output() + self.k_max + 1))
        self.pending: deque[float] = deque()
        self.now = 0.0
        # vLLM fixes a step's K while scheduling the step before: the prompts it can see then
        # are those that had arrived by that step's start, and that step's chunk is known.
        self._decided_at, self._last_chunk_tokens = -math.inf, 0
        # The K the decoders verify and the lookahead they reserve, as of the last step: what
        # the scheduler charges them before it admits prompts (vLLM schedules running requests
        # first, with the drafts the step before proposed and the mode's lookahead).
        self._last_k = self.k_max if self.spec else 0
        self._lookahead = self.k_max if self.spec else 0
        self.step_idx = 0
        self._seq = 0
        self._next_arrival = self._draw_interarrival() if self.wl.get("arrival_rate") else math.inf
        self._phase_i = 0
        self.done = Requests()
        self._is_oracle = bool(getattr(policy, "needs_oracle", False))
        self._sees_step = bool(getattr(policy, "needs_step_view", False))
        self._allots = callable(getattr(policy, "allot", None))
        self._rate: float | None = None

    # -- workload ---------------------------------------------------------
    def _request_rng(self, order: int, phase: int = 0) -> np.random.Generator:
        """The stream of the request admitted ``order``-th (its draws again at a phase change)."""
        return np.random.default_rng([self._seed, _REQUESTS, int(order), phase])

    def _longest_output(self) -> int:
        """The most output tokens a request of any phase asks for."""
        outs = [self.wl["output_tokens"]] + [(p.workload or {}).get("output_tokens") or 0 for p in self.scn.phases]
        return int(max(outs))

    def _capacity_need(self) -> int:
        """KV tokens of the longest request of any phase, with its lookahead."""
        need, cur = 0, dict(self.wl)
        for ph in [None, *self.scn.phases]:
            if ph is not None and ph.workload:
                cur.update({k: v for k, v in ph.workload.items() if v is not None})
            need = max(need, prompt_bounds(cur["prompt_tokens"])[1] + cur["output_tokens"] + 1 + self.k_max)
        return need

    def _check_capacity(self) -> None:
        """The KV cache must hold the longest request alone (with its lookahead), or the
        scheduler would stall on it forever."""
        wl, need = self.wl, self._capacity_need()
        if self.kv_cap < need:
            field_ = "workload.kv_capacity_tokens" if wl.get("kv_capacity_tokens") else "hardware"
            raise ScenarioError(
                f"{self.scn.name}: the KV cache holds {self.kv_cap} tokens (`{field_}`), fewer than the "
                f"longest request needs ({need} tokens: prompt + output + lookahead); shorten "
                "`workload.prompt_tokens` or raise `workload.kv_capacity_tokens`."
            )

    def _take_capture_memory(self) -> tuple[int, bool]:
        """Take the graph ladders' memory off the KV cache (:func:`capture_kv_tokens`).

        A scenario whose cache holds its longest request without the ladders keeps running:
        the capacity is clipped at that request's need (and the clip reported) rather than
        refused. Only ladders that take the whole cache are an error.
        """
        lost = capture_kv_tokens(self.scn, self.graph_ladders)
        if not lost:
            return 0, False
        base = self.kv_cap
        if lost >= base:
            field_ = "workload.kv_capacity_tokens" if self.wl.get("kv_capacity_tokens") else "hardware"
            hw = get_hardware(self.scn.hardware)
            raise ScenarioError(
                f"{self.scn.name}: the server's {self.graph_ladders} FULL decode graph ladders "
                f"({self.graph_ladders - 1} beyond a static server's, `graph_ladder_gib`={hw.graph_ladder_gib} "
                f"of `hardware`={hw.name!r} each) take {lost} KV tokens, the whole KV cache of {base} tokens "
                f"(`{field_}`); raise `workload.kv_capacity_tokens` or run the policy @PIECEWISE."
            )
        cap = max(base - lost, self._capacity_need())
        self.kv_cap = cap
        return base - cap, base - lost < cap

    def _prefix_cached(self) -> int:
        """The prefix-cache hit of a request admitted now: the workload's
        ``prefix_cached_tokens`` in force at its admission, read only there (per admitted
        request: it keeps it when a phase changes the workload)."""
        return int(self.wl.get("prefix_cached_tokens") or 0)

    def _draw_interarrival(self) -> float:
        return self.now + self._arrival_rng.exponential(1.0 / self.wl["arrival_rate"])

    def _apply_phases(self) -> None:
        while self._phase_i < len(self.scn.phases) and self.scn.phases[self._phase_i].at_step <= self.step_idx:
            ph = self.scn.phases[self._phase_i]
            self._phase_i += 1
            if ph.acceptance is not None or ph.request_dispersion is not None or ph.populations:
                if ph.populations:
                    self.pop_names, self.pop_weight, self.pop_mu, self.pop_disp = _population_arrays(ph.populations)
                # The parser allows acceptance and dispersion only on a one-population scenario.
                if ph.acceptance is not None:
                    self.pop_mu = np.array([ph.acceptance], dtype=float)
                    self.pop_names = ["all"]
                if ph.request_dispersion is not None:
                    self.pop_disp = np.array([ph.request_dispersion], dtype=float)
                live = np.flatnonzero(self.state != EMPTY)
                for slot in live:  # each live request draws again from its own stream
                    self._draw_alpha(slot, self._request_rng(self.order[slot], self._phase_i))
            if ph.workload:
                was_open = self.wl.get("arrival_rate") is not None
                self.wl.update(
                    {k: v for k, v in ph.workload.items() if k in ("concurrency", "arrival_rate") or v is not None}
                )
                if self.wl.get("arrival_rate") is not None and (not was_open or "arrival_rate" in ph.workload):
                    self._next_arrival = self._draw_interarrival()
                elif self.wl.get("arrival_rate") is None:
                    self._next_arrival = math.inf

    def _draw_alpha(self, slot: int, rng: np.random.Generator) -> None:
        a, which = draw_mixture_acceptance(self.pop_weight, self.pop_mu, self.pop_disp, 1, rng)
        self.population[slot] = which[0]
        self.alpha[slot] = a[0]
        self.ecum[slot] = expected_tokens(a)[0]

    def _admit_new(self, slots: np.ndarray, arrivals: np.ndarray) -> None:
        self.state[slots] = WAITING
        prompt = self.wl["prompt_tokens"]
        self.order[slots] = np.arange(self._seq, self._seq + slots.size)
        self._seq += slots.size
        for slot in slots:  # the request's own stream: its prompt, its acceptance, its uniforms
            rng = self._request_rng(self.order[slot])
            self.prompt[slot] = draw_prompt_tokens(prompt, 1, rng)[0] if isinstance(prompt, dict) else prompt
            self._draw_alpha(slot, rng)
            self.uniform[slot] = rng.random(self.uniform.shape[1])
        self.out_len[slots] = self.wl["output_tokens"]
        self.gen[slots] = 0
        # A prefix-cache hit: vLLM starts the request at the cached length (the last prompt
        # token is always computed).
        self.cached[slots] = np.minimum(self._prefix_cached(), self.prompt[slots] - 1)
        self.computed[slots] = self.cached[slots]
        self.arrival[slots] = arrivals
        self.first[slots] = np.nan

    def _arrivals(self) -> None:
        empty = np.flatnonzero(self.state == EMPTY)
        if self.wl.get("arrival_rate") is None:
            want = self.wl["concurrency"] - (self.n_slots - empty.size)
            if want > 0 and empty.size:
                sl = empty[:want]
                self._admit_new(sl, np.full(sl.size, self.now))
            return
        while self._next_arrival <= self.now:
            self.pending.append(self._next_arrival)
            self._next_arrival = self._draw_interarrival()
        if self.pending and empty.size:
            n = min(empty.size, len(self.pending))
            arr = np.array([self.pending.popleft() for _ in range(n)])
            self._admit_new(empty[:n], arr)

    # -- oracle -------------------------------------------------------------
    def _oracle(self, tok_k: np.ndarray, times: np.ndarray, mixed: bool) -> tuple[int, np.ndarray, float]:
        """Best K and the score ``tokens - rate x time`` of every K (see :mod:`banditk.sim.oracle`).

        Decode-only steps use their own best ratio as the rate (the plain
        goodput argmax) and feed the running decode rate; steps with a prefill
        chunk use the running rate, so the chunk's cost does not make drafts
        look cheap.
        """
        best_ratio = float(np.max(tok_k / times))
        if not mixed or self._rate is None:
            lam = best_ratio
        else:
            lam = self._rate
        if not mixed:
            self._rate = (
                best_ratio if self._rate is None else self._rate + ORACLE_RATE_WEIGHT * (best_ratio - self._rate)
            )
        score = tok_k - lam * times
        return int(np.argmax(score)), score, lam

    # -- one step ---------------------------------------------------------
    def _kv_used(self) -> int:
        dec = self.state == DECODE
        pre = self.state == PREFILL
        used = int((self.prompt[dec] + self.gen[dec]).sum() + self.computed[pre].sum())
        live = dec | pre
        prefixes = self.cached[live]
        if prefixes.any():
            # A shared prefix's blocks are held once, whoever holds them: one prefix per
            # distinct cached length (the requests of one workload phase share it).
            held = np.minimum(prefixes, np.where(dec, self.prompt + self.gen, self.computed)[live])
            for c in np.unique(prefixes[prefixes > 0]):
                group = held[prefixes == c]
                used += int(group.max()) - int(group.sum())
        return used

    def _preempt_one(self) -> bool:
        live = np.flatnonzero((self.state == DECODE) | (self.state == PREFILL))
        if live.size <= 1:
            return False
        r = live[np.argmax(self.order[live])]
        self.state[r] = WAITING
        self.computed[r] = self.cached[r]
        return True

    def step(self, trace: Trace | None = None) -> None:
        """Run one scheduler step and record it at ``trace[self.step_idx]``."""
        self._apply_phases()
        self._arrivals()
        st = self.state
        if not ((st == DECODE) | (st == PREFILL) | (st == WAITING)).any():
            if math.isfinite(self._next_arrival):
                self.now = self._next_arrival
                self._arrivals()
                st = self.state
            else:
                raise SimulationError("no requests and no arrivals: the workload is empty.")
        start = self.now
        k_max = self.k_max
        wl = self.wl
        preempted = 0
        dec = np.flatnonzero(st == DECODE)
        used = self._kv_used()
        # Prefill chunks: partially prefilled first, then waiting by arrival.
        chunk_idx = np.zeros(0, dtype=np.int64)
        chunks = np.zeros(0, dtype=np.int64)
        cand_mask = (st == PREFILL) | (st == WAITING)
        if cand_mask.any():
            cand = np.flatnonzero(cand_mask)
            cand = cand[np.lexsort((self.arrival[cand], st[cand] != PREFILL))]
            budget = wl["max_num_batched_tokens"] - dec.size * (1 + self._last_k)
            free = self.kv_cap - used - dec.size * (1 + self._lookahead)
            running = int(((st == DECODE) | (st == PREFILL)).sum())
            ci, cs = [], []
            for r in cand:
                if budget <= 0 or free <= 0:
                    break
                need = int(self.prompt[r] + self.gen[r] - self.computed[r])
                if st[r] == WAITING:
                    # vLLM admits a request only if its whole sequence fits the free cache,
                    # not only its first chunk (`scheduler_reserve_full_isl`, on by default),
                    # and stops at the first that does not (first come, first served).
                    if running >= wl["max_num_seqs"] or need > free:
                        break
                    running += 1
                c = min(need, budget, free)
                ci.append(r)
                cs.append(c)
                budget -= c
                free -= c
            if ci:
                chunk_idx = np.array(ci, dtype=np.int64)
                chunks = np.array(cs, dtype=np.int64)
                st[chunk_idx] = PREFILL
        n_dec = dec.size
        n_sched = n_dec + chunk_idx.size
        queue = int((st == WAITING).sum()) + len(self.pending)
        # Decide K.
        decision = None
        k = 0
        allotted = None  # drafts verified per decoding request, where the policy cuts them
        if n_dec:
            ctx_len = self.prompt[dec] + self.gen[dec]
            kv_bytes = self.cost.kv_read_bytes(ctx_len, n_dec)
            times = self.cost.times(n_dec, n_sched, int(chunks.sum()), kv_bytes, spec=True)
            tok_k = self.ecum[dec].sum(axis=0)
            k_star, score, lam = self._oracle(tok_k, times, bool(chunks.size))
            if self._is_oracle:
                self.policy.next_k = k_star
            ctx = StepContext(
                num_decoding=n_dec,
                k_max=k_max,
                drafter_class=self.scn.drafter_class,
                kv_usage=min(1.0, used / self.kv_cap),
                queue_len=queue,
                num_scheduled=n_sched,
                prefill_tokens=int(chunks[self.arrival[chunk_idx] <= self._decided_at].sum()),
                context_tokens=int(ctx_len.sum()),
                running_prefill_tokens=self._last_chunk_tokens,
            )
            decision = self.policy.select(ctx)
            k = int(decision.k)
            if not 0 <= k <= k_max:
                raise SimulationError(f"policy {self.policy.name!r} chose `k`={k}, outside [0, {k_max}].")
            if not self.spec:
                k = 0
            # Lookahead slots; preempt the newest while the cache overflows. vLLM reserves
            # them for num_speculative_tokens: K_max in dynamic mode whatever K is drafted.
            lookahead = (k_max if self.dynamic else k) if self.spec else 0
            self._last_k, self._lookahead = k, lookahead
            while used + n_dec * (1 + lookahead) + int(chunks.sum()) > self.kv_cap:
                if not self._preempt_one():
                    break
                preempted += 1
                keep_c = st[chunk_idx] == PREFILL
                chunk_idx, chunks = chunk_idx[keep_c], chunks[keep_c]
                dec = np.flatnonzero(st == DECODE)
                n_dec = dec.size
                used = self._kv_used()
            if preempted:
                n_sched = n_dec + chunk_idx.size
                ctx_len = self.prompt[dec] + self.gen[dec]
                kv_bytes = self.cost.kv_read_bytes(ctx_len, n_dec)
                times = self.cost.times(n_dec, n_sched, int(chunks.sum()), kv_bytes, spec=True)
                tok_k = self.ecum[dec].sum(axis=0)
                k_star, score, lam = self._oracle(tok_k, times, bool(chunks.size))
            if self.spec and k > 0 and self._allots:
                verify_times = partial(self.cost.verified_times, n_dec, n_sched, int(chunks.sum()), kv_bytes, k)
                allotted = self._allot(dec, k, verify_times)
                t_exp = float(verify_times(np.array([allotted.sum()]))[0])
                exp_tok = float(self.ecum[dec, allotted].sum())
            elif self.spec:
                t_exp = float(times[k])
                exp_tok = float(tok_k[k])
            else:
                t_exp = float(self.cost.times(n_dec, n_sched, int(chunks.sum()), kv_bytes, spec=False)[0])
                exp_tok = float(n_dec)
            # Tokens the oracle would have emitted in this step's time (>= exp_tok in the same mode).
            oracle_tok = exp_tok + float(score[k_star]) - (exp_tok - lam * t_exp)
        else:
            pf_ctx = self.computed[chunk_idx]
            kv_bytes = self.cost.kv_read_bytes(pf_ctx, 0)
            t_exp = float(self.cost.times(0, n_sched, int(chunks.sum()), kv_bytes, spec=self.spec)[0])
            exp_tok = oracle_tok = 0.0
            k_star = -1
        t_obs = t_exp * self._clock_factor()
        end = self.now + t_obs
        emitted_total = 0
        acc = np.zeros(n_dec, dtype=np.int64)
        if n_dec:
            u = self.uniform[dec[:, None], self.gen[dec][:, None] + np.arange(k)]
            acc = accepted_from_uniforms(self.alpha[dec], u, allotted)
            emitted = np.minimum(1 + acc, self.out_len[dec] - self.gen[dec])
            self.gen[dec] += emitted
            emitted_total += int(emitted.sum())
        if chunk_idx.size:
            self.computed[chunk_idx] += chunks
            fin = chunk_idx[self.computed[chunk_idx] >= self.prompt[chunk_idx] + self.gen[chunk_idx]]
            if fin.size:
                st[fin] = DECODE
                self.gen[fin] += 1
                emitted_total += fin.size
                newf = fin[np.isnan(self.first[fin])]
                self.first[newf] = end
        finished = np.flatnonzero((st == DECODE) & (self.gen >= self.out_len))
        if finished.size:
            d = self.done
            d.arrival.extend(self.arrival[finished].tolist())
            d.first.extend(self.first[finished].tolist())
            d.finish.extend([end] * finished.size)
            d.out.extend(self.out_len[finished].tolist())
            d.step.extend([self.step_idx] * finished.size)
            st[finished] = EMPTY
        self._decided_at, self._last_chunk_tokens = start, int(chunks.sum())
        self.now = end
        if decision is not None:
            if allotted is None:
                drafted, accepted = np.full(n_dec, k, dtype=np.int64), acc
            else:
                drafted, accepted = self._report_verified(dec, allotted, acc)
            self.policy.observe(
                decision,
                StepOutcome(
                    drafted=drafted, accepted=accepted, step_duration_s=t_obs, prefill_tokens=int(chunks.sum())
                ),
            )
        if trace is not None:
            i = self.step_idx
            trace.duration[i] = t_obs
            trace.k[i] = k if decision is not None else -1
            trace.n_dec[i] = n_dec
            trace.n_sched[i] = n_sched
            trace.tokens[i] = emitted_total
            trace.expected_tokens[i] = exp_tok
            trace.oracle_tokens[i] = oracle_tok
            trace.k_star[i] = k_star
            trace.kv_usage[i] = min(1.0, used / self.kv_cap)
            trace.preemptions[i] = preempted
            trace.prefill[i] = int(chunks.sum())
            trace.verified[i] = int(allotted.sum()) if allotted is not None else n_dec * k
            if decision is not None:
                trace.bucket[i] = decision.bucket if decision.bucket >= 0 else protocol_bucket(n_dec)
        self.step_idx += 1

    def _allot(self, dec: np.ndarray, k: int, times) -> np.ndarray:
        """Drafts verified per decoding request (each 0..K), as the policy allots them.

        As vLLM's scheduler does for the per-request governor, the policy first hears which
        requests are still known (finished ones leave its book); a peer that models a GPU-side
        mechanism also sees the step (:class:`StepView`). Request ids are admission numbers.
        """
        pol = self.policy
        if callable(getattr(pol, "forget_finished", None)):
            pol.forget_finished([str(r) for r in self.order[self.state != EMPTY]])
        if self._sees_step:
            pol.step_view = StepView(self.alpha[dec], times, int(dec.size))
        drafted = np.full(dec.size, k, dtype=np.int64)
        out = np.asarray(pol.allot([str(r) for r in self.order[dec]], drafted))
        if out.shape != drafted.shape or out.dtype.kind not in "iu" or (out < 0).any() or (out > drafted).any():
            raise SimulationError(
                f"policy {self.policy.name!r} allotted {out.tolist()} drafts; each must be in 0..{k} (K drafted)."
            )
        pop = self.population[dec]
        for j in np.unique(pop):
            seen = self.verified_by_population.setdefault(self.pop_names[j], [0, 0])
            seen[0] += int(k * np.count_nonzero(pop == j))
            seen[1] += int(out[pop == j].sum())
        return out.astype(np.int64)

    def _report_verified(self, dec: np.ndarray, allotted: np.ndarray, acc: np.ndarray) -> tuple:
        """The step's verifications as vLLM reports them under cuts: one per request that verified
        a draft, in batch order (each also to ``on_verified``), then a zero row for each request
        cut to none, which vLLM does not report."""
        heard = allotted > 0
        hear = getattr(self.policy, "on_verified", None)
        if callable(hear):
            for r, n, a in zip(self.order[dec[heard]], allotted[heard], acc[heard], strict=True):
                hear(str(r), int(n), int(a))
        zeros = np.zeros(int((~heard).sum()), dtype=np.int64)
        return np.concatenate([allotted[heard], zeros]), np.concatenate([acc[heard], zeros])

    def _clock_factor(self) -> float:
        """The measured over the true step time: log-normal noise, correlated from step to
        step (``noise_ar1``), times an occasional stall (``noise_spike_p``), mean 1 without stalls."""
        scn = self.scn
        sd, rho = scn.noise_cv, scn.noise_ar1
        if sd > 0:
            self._log_clock = rho * self._log_clock + math.sqrt(1.0 - rho * rho) * self._clock_rng.normal(0.0, sd)
        factor = math.exp(self._log_clock - 0.5 * sd * sd) if sd > 0 else 1.0
        if scn.noise_spike_p > 0 and self._clock_rng.random() < scn.noise_spike_p:
            factor *= 1.0 + self._clock_rng.exponential(scn.noise_spike_mean)
        return factor

    def run(self, steps: int, progress=None) -> tuple[Trace, Requests]:
        """Run ``steps`` steps; ``progress(i, steps)`` is called every 500 steps."""
        trace = Trace.empty(steps)
        for i in range(steps):
            self.step(trace)
            if progress is not None and (i + 1) % 500 == 0:
                progress(i + 1, steps)
        return trace, self.done
