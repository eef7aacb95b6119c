"""Errors raised by ``banditk fit``.

Both derive from :class:`banditk.core.errors.BanditkError` (so the CLI prints them and exits 1)
and from the built-in they specialise.
"""

from __future__ import annotations

from banditk.core.errors import BanditkError


class FitInputError(BanditkError, ValueError):
    """A trace or an option given to the fitter cannot be used; the message names it and shows the value."""


class DiagnosticsFailedError(BanditkError, RuntimeError):
    """The fit failed its convergence or posterior-predictive checks, so no prior was written.

    Attributes:
        reasons: one line per failed check.
    """

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = list(reasons)
        super().__init__(
            "the fit failed its diagnostics, so no prior was written (rerun with --force to write it anyway): "
            + "; ".join(self.reasons)
        )
