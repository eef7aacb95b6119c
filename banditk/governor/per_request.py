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

The inner governor learns the world without cuts, so that its K is the K it would choose
alone and the cuts only add: each cut request that accepted all it verified has the rest of its
K drafts imputed from its own posterior (data augmentation of a censored observation), and the
step's time has the price of the cut drafts added back. Learning from the cut steps as they ran
instead biases K deep: the requests that reach a deep position are the ones that accept, and a
cut step is cheaper than the K it drafted, while drafting, which cuts do not save, is what a deep
K costs.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor.request_book import RequestBook
from banditk.governor.verify_budget import allot, best_budget
from banditk.governor.verify_price import VERIFY_WEIGHT, VerifyPrice, verified_features
from banditk.posterior.request_acceptance import MAX_STRENGTH, shrunk_alpha, survival

#: Most allotments between two estimates of the strength n0 (each reads up to 512 finished
#: requests); the first estimates come after 1, 2, 4, ... allotments, while evidence is thin.
STRENGTH_REFRESH = 64


class PerRequestGovernor:
    """A bandit governor whose drafts are verified per request.

    Args:
        inner: the batch governor (``select``/``observe``, ``acceptance_params``,
            ``latency_weights``, ``config``); every attribute not defined here is the inner's,
            so snapshots, state lines and counters are the inner's own.
        seed: seed of the per-request draws (a stream of its own: the inner's draws are unchanged).
    """

    name = "bandit-per-request"
    #: Its imputation reads the verifications row by row, in the runtime's order.
    wants_rows = True

    def __init__(self, inner, seed: int = 0) -> None:
        self.inner = inner
        self.book = RequestBook(inner.config.k_max)
        self.price = VerifyPrice()
        self._rng = np.random.default_rng([seed, 16])
        self._strength, self._since_strength, self._strength_fits = None, 0, 0
        # Drafts proposed and verified through allot, for the state line and the tests.
        self.proposed_drafts = self.verified_drafts = 0
        # What the last allotments cut: the ids of the last two (the async scheduler allots the
        # next step before the last one is credited), and the shrunk acceptance of the requests
        # the last one cut to no draft at all (vLLM reports no verification for those).
        self._cut_ids: deque[set[str]] = deque([set(), set()], maxlen=2)
        self._zero_cut_alpha = np.zeros((0, inner.config.k_max))
        self._heard: list[tuple[str, int, int]] = []  # verifications since the last allotment

    def __getattr__(self, name: str):
        # Only for names this class lacks: the inner governor's posterior, state and reports.
        return getattr(self.__dict__["inner"], name)

    # ---- the batch decision: the inner governor's -------------------------------------------

    def select(self, context: StepContext) -> Decision:
        return self.inner.select(context)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """Credit the inner governor with the step as if nothing were cut, and price the verified
        tokens on a step without a prompt chunk."""
        if outcome.drafted.size and not outcome.prefill_tokens:
            self.price.observe(outcome.drafted.size, int(outcome.drafted.sum()), decision.k, outcome.step_duration_s)
        full = self._imputed(decision.k, outcome)
        added = int(full.drafted.sum() - outcome.drafted.sum())
        if added > 0:
            price = max(float(self.price.mean[VERIFY_WEIGHT]), 0.0)
            full = dataclasses.replace(full, step_duration_s=outcome.step_duration_s + price * added)
        self.inner.observe(decision, full)

    def _imputed(self, k: int, outcome: StepOutcome) -> StepOutcome:
        """``outcome`` with each cut request that accepted all it verified drafted to K, its
        continuation drawn from its posterior mean acceptance.

        Rows are the runtime's: the verifications heard, in order, then zeros for decoders that
        verified nothing. A heard row is imputed when a recent allotment cut that request, and as
        many zero rows as the last allotment cut to nothing.
        """
        drafted, accepted = outcome.drafted.copy(), outcome.accepted.copy()
        rows, alphas = [], []
        heard = self._heard[: drafted.size]
        cut = set().union(*self._cut_ids)
        ids = [r for i, (r, _, _) in enumerate(heard) if r in cut and accepted[i] == drafted[i] < k]
        if ids:
            idx = {r: i for i, (r, _, _) in enumerate(heard)}
            rows += [idx[r] for r in ids]
            alphas += list(self._mean_alpha(ids))
        zero_rows = np.flatnonzero(drafted[len(heard) :] == 0) + len(heard)
        n = min(zero_rows.size, len(self._zero_cut_alpha)) if k > 0 else 0
        rows += zero_rows[:n].tolist()
        alphas += list(self._zero_cut_alpha[:n])
        for i, alpha in zip(rows, alphas, strict=True):
            j = int(drafted[i])
            while j < k and self._rng.random() < alpha[j]:
                j += 1
            drafted[i], accepted[i] = k, j
        if not rows:
            return outcome
        return dataclasses.replace(outcome, drafted=drafted, accepted=accepted)

    # ---- the per-request evidence ---------------------------------------------------------------

    def on_verified(self, request_id: str, drafted: int, accepted: int) -> None:
        """One request's verified step, as vLLM counts it."""
        drafted = min(drafted, self.book.k_max)
        accepted = min(accepted, drafted)
        self.book.observe(request_id, drafted, accepted)
        self._heard.append((request_id, drafted, accepted))

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
        self._heard = []
        out = self._allot(request_ids, drafted)
        self.verified_drafts += int(out.sum())
        cut = out < drafted
        self._cut_ids.append({r for r, c in zip(request_ids, cut, strict=True) if c})
        zero = [r for r, kept, c in zip(request_ids, out, cut, strict=True) if c and kept == 0]
        self._zero_cut_alpha = self._mean_alpha(zero) if zero else self._zero_cut_alpha[:0]
        return out

    def _mean_alpha(self, request_ids: list[str]) -> np.ndarray:
        """Each request's posterior mean acceptance per position, shrunk toward the class."""
        a, b = self.inner.acceptance_params()
        succ, fail = self.book.counts(request_ids)
        return shrunk_alpha(a / (a + b), self._strength or MAX_STRENGTH, succ, fail)

    def _allot(self, request_ids: list[str], drafted: np.ndarray) -> np.ndarray:
        batch, depth = len(request_ids), int(drafted.max(initial=0))
        w = self.price.draw(self._rng, self.inner.latency_weights())
        price = float(w[VERIFY_WEIGHT])
        # The step's time with every draft cut: the fixed part and the drafting already spent.
        base = float(verified_features(batch, 0, depth) @ w)
        if price <= 0 or base <= 0 or not drafted.any():
            return drafted  # verification is free as far as the model knows: verify everything
        a, b = self.inner.acceptance_params()
        mean = a / (a + b)
        n0 = self._strength_for(mean)
        succ, fail = self.book.counts(list(request_ids))
        surv = survival(self._rng.beta(n0 * mean + succ, n0 * (1.0 - mean) + fail))
        slots = np.arange(surv.shape[1]) < drafted[:, None]
        return allot(surv, drafted, best_budget(surv[slots], batch, base, price))

    def _strength_for(self, class_mean: np.ndarray) -> float:
        self._since_strength += 1
        if self._strength is None or self._since_strength >= min(STRENGTH_REFRESH, 2**self._strength_fits):
            self._strength, self._since_strength = self.book.strength(class_mean), 0
            self._strength_fits += 1
        return self._strength

    def state_line(self) -> str:
        share = self.verified_drafts / self.proposed_drafts if self.proposed_drafts else 1.0
        return f"{self.inner.state_line()} | verified {share:.0%} of drafts, n0={self._strength or 0:.3g}"
