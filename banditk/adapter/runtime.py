"""The governor's life inside vLLM's engine core: decide, credit, record, snapshot.

:class:`GovernorRuntime` is driven by the four scheduler hooks of
:mod:`banditk.adapter.scheduler` and owns the policy, the
:class:`~.ledger.DecisionLedger`, :class:`~.telemetry.Telemetry`, the JSONL log
and the :class:`~.snapshots.SnapshotWriter`. It reads and writes vLLM objects
only through :mod:`.vllm_compat`.

Guarantee: nothing here stops the engine. A policy that raises or returns an
invalid K is logged once per kind, counted, and replaced by the fallback K for
that step; the outcome of such a step is not credited. A policy call slower than
``slow_call_ms`` (select plus the preceding observe) is a fault of kind ``slow``;
a few in a row make the runtime use the fallback K and bypass the policy for a
growing number of steps (:mod:`.breaker`).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from banditk.adapter import admitted_drafts, data_parallel, event_timing, vllm_compat, worker_timing
from banditk.adapter.breaker import SlowCallBreaker
from banditk.adapter.draft_times import DraftTimes
from banditk.adapter.graph_mode import server_mode_of
from banditk.adapter.ledger import DecisionLedger, StepEntry, decision_cost
from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY, AdapterSettings
from banditk.adapter.snapshots import SnapshotWriter
from banditk.adapter.telemetry import RotatingJsonl, Telemetry
from banditk.adapter.timed_credits import TimedCredits
from banditk.core.types import StepContext, StepOutcome
from banditk.io import trace

# A child of vLLM's logger, so state lines appear in vLLM's log with its format.
logger = logging.getLogger("vllm.banditk")

#: Requests' histories are evicted every this many steps (and at shutdown).
_EVICT_EVERY = 64
#: Outputs without forward durations before the log says none will come (GPU samples arrive late).
_UNTIMED_BEFORE_WARNING = 64


class GovernorRuntime:
    """Everything the governed scheduler does besides calling ``super()``.

    Args:
        settings: resolved adapter settings (K_max and method known).
        policy: the K-choosing policy (``select``/``observe``).
        dynamic_k: whether vLLM runs in dynamic-K mode; if not, K is left alone.
        clock: a ``perf_counter``-like clock, injectable for tests.
    """

    def __init__(
        self,
        settings: AdapterSettings,
        policy: Any,
        *,
        dynamic_k: bool = True,
        clock=time.perf_counter,
        provenance: dict | None = None,
    ) -> None:
        self.settings = settings
        self.set_policy(policy)
        self.k_max = int(settings.k_max)
        self.drafter_class = settings.drafter_class_for()
        self.fallback_k = settings.effective_fallback_k
        self.dynamic_k = dynamic_k
        self.clock = clock
        # Call durations use the real monotonic clock: ``clock`` may be a test's broken one.
        self.breaker = SlowCallBreaker(settings.slow_call_ms / 1e3)
        self._observe_s = 0.0
        self.ledger = DecisionLedger()
        self.telemetry = Telemetry(self.k_max, settings.request_history)
        self.log = (
            RotatingJsonl(
                settings.telemetry_log,
                settings.telemetry_log_max_bytes,
                settings.telemetry_log_backups,
                header=trace.header(self.drafter_class, self.k_max, "vllm", **(provenance or {})),
            )
            if settings.telemetry_log
            else None
        )
        self.snapshots = (
            SnapshotWriter(settings.snapshot_path, settings.snapshot_interval_s, policy, provenance)
            if settings.snapshot_path
            else None
        )
        self.last_k = self.fallback_k
        self.select_calls = 0
        self._t_schedule = clock()
        # The requests the output being read padded with placeholder drafts (its entry's).
        self._padding: frozenset = frozenset()
        self._verified: list[tuple[str, int, int]] = []
        self._timing_said, self._untimed_outputs = False, 0
        self._admitted_said = False
        self.draft_times = DraftTimes()
        self.timed_credits = TimedCredits()
        # Under vLLM's adaptive verification: each step's verifications until the worker says
        # what was admitted (None: every scheduled draft was verified).
        self.held: admitted_drafts.HeldVerifications | None = None
        # Under it, each step's verifications cut to what was admitted, kept until the credit of
        # the decision whose drafts it verified reads them, and the credits still waiting for them.
        self._cut: OrderedDict[int, list] = OrderedDict()
        self._awaiting: OrderedDict[int, tuple] = OrderedDict()
        self._t_state = time.monotonic()
        self._closed = False
        self.server_mode = ""  # "MRv2 FULL", "V1 PIECEWISE", ...: set from vLLM's config
        self._snapshot_obs = None
        ref = weakref.ref(self)
        atexit.register(lambda: (r := ref()) is not None and r.close())

    def set_policy(self, policy: Any) -> None:
        """Steer with ``policy`` from the next step (the per-request scheduler wraps the governor)."""
        self.policy = policy
        # The next step's prompt tokens cost a pass over the queue each step: only for a
        # policy that reads them.
        self._wants_prefill_hint = bool(getattr(policy, "wants_prefill_hint", False))
        # Outcomes as counts per (drafted, accepted) pair, unless the policy reads rows.
        self._wants_rows = bool(getattr(policy, "wants_rows", False))

    # ---- construction from vLLM -------------------------------------------------------------

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> GovernorRuntime:
        from banditk.adapter.policy_factory import build_policy

        vllm_compat.check_vllm_shape()
        raw = vllm_compat.additional_config(vllm_config).get(ADDITIONAL_CONFIG_KEY)
        settings = AdapterSettings.from_dict(raw)
        prov = {"vllm_version": vllm_compat.vllm_version(), "method": settings.method}
        if raw.get(data_parallel.DP_SIZE_KEY, 1) > 1:  # one file per rank: ranks never share one
            rank = data_parallel.rank_of(vllm_config)
            settings = dataclasses.replace(
                settings,
                snapshot_path=data_parallel.per_rank_path(settings.snapshot_path, rank),
                telemetry_log=data_parallel.per_rank_path(settings.telemetry_log, rank),
            )
            prov["data_parallel_rank"] = rank
        policy = build_policy(settings)
        try:
            prov["target_model"] = str(vllm_config.model_config.model)
        except Exception:
            pass
        rt = cls(settings, policy, dynamic_k=vllm_compat.dynamic_k_enabled(vllm_config), provenance=prov)
        rt.server_mode = server_mode_of(vllm_config).label
        if vllm_compat.adaptive_verification_enabled(vllm_config):
            rt.held = admitted_drafts.HeldVerifications()
        ref = weakref.ref(rt)
        vllm_compat.on_engine_core_shutdown(lambda: (r := ref()) is not None and r.close())
        logger.info(
            "banditk governor %s (class %s, K_max=%d, fallback K=%d) steering K in the scheduler.",
            getattr(policy, "name", type(policy).__name__),
            rt.drafter_class,
            rt.k_max,
            rt.fallback_k,
        )
        logger.info("banditk %s", prior_line(policy, settings))
        return rt

    # ---- scheduler hooks --------------------------------------------------------------------

    def on_schedule_start(self) -> None:
        self._t_schedule = self.clock()

    def padding_k(self) -> int:
        """The K to pad new decode requests to in this ``schedule()``: that of the drafts it
        verifies, the last K written (:func:`.vllm_compat.static_decode_padding`); 0 when vLLM
        keeps its own K."""
        return self.last_k if self.dynamic_k else 0

    def on_schedule(self, scheduler: Any, scheduler_output: Any) -> None:
        """Decide K for this step (before ``_update_after_schedule``) and write it into the output."""
        try:
            if scheduler_output.total_num_scheduled_tokens <= 0:
                return  # the model does not run: nothing to decide or credit
            # The decoders, their context tokens (prompt + generated) and scheduled tokens, in one pass.
            decoding, context_tokens, decode_tokens, prompts_left = vllm_compat.decoding_requests(
                scheduler, scheduler_output
            )
            # Prompt tokens computed in this step (chunked prefill): their time is not K's.
            prefill = int(scheduler_output.total_num_scheduled_tokens) - decode_tokens
            padded = vllm_compat.padded_request_ids(scheduler_output)
            if padded:  # a padded prompt's placeholder rows are not prompt tokens
                spec, decoders = scheduler_output.scheduled_spec_decode_tokens, set(decoding)
                prefill -= sum(len(spec[r]) for r in padded if r not in decoders)
                self.telemetry.padded_requests += len(padded)
            prefill = max(prefill, 0)
            decision, fallback = None, None
            if not self.dynamic_k:
                k = vllm_compat.num_spec_tokens(scheduler_output)
            else:
                # A prefill-only step asks the policy too (B = 0): requests finishing their
                # prompt get drafts, and a table gives the K vLLM's table would.
                k, decision, fallback = self._select(
                    scheduler, scheduler_output, len(decoding), context_tokens, prefill, prompts_left
                )
                self.last_k = k
                vllm_compat.set_num_spec_tokens(scheduler_output, k)
            # One record of the step, found again from the index stamped on its output.
            step = self.ledger.open_step(
                k=k,
                decision=decision,
                decoding=tuple(decoding),
                t_schedule=self._t_schedule,
                num_reqs=len(scheduler_output.num_scheduled_tokens),
                ctx=context_tokens,  # the trace's `ctx`: `banditk fit` splits cells by context with it
                prefill=prefill,
                padded=padded,
                fallback=fallback,
            )
            if fallback is not None:
                fb = self.telemetry.fallbacks
                fb[fallback] = fb.get(fallback, 0) + 1
            event_timing.stamp(scheduler_output, step)
        except Exception as e:  # never stop the engine
            self._error("schedule_hook", e)
            try:
                vllm_compat.set_num_spec_tokens(scheduler_output, self.fallback_k)
                self.last_k = self.fallback_k
            except Exception:
                pass

    def _select(
        self,
        scheduler: Any,
        scheduler_output: Any,
        num_decoding: int,
        context_tokens: int = 0,
        prefill: int = 0,
        prompts_left: int = 0,
    ) -> tuple[int, Any, str | None]:
        """(K, the policy's decision, None) or (fallback K, None, why the fallback was used)."""
        kv, queue = vllm_compat.kv_usage(scheduler), vllm_compat.queue_len(scheduler)
        self.telemetry.kv_usage, self.telemetry.queue_len = kv, queue
        if self.breaker.remaining > 0 and self.breaker.skip():
            self._observe_s = 0.0
            return self.fallback_k, None, "breaker_open"
        self.select_calls += 1
        t0 = time.perf_counter()
        try:
            ctx = StepContext(
                num_decoding=num_decoding,
                k_max=self.k_max,
                drafter_class=self.drafter_class,
                kv_usage=kv,
                queue_len=queue,
                num_scheduled=len(scheduler_output.num_scheduled_tokens),
                prefill_tokens=vllm_compat.next_step_prefill_tokens(scheduler, prompts_left)
                if self._wants_prefill_hint
                else 0,
                context_tokens=context_tokens,
                running_prefill_tokens=prefill,
            )
            decision = self.policy.select(ctx)
        except Exception as e:
            self._error("select", e)
            return self.fallback_k, None, "select"
        # One budget per step for the governor's work: this select and the last observe.
        spent, self._observe_s = time.perf_counter() - t0 + self._observe_s, 0.0
        b = self.breaker  # a fast step after fast steps leaves it as it is: no call
        if (spent > b.budget_s or b.in_a_row or b.cooldown != b.base_cooldown) and self._slow(spent):
            return self.fallback_k, None, "slow"
        raw = getattr(decision, "k", None)
        k = raw if type(raw) is int else int(raw) if isinstance(raw, np.integer) else None  # a bool is neither
        if k is None or not 0 <= k <= self.k_max:
            self._error("invalid_k", ValueError(f"policy returned K={raw!r}, outside 0..{self.k_max}"))
            return self.fallback_k, None, "invalid_k"
        self.telemetry.observe_decision(k, kv, queue)
        return k, decision, None

    def on_verified(
        self, request_id: str, num_draft_tokens: int, num_accepted_tokens: int, num_invalid_spec_tokens: dict | None
    ) -> None:
        """One request's verification, as vLLM counts it for its own spec-decoding metrics."""
        if request_id in self._padding:  # placeholder drafts: vLLM counts them rejected, no decision drafted them
            return
        if num_invalid_spec_tokens:  # drafts a grammar rejected are not counted as drafted (as vLLM does)
            num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)
        self._verified.append((request_id, num_draft_tokens, num_accepted_tokens))

    def on_output_start(self, scheduler_output: Any = None) -> None:
        self._verified = []
        step = None if scheduler_output is None else event_timing.stamped_step(scheduler_output)
        entry = None if step is None else self.ledger.entry(step)
        self._padding = frozenset() if entry is None else entry.padded

    def is_padding(self, request_id: str) -> bool:
        """Whether ``request_id``'s drafts in the output being read were placeholders (padding)."""
        return request_id in self._padding

    def on_output(self, scheduler: Any, scheduler_output: Any, model_runner_output: Any) -> None:
        """Credit this step's verification to the decision of the previous executed step."""
        try:
            self._on_output(scheduler, scheduler_output, model_runner_output)
        except Exception as e:
            self._error("output_hook", e)
        finally:
            self._verified, self._padding = [], frozenset()

    def _on_output(self, scheduler: Any, scheduler_output: Any, model_runner_output: Any) -> None:
        t_end = self.clock()
        verified = self._verified
        step = event_timing.stamped_step(scheduler_output)
        learned = verified if self.held is None else self._admitted(step, verified, model_runner_output)
        if self._awaiting:
            self._credit_awaiting()
        # A batch's verifications are counted once, for the telemetry and the credit; a few
        # requests cost the telemetry less one by one than a fold of every pair.
        pairs = None
        if learned:
            if self.telemetry.keeps_histories or len(learned) <= self.k_max:
                self.telemetry.observe_requests(learned)
            else:
                pairs = _pairs(learned, self.k_max, 0)
                self.telemetry.observe_pairs(pairs)
        if step is None or self.ledger.entry(step) is None:
            if not vllm_compat.has_unfinished_requests(scheduler):
                self._on_idle(scheduler)
            return
        timing = worker_timing.read(model_runner_output)  # this step's, on CPU
        samples = event_timing.read(model_runner_output)  # earlier steps', on MRv2
        for s in samples:
            self.draft_times.observe(s.k, s.num_reqs, s.draft_s)
            self.telemetry.observe_forwards(s.target_s, s.draft_s)
        if samples or self.timed_credits.active:  # an output also ages the waiting credits
            self.timed_credits.add(samples)
        self._note_timing("the worker's timers" if timing else "CUDA events" if samples else None)
        target_s, draft_s = (None, None) if timing is None else timing
        res = self.ledger.close_step(step, t_end=t_end, draft_s=draft_s)
        if res is not None:
            prev, cycle = res
            self.telemetry.observe_step(cycle, target_s, prev.draft_s)
            if prev.decision is not None and prev.decoding:  # nothing decoded: nothing to learn
                verifier = self.ledger.last_closed
                credit = _Credit(
                    prev,
                    verifier,
                    cycle,
                    verified,
                    scheduler_output.num_scheduled_tokens,  # held, not copied: vLLM makes one per step
                    verifier.prefill,
                    pairs if learned is verified else None,
                )
                if self.timed_credits.active:  # MRv2: wait for both steps' CUDA-event times
                    self.timed_credits.push(own_step=prev.step, verify_step=step, payload=credit)
                else:
                    self._credit(credit, target_s, prev.draft_s, self._draft_s(credit.verifier))
            elif prev.fallback is not None and self.log is not None:
                # Not credited, but the K it ran belongs in the K sequence the switch counts read.
                record = trace.fallback_record(prev.k, len(prev.decoding), prev.fallback, t=time.time())
                if self.timed_credits.active:  # in its place among the waiting credits
                    self.timed_credits.push(own_step=prev.step, verify_step=step, payload=record)
                else:
                    self.log.write(record)
        if self.timed_credits.active and self.timed_credits.num_waiting:
            self._release_timed()
        if step % _EVICT_EVERY == 0 and self.telemetry.keeps_histories:  # histories of requests gone
            self.telemetry.evict(scheduler.requests)
        self._periodic()
        if not vllm_compat.has_unfinished_requests(scheduler):
            self._on_idle(scheduler)

    def _admitted(self, step: int | None, verified: list, model_runner_output: Any) -> list:
        """The verifications whose admitted counts came, cut to the drafts adaptive verification
        verified; the rest wait for theirs."""
        held = self.held
        if step is not None and not verified:
            self._keep_cut(step, [])  # nothing verified: no counts to wait for
        held.hold(step, verified)
        out = []
        for s, cut in held.release(admitted_drafts.read(model_runner_output)):
            self._keep_cut(s, cut)
            out += cut
        if held.dropped and not self._admitted_said:
            self._admitted_said = True
            logger.warning(
                "banditk: a step's admitted-draft counts never came from the worker (held %d steps); under "
                "adaptive verification such steps teach no acceptance (the governor keeps what it knows).",
                admitted_drafts.MAX_HELD,
            )
        return out

    def _keep_cut(self, step: int, cut: list) -> None:
        self._cut[step] = cut
        while len(self._cut) > 2 * admitted_drafts.MAX_HELD:  # steps whose credit never comes
            self._cut.popitem(last=False)

    def _credit_awaiting(self, flush: bool = False) -> None:
        """Observe the waiting credits whose admitted counts came, or never will (all of them
        with ``flush``: no output will bring the rest); the latter teach time, not acceptance."""
        for step in [s for s in self._awaiting if flush or s in self._cut or not self.held.holds(s)]:
            c, *times = self._awaiting.pop(step)
            c.verified, c.pairs = self._cut.pop(step, []), None
            self._observe_credit(c, *times)

    def _release_timed(self, flush: bool = False) -> None:
        """Observe the credits whose CUDA-event times came (or waited long enough)."""
        for r in self.timed_credits.release(flush=flush):
            if not isinstance(r.payload, _Credit):  # a fallback step's trace record
                self.log.write(r.payload)
                continue
            nxt = r.next_draft_s if r.next_draft_s is not None else self._draft_s(r.payload.verifier)
            self._credit(r.payload, r.target_s, r.own_draft_s, nxt)

    def _on_idle(self, scheduler: Any) -> None:
        """The engine ran dry: persist what was learned (a server may be killed while idle)."""
        self._release_timed(flush=True)  # no output will bring the last steps' times
        self._credit_awaiting(flush=True)
        self.telemetry.evict(scheduler.requests)
        if self.log is not None:
            self.log.flush()
        obs = getattr(self.policy, "observations", None)
        if self.snapshots is not None and obs != self._snapshot_obs:
            self._snapshot_obs = obs
            self.snapshots.write()

    def _credit(self, c: _Credit, target_s: float | None, draft_s: float | None, next_draft_s: float | None) -> None:
        """Observe one decision, under adaptive verification with the verifications its verifying
        step admitted (held until the worker's counts come: trimmed drafts are not rejections)."""
        if self.held is not None:
            step = c.verifier.step
            if step not in self._cut and self.held.holds(step):
                self._awaiting[step] = (c, target_s, draft_s, next_draft_s)
                if len(self._awaiting) > admitted_drafts.MAX_HELD:  # bounded as the held steps are
                    old, (oc, *times) = self._awaiting.popitem(last=False)
                    oc.verified, oc.pairs = self._cut.pop(old, []), None
                    self._observe_credit(oc, *times)
                return
            c.verified, c.pairs = self._cut.pop(step, []), None  # []: counts never came: time, no acceptance
        self._observe_credit(c, target_s, draft_s, next_draft_s)

    def _observe_credit(
        self, c: _Credit, target_s: float | None, draft_s: float | None, next_draft_s: float | None
    ) -> None:
        """Observe one decision: its verification, and the cycle that verified it with the drafter
        part swapped (``next_draft_s`` out, its own in: ``draft_s`` where measured, else the
        estimate). ``target_s``/``draft_s`` go into the outcome and the trace as measured."""
        prev, k_max = c.prev, self.k_max
        own_draft_s = self._draft_s(prev) if draft_s is None else draft_s
        duration = decision_cost(c.cycle_s, next_draft_s, own_draft_s)
        verified, scheduled = c.verified, c.scheduled
        # Requests that decoded at the decision and are still running but verified no
        # drafts (truncated near max_model_len, or K = 0) count as drafting nothing.
        silent = _silent(prev.decoding, verified, scheduled)
        timing = {"draft_duration_s": draft_s, "target_duration_s": target_s, "prefill_tokens": c.prefill_tokens}
        if self._wants_rows:
            drafted = [0 if d < 0 else d if d < k_max else k_max for _, d, _ in verified]
            accepted = [0 if a < 0 else a if a < d else d for (_, _, a), d in zip(verified, drafted)]
            drafted = np.array(drafted + [0] * silent if silent else drafted, dtype=np.int64)
            accepted = np.array(accepted + [0] * silent if silent else accepted, dtype=np.int64)
            outcome = StepOutcome(drafted, accepted, duration, **timing)
        elif c.pairs is not None:  # counted once for the telemetry: add the silent requests
            outcome = StepOutcome.counted((c.pairs[0] + silent, *c.pairs[1:]), duration, **timing)
        else:
            outcome = StepOutcome.counted(_pairs(verified, k_max, silent), duration, **timing)
        t0 = time.perf_counter()
        try:
            self.policy.observe(prev.decision, outcome)
        except Exception as e:
            self._error("observe", e)
        self._observe_s += time.perf_counter() - t0
        if self.log is not None:
            # The trace format of banditk.io.trace: `banditk fit` reads this log directly.
            self.log.write(
                trace.step_record(
                    prev.decision,
                    outcome,
                    k_max,
                    ctx=prev.ctx,
                    t=round(time.time(), 3),
                    kv=round(self.telemetry.kv_usage, 4),
                    queue=self.telemetry.queue_len,
                )
            )

    # ---- housekeeping -----------------------------------------------------------------------

    def _draft_s(self, entry) -> float | None:
        """The drafter time of a closed step: measured (CPU), else estimated from CUDA-event samples."""
        if entry.draft_s is not None:
            return entry.draft_s
        return self.draft_times.estimate(entry.k, entry.num_reqs)

    def _note_timing(self, source: str | None) -> None:
        """Say once where forward durations come from or, after a while without any, that none do."""
        if self._timing_said:
            return
        self._untimed_outputs += source is None
        if source is not None:
            logger.info(
                "banditk: draft and target forward durations come from %s; each decision is credited "
                "its own drafter time.",
                source,
            )
        elif self._untimed_outputs >= _UNTIMED_BEFORE_WARNING:
            logger.warning(
                "banditk: draft/target forward durations are not measurable in this layout; "
                "each decision is credited the whole step cycle that verified its drafts."
            )
        else:
            return
        self._timing_said = True

    def _periodic(self) -> None:
        if self.snapshots is not None:
            self.snapshots.maybe_write()
        interval = self.settings.state_log_interval_s
        if interval > 0 and time.monotonic() - self._t_state >= interval:
            self._t_state = time.monotonic()
            logger.info("%s", self.state_line())
            if self.log is not None:
                self.log.flush()

    def state_line(self) -> str:
        """The governor's own state line (when it has one) and the telemetry summary."""
        head = f"banditk policy={getattr(self.policy, 'name', '?')}"
        try:
            if hasattr(self.policy, "state_line"):
                head = self.policy.state_line()
        except Exception as e:
            self._error("state_line", e)
        mode = f" | mode={self.server_mode}" if self.server_mode else ""
        return f"{head}{mode} | {self.telemetry.line()}"

    def _slow(self, elapsed_s: float) -> bool:
        """Count a step over budget as a fault; True once slow steps opened the breaker."""
        if not self.breaker.record(elapsed_s):
            return False
        self._error(
            "slow",
            TimeoutError(
                f"select + observe took {1e3 * elapsed_s:.1f} ms, over slow_call_ms={1e3 * self.breaker.budget_s:g}; "
                f"{self.breaker.strikes} in a row bypass the governor, longer each time it stays slow"
            ),
        )
        return self.breaker.is_open

    def _error(self, kind: str, exc: BaseException) -> None:
        n = self.telemetry.count_error(kind)
        if n == 1:
            logger.error(
                "banditk: %s failed (%s: %s); using fallback K=%d. Further %s errors are counted, not logged.",
                kind,
                type(exc).__name__,
                exc,
                self.fallback_k,
                kind,
            )

    def close(self) -> None:
        """Final snapshot, state line and log flush; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._release_timed(flush=True)
            self._credit_awaiting(flush=True)
            if self.snapshots is not None:
                self.snapshots.close()
            logger.info("%s", self.state_line())
            if self.log is not None:
                self.log.close()
        except Exception as e:  # pragma: no cover - shutdown must not raise
            self._error("close", e)


@dataclass(slots=True)
class _Credit:
    """What observing one decision needs, kept while it waits for its GPU times.

    ``prev`` drafted the tokens, ``verifier`` is the step whose cycle (``cycle_s``) verified
    them; ``scheduled`` holds the requests scheduled in that step (vLLM's per-step dict).
    """

    prev: StepEntry
    verifier: StepEntry
    cycle_s: float
    verified: list
    scheduled: Mapping[str, int]
    prefill_tokens: int
    pairs: tuple[int, ...] | None = None  # ``verified`` counted (``StepOutcome.pairs``), when it was


def _silent(decoding: tuple[str, ...], verified: list, scheduled: Mapping[str, int]) -> int:
    """Requests of ``decoding`` still scheduled that verified nothing."""
    seen = {r for r, _, _ in verified}
    return sum(1 for r in decoding if r not in seen and r in scheduled)


def _pairs(verified: list, k_max: int, silent: int) -> tuple[int, ...]:
    """The verifications as counts per (drafted, accepted) pair (``StepOutcome.pairs``), each
    clamped to 0 <= accepted <= drafted <= ``k_max``; the silent requests drafted nothing."""
    w = k_max + 1
    pairs = [0] * (w * w)
    pairs[0] = silent
    for _, d, a in verified:
        d = 0 if d < 0 else d if d < k_max else k_max
        pairs[d * w + (0 if a < 0 else a if a < d else d)] += 1
    return tuple(pairs)


def prior_line(policy: Any, settings: AdapterSettings) -> str:
    """What the governor starts from, for the start-up log: the prior (file, class, hardware,
    date) or the flat prior.

    >>> from types import SimpleNamespace
    >>> prior_line(SimpleNamespace(prior=None), SimpleNamespace(prior=None))
    'starts from the flat prior (no governor_config.prior)'
    """
    if not hasattr(policy, "prior"):
        return f"policy {getattr(policy, 'name', type(policy).__name__)} keeps no posterior, so no prior"
    prior = policy.prior
    if prior is None:
        return "starts from the flat prior (no governor_config.prior)"
    key, prov = prior.key, prior.provenance or {}
    when = prov.get("fitted") or prov.get("created") or "-"
    return (
        f"starts from prior {settings.prior}: class={key.drafter_class} target={key.target_model or '-'} "
        f"hardware={key.hardware or '-'} fitted={when} strength_cap={prior.strength_cap:g}"
    )
