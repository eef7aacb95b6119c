"""Periodic and shutdown snapshots of the live posterior, written atomically.

A snapshot is :func:`banditk.governor.snapshot.save_snapshot`'s document (atomic
write: a reader sees the old file or the new one). ``banditk prior import``
turns it into a prior for another deployment; with data parallelism each
engine core writes its own (give each a distinct ``snapshot_path``) and
``banditk prior merge`` adds their sufficient statistics.

When it is written (see :class:`banditk.adapter.runtime.GovernorRuntime`): every
``snapshot_interval_s`` under load, whenever the engine runs out of requests and
the posterior changed (a server is often stopped while idle, and vLLM's API server
force-kills its engine core soon after SIGTERM), and at engine shutdown.

Failures are logged once and counted: a full disk must not stop the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("vllm.banditk")


class SnapshotWriter:
    """Writes ``policy``'s snapshot to ``path`` every ``interval_s`` and on :meth:`close`.

    Args:
        path: target file.
        interval_s: seconds between periodic writes; 0 writes only at close.
        policy: the governor (must be a :class:`banditk.governor.BanditGovernor`).
        provenance: extra provenance fields (vLLM version, model, ...).
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self,
        path: str,
        interval_s: float,
        policy: Any,
        provenance: dict | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path, self.interval_s, self.policy = path, interval_s, policy
        self.provenance = dict(provenance or {})
        self._clock = clock
        self._last = clock()
        self.writes = 0
        self.errors = 0
        self._failing = False
        self.supported = hasattr(policy, "get_state") and hasattr(policy, "config")
        if not self.supported:
            logger.warning(
                "banditk: policy %r keeps no posterior; snapshot_path=%s is ignored.",
                getattr(policy, "name", policy),
                path,
            )

    def maybe_write(self) -> bool:
        """Write if the interval has passed; return whether a snapshot was written."""
        if not self.supported or self.interval_s <= 0:
            return False
        now = self._clock()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return self.write()

    def write(self) -> bool:
        if not self.supported:
            return False
        try:
            from banditk.governor.snapshot import save_snapshot

            save_snapshot(self.path, self.policy, self.provenance)
        except Exception as e:  # never stop the engine for a snapshot
            self.errors += 1
            if not self._failing:  # once per run of failures, and again when it recovers
                self._failing = True
                logger.error(
                    "banditk: writing snapshot %s failed (%s: %s); will keep trying.", self.path, type(e).__name__, e
                )
            return False
        self.writes += 1
        if self._failing:
            self._failing = False
            logger.warning("banditk: snapshot %s written again after %d failed writes.", self.path, self.errors)
        return True

    def close(self) -> bool:
        return self.write()
