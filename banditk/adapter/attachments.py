"""What a worker attaches to its ``ModelRunnerOutput`` for the scheduler's process, read back.

The worker hangs lists of small records on the output under attribute names of its own
(:mod:`.event_timing`'s samples, :mod:`.admitted_drafts`' counts); vLLM pickles the output
across processes with them. Reading keeps only records of the expected kind, so an output
without them, or with something else under the name, reads as nothing.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def attached(model_runner_output: Any, attr: str, kind: type[T]) -> list[T]:
    """The ``kind`` records attached under ``attr`` (none when nothing is).

    >>> from types import SimpleNamespace
    >>> attached(SimpleNamespace(x=[1, "a", 2]), "x", int), attached(SimpleNamespace(), "x", int)
    ([1, 2], [])
    """
    items = getattr(model_runner_output, attr, None)
    return [i for i in items if isinstance(i, kind)] if isinstance(items, list) else []
