"""vLLM's adaptive verification, as the simulator models it (``peer:vllm-adaptive-verification``).

What it follows (``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py`` in vLLM 0.33.0,
PRs #47808 and #52228; docs/per-request.md, section 4):

- every request drafts ``num_speculative_tokens`` (K_max here): the server's K is static;
- each (request, position) slot has the drafter's confidence, and a slot's survival is the running
  product of its request's confidences up to it;
- the budget b maximises (B + the b highest survivals summed) / (step time at b verified drafts),
  the step time read from a cost profile the server times at start-up
  (``AdaptiveVerificationManager.get_num_tokens``);
- the b slots of highest survival are verified, a prefix of each request's drafts.

What it assumes, since the simulator has no drafter logits:

- **The confidence** of a slot is its request's true acceptance at that position seen through
  noise, ``logit(c) = logit(alpha) + N(0, sigma^2)`` drawn afresh each step, with sigma
  ``confidence_noise`` (1.0, assumed: an informative but imperfect signal). It carries no
  information about the particular draft beyond its request's rate, which the real confidence
  may; the peer is understated where that per-draft signal is strong.
- **The cost profile** is the simulator's own noise-free step time at the step's shape
  (:class:`~banditk.sim.engine.StepView`), kinder than a profile timed at one context length.
- **The server** captures varlen FULL decode graphs (#47808): static FULL, one capture set.
"""

from __future__ import annotations

import numpy as np

from banditk.core.errors import ConfigError
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor.verify_budget import allot

SPEC = "peer:vllm-adaptive-verification"

#: Confidences are clipped away from 0 and 1 before their logit.
_EPS = 1e-6


class AdaptiveVerificationPeer:
    """Drafts K_max every step and verifies the budget of highest confidence survival.

    Args:
        k_max: the server's ``num_speculative_tokens``.
        confidence_noise: sigma of the logit-scale noise between a slot's confidence and its
            request's acceptance (>= 0; 0 is a drafter that knows each request's rate).
        seed: seed of the confidence draws.

    The simulator sets :attr:`step_view` before each :meth:`allot` (``needs_step_view``).
    """

    name = SPEC
    needs_step_view = True

    def __init__(self, k_max: int, confidence_noise: float = 1.0, seed: int = 0) -> None:
        if isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1:
            raise ConfigError(f"`k_max` must be an integer >= 1, got {k_max!r}.")
        if not isinstance(confidence_noise, (int, float)) or not 0.0 <= confidence_noise < float("inf"):
            raise ConfigError(f"`confidence_noise` must be a finite number >= 0, got {confidence_noise!r}.")
        self.k_max = k_max
        self.confidence_noise = float(confidence_noise)
        self.step_view = None
        self._rng = np.random.default_rng([seed, 47808])
        self._step = 0
        # Drafts proposed and verified, for the run's summary.
        self.proposed_drafts = self.verified_drafts = 0

    def select(self, context: StepContext) -> Decision:
        self._step += 1
        return Decision(k=self.k_max, bucket=-1, num_decoding=context.num_decoding, step_id=self._step)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """The budget is solved afresh each step from the profile; nothing is learnt."""

    def confidences(self, alpha: np.ndarray) -> np.ndarray:
        """The drafter's confidence per slot, shape of ``alpha``."""
        a = np.clip(np.asarray(alpha, dtype=float), _EPS, 1.0 - _EPS)
        if self.confidence_noise == 0.0:
            return a
        z = np.log(a / (1.0 - a)) + self._rng.normal(0.0, self.confidence_noise, size=a.shape)
        return 1.0 / (1.0 + np.exp(-z))

    def allot(self, request_ids: list[str], drafted: np.ndarray) -> np.ndarray:
        """Drafts verified per request: the budget of best tokens per second, by survival."""
        view = self.step_view
        if view is None:
            raise RuntimeError(f"{SPEC} needs the simulator's step view before allot (needs_step_view).")
        drafted = np.asarray(drafted, dtype=np.int64)
        if len(request_ids) != drafted.size or view.alpha.shape[0] != drafted.size:
            raise ValueError(
                f"{len(request_ids)} request ids, {drafted.size} draft counts and "
                f"{view.alpha.shape[0]} acceptance rows must agree."
            )
        surv = np.cumprod(self.confidences(view.alpha), axis=1)
        valid = np.arange(surv.shape[1]) < drafted[:, None]
        scores = np.sort(surv[valid])[::-1]
        budgets = np.arange(scores.size + 1)
        tokens = view.batch + np.concatenate(([0.0], np.cumsum(scores)))
        budget = int(np.argmax(tokens / np.asarray(view.times(budgets), dtype=float)))
        out = allot(surv, drafted, budget)
        self.proposed_drafts += int(drafted.sum())
        self.verified_drafts += int(out.sum())
        return out


#: The bandit choosing K, adaptive verification trimming inside it.
GOVERNED_SPEC = "bandit+av"


class GovernedAdaptiveVerification:
    """banditk's K with vLLM's adaptive verification trimming the drafts it verifies (``bandit+av``).

    The governor drafts its K; adaptive verification then verifies the budget of highest
    confidence survival among those K drafts per request, as it does inside vLLM's static K. The
    governor hears only what was verified, and learns the step time as it ran (with the trim), so
    it chooses K for the trimmed step. This is the composition the plugin refuses on a server
    today, because vLLM counts a trimmed draft as rejected (docs/operations.md): here the credit
    is exact, so the result is what the composition is worth once that is mended.

    Args:
        governor: the bandit (``select`` / ``observe``).
        verifier: the adaptive-verification peer, built for the scenario's K_max.
    """

    name = GOVERNED_SPEC
    needs_step_view = True

    def __init__(self, governor, verifier: AdaptiveVerificationPeer) -> None:
        self.governor = governor
        self.verifier = verifier

    @property
    def step_view(self):
        return self.verifier.step_view

    @step_view.setter
    def step_view(self, view) -> None:  # the simulator sets it before each allot
        self.verifier.step_view = view

    def select(self, context: StepContext) -> Decision:
        return self.governor.select(context)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        self.governor.observe(decision, outcome)

    def allot(self, request_ids: list[str], drafted: np.ndarray) -> np.ndarray:
        return self.verifier.allot(request_ids, drafted)
