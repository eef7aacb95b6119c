"""Greedy probes: fixed requests whose outputs are compared with an ungoverned server's."""

from __future__ import annotations

import http.client
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from lab.live.soak.traffic import SoakConfig, complete, random_prompt


def probe_prompts(cfg: SoakConfig) -> list[tuple[int, ...]]:
    """The fixed probe set (independent of the traffic seed): alternately short and long prompts."""
    rng = np.random.default_rng(12345)
    return [
        random_prompt(rng, cfg.long_len if i % 2 else cfg.short_len, cfg.vocab_size) for i in range(cfg.probe_count)
    ]


def run_probes(base_url: str, model: str, prompts, max_tokens: int) -> list[dict | None]:
    """Every probe at once, greedy; a probe that fails is None."""

    def one(p):
        try:
            return complete(base_url, model, p, max_tokens)
        except (OSError, RuntimeError, ValueError, KeyError, http.client.HTTPException):
            return None

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts))


def compare_probes(reference: list, got: list) -> dict:
    """Identical / different / failed counts of one probe round against the reference (token ids
    and text both equal).

    >>> compare_probes(["a", "b", "c"], ["a", "x", None])
    {'identical': 1, 'different': 1, 'failed': 1, 'total': 3}
    """
    same = sum(g is not None and g == r for r, g in zip(reference, got))
    failed = sum(g is None for g in got)
    return {"identical": same, "different": len(got) - same - failed, "failed": failed, "total": len(got)}


def oracle_matches(next_token, prompts, outputs: list[dict | None]) -> int:
    """How many outputs are the cyclic target's known greedy chain (``next_token`` applied from the
    prompt's last token): an answer key independent of any server.

    >>> oracle_matches([1, 2, 0], [(5, 0)], [{"token_ids": [1, 2, 0], "text": ""}])
    1
    """
    from banditk.testing.engines import greedy_chain

    hits = 0
    for p, out in zip(prompts, outputs):
        ids = (out or {}).get("token_ids")
        hits += ids is not None and list(ids) == greedy_chain(next_token, p[-1], len(ids))
    return hits


def first_difference(a: list | None, b: list | None) -> int | None:
    """Index of the first differing token (None if equal or either is missing).

    >>> first_difference([1, 2, 3], [1, 5, 3]), first_difference([1], [1])
    (1, None)
    """
    if a is None or b is None or list(a) == list(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# ---- memory ---------------------------------------------------------------------------------
