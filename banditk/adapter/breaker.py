"""A circuit breaker for a governor that has become slow.

The governor runs inside ``schedule()`` and ``update_from_output()``: every
millisecond it spends is a millisecond no request decodes. Python cannot preempt
a call, so a slow call is noticed after the fact; what the breaker bounds is how
often it can happen. ``strikes`` slow calls in a row (one alone may be the OS
descheduling the engine thread) open the breaker: the runtime uses the fallback K
and does not call the policy for ``cooldown`` governed steps. The next call is a
probe; if it is slow too, the breaker opens again for twice as long (up to
``max_cooldown``); a fast call brings the cooldown back to ``base_cooldown``. A
policy that is slow on every call therefore costs one slow call per ever-longer
stretch of fallback steps.

Examples:
    >>> b = SlowCallBreaker(budget_s=0.01, base_cooldown=2, strikes=2)
    >>> b.record(0.05), b.is_open          # slow, but one strike
    (True, False)
    >>> b.record(0.05), b.is_open          # second in a row: open for 2 steps
    (True, True)
    >>> b.skip(), b.skip(), b.is_open      # two bypassed steps, then closed
    (True, True, False)
    >>> b.record(0.05), b.cooldown         # the probe is slow too: open again, next time for 8
    (True, 8)
"""

from __future__ import annotations


class SlowCallBreaker:
    """Counts down bypassed steps after a call over ``budget_s``.

    Args:
        budget_s: longest acceptable governor time per step (``select`` plus the previous ``observe``).
        base_cooldown: governed steps bypassed after the first slow call.
        max_cooldown: the longest bypass.
        strikes: slow calls in a row that open a closed breaker.
    """

    def __init__(self, budget_s: float, base_cooldown: int = 64, max_cooldown: int = 8192, strikes: int = 3) -> None:
        self.budget_s = float(budget_s)
        self.strikes = int(strikes)
        self.in_a_row = 0
        self.base_cooldown = int(base_cooldown)
        self.max_cooldown = int(max_cooldown)
        self.cooldown = self.base_cooldown
        self.remaining = 0
        self.trips = 0
        self.bypassed = 0

    @property
    def is_open(self) -> bool:
        return self.remaining > 0

    def skip(self) -> bool:
        """One governed step while open: True if the policy must not be called."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        self.bypassed += 1
        return True

    def record(self, elapsed_s: float) -> bool:
        """Account one call's duration; True if it was over budget (:attr:`is_open` says if that opened it)."""
        if elapsed_s <= self.budget_s:
            self.in_a_row = 0
            self.cooldown = self.base_cooldown
            return False
        self.in_a_row += 1  # not reset by a bypass: a slow probe opens the breaker at once
        if self.in_a_row < self.strikes:
            return True
        self.trips += 1
        self.remaining = self.cooldown
        self.cooldown = min(2 * self.cooldown, self.max_cooldown)
        return True
