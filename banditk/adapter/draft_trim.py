"""Per-request verification in vLLM: cut each running request's drafts to its allotment.

vLLM's scheduler sizes a request's step from ``request.spec_token_ids`` and clips that to
the token budget; KV allocation, ``scheduled_spec_decode_tokens``, the rejection sampler's
per-request lengths, the rollback of rejected tokens and the spec-decode counters all follow
the clipped list. Cutting the list before ``schedule()`` reads it therefore keeps every one of
them consistent, and the cut drafts are counted as never drafted (docs/per-request.md). Cutting
the scheduler's output afterwards would not: the step's token counts and KV are already fixed.

The async scheduler hands every request the same placeholder list, so a cut request gets a
new list; the shared one is never edited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def trim_drafts(requests: Iterable, allotment: Mapping[str, int]) -> int:
    """Cut the drafts of each request named in ``allotment`` to at most that many; return how many were cut.

    Args:
        requests: vLLM ``Request`` objects (the scheduler's ``running`` list); each has
            ``request_id`` and ``spec_token_ids``.
        allotment: drafts to keep per request id, each >= 0. A request not named keeps its
            drafts; an allotment above what was drafted keeps them all (drafts are never added).
    """
    cut = 0
    for req in requests:
        keep = allotment.get(req.request_id)
        if keep is None:
            continue
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"allotment for request {req.request_id!r} must be an int >= 0, got {keep!r}.")
        spec = req.spec_token_ids
        if len(spec) > keep:
            cut += len(spec) - keep
            req.spec_token_ids = list(spec[:keep])  # a new list: async placeholders are shared
    return cut
