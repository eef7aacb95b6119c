"""Per-request verification on top of the batch governor: K for the batch, a budget per step.

The inner governor (:class:`~banditk.governor.bandit.BanditGovernor`) still chooses the draft
depth K. Before vLLM schedules the drafts of the last step, :meth:`PerRequestGovernor.allot`
chooses how many of each request's drafts to verify (docs/per-request.md):

1. each (request, position) gets a Thompson draw of its acceptance from the request's Beta,
   shrunk toward the class posterior (:mod:`banditk.posterior.request_acceptance`); a request
   whose drafts were cut keeps exploring through the width of its draws;
2. the budget is the one that maximises the step's goodput under a Thompson draw of what a
   verified token costs (:mod:`.verify_price`, :func:`~banditk.governor.verify_budget.best_budget`);
3. the budget's slots go to the highest survivals (:func:`~banditk.governor.verify_budget.allot`).

The inner governor is credited each step as it ran: its (bucket, K) cells learn what K costs
when drafts are cut, and its acceptance learns from the drafts that were verified.
"""

from __future__ import annotations

import numpy as np

from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor.request_book import RequestBook
from banditk.governor.verify_budget import allot, best_budget
from banditk.governor.verify_price import VerifyPrice, verified_features
from banditk.posterior import latency_model
from banditk.posterior.request_acceptance import survival

#: Most allotments between two estimates of the strength n0 (each reads up to 512 finished
#: requests); the first estimates come after 1, 2, 4, ... allotments, while evidence is thin.
STRENGTH_REFRESH = 64
#: Index of the seconds-per-verified-token weight in the step-time model.
VERIFY_WEIGHT = latency_model.FEATURES.index("verify_token_s")


class PerRequestGovernor:
    """A bandit governor whose drafts are verified per request.

    Args:
        inner: the batch governor (``select``/``observe``, ``acceptance_params``,
            ``latency_weights``, ``config``); every attribute not defined here is the inner's,
            so snapshots, state lines and counters are the inner's own.
        seed: seed of the per-request draws (a stream of its own: the inner's draws are unchanged).
    """

    name = "bandit-per-request"

    def __init__(self, inner, seed: int = 0) -> None:
        self.inner = inner
        self.book = RequestBook(inner.config.k_max)
        self.price = VerifyPrice()
        self._rng = np.random.default_rng([seed, 16])
        self._strength, self._since_strength, self._strength_fits = None, 0, 0
        # Drafts proposed and verified through allot, for the state line and the tests.
        self.proposed_drafts = self.verified_drafts = 0

    def __getattr__(self, name: str):
        # Only for names this class lacks: the inner governor's posterior, state and reports.
        return getattr(self.__dict__["inner"], name)

    # ---- the batch decision: the inner governor's -------------------------------------------

    def select(self, context: StepContext) -> Decision:
        return self.inner.select(context)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """Credit the inner governor, and price the verified tokens on a step without a prompt chunk."""
        self.inner.observe(decision, outcome)
        if outcome.drafted.size and not outcome.prefill_tokens:
            self.price.observe(outcome.drafted.size, int(outcome.drafted.sum()), decision.k, outcome.step_duration_s)

    # ---- the per-request evidence ---------------------------------------------------------------

    def on_verified(self, request_id: str, drafted: int, accepted: int) -> None:
        """One request's verified step, as vLLM counts it."""
        self.book.observe(request_id, min(drafted, self.book.k_max), min(accepted, drafted, self.book.k_max))

    def forget_finished(self, live_ids) -> None:
        """Move every request not in ``live_ids`` out of the running book (finished or aborted)."""
        live = set(live_ids)
        for request_id in [r for r in self.book.running_ids() if r not in live]:
            self.book.finish(request_id)

    # ---- the budget ---------------------------------------------------------------------------

    def allot(self, request_ids: list[str], drafted: np.ndarray) -> np.ndarray:
        """Drafts to verify per request, each at most what it drafted."""
        drafted = np.asarray(drafted, dtype=np.int64)
        self.proposed_drafts += int(drafted.sum())
        batch, depth = len(request_ids), int(drafted.max(initial=0))
        w = self.price.draw(self._rng, self.inner.latency_weights())
        price = float(w[VERIFY_WEIGHT])
        # The step's time with every draft cut: the fixed part and the drafting already spent.
        base = float(verified_features(batch, 0, depth) @ w)
        if price <= 0 or base <= 0 or not drafted.any():
            self.verified_drafts += int(drafted.sum())
            return drafted  # verification is free as far as the model knows: verify everything
        a, b = self.inner.acceptance_params()
        mean = a / (a + b)
        n0 = self._strength_for(mean)
        succ, fail = self.book.counts(list(request_ids))
        surv = survival(self._rng.beta(n0 * mean + succ, n0 * (1.0 - mean) + fail))
        slots = np.arange(surv.shape[1]) < drafted[:, None]
        budget = best_budget(surv[slots], batch, base, price)
        out = allot(surv, drafted, budget)
        self.verified_drafts += int(out.sum())
        return out

    def _strength_for(self, class_mean: np.ndarray) -> float:
        self._since_strength += 1
        if self._strength is None or self._since_strength >= min(STRENGTH_REFRESH, 2**self._strength_fits):
            self._strength, self._since_strength = self.book.strength(class_mean), 0
            self._strength_fits += 1
        return self._strength

    def state_line(self) -> str:
        share = self.verified_drafts / self.proposed_drafts if self.proposed_drafts else 1.0
        return f"{self.inner.state_line()} | verified {share:.0%} of drafts, n0={self._strength or 0:.3g}"
