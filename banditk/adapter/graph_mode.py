"""Full CUDA graphs for every K: the governed server's runner and graph mode, and its ladders.

Under dynamic K vLLM's V1 runner drops to PIECEWISE graphs; Model Runner V2 (MRv2) captures
one FULL decode ladder per K that the dynamic table lists. The plugin hands vLLM a table that
lists every K of the arm set (:func:`banditk.adapter.vllm_compat.dynamic_k_table`), and this
module:

- says which mode runs and why, once, from the built config (:func:`server_mode_of`);
- mends the dispatch of those ladders where the installed vLLM lets one ladder shadow another
  (:func:`mend_shadowed_ladders`, vLLM #56136; :func:`install` applies it in the workers);
- logs the FULL graphs captured per K, and their memory, at start-up.

Which mode a config gets is decided by :func:`banditk.core.server_mode.governed_mode`, which
the simulator asks too.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import defaultdict
from typing import Any

from banditk.adapter import vllm_compat
from banditk.core.server_mode import ServerMode, governed_mode

logger = logging.getLogger("vllm.banditk")


def server_mode_of(vllm_config: Any) -> ServerMode:
    """The mode of a built vLLM config (after vLLM's own cudagraph overrides)."""
    graphs = vllm_compat.platform_has_cuda_graphs() and vllm_compat.cudagraph_mode_name(vllm_config) != "NONE"
    v2 = vllm_compat.uses_model_runner_v2(vllm_config)
    if not graphs:  # no graphs to keep: the runner vLLM chose, as it is
        return dataclasses.replace(governed_mode(cuda_graphs=False), runner="v2" if v2 else "v1")
    return governed_mode(
        cuda_graphs=graphs,
        v2_blockers=() if v2 else tuple(vllm_compat.model_runner_v2_blockers(vllm_config)) or ("this config",),
        user_forced_v1=vllm_compat.user_forced_v1(),
        full_graphs=vllm_compat.cudagraph_has_full(vllm_config),
    )


def log_server_mode(mode: ServerMode, arms: tuple[int, ...]) -> None:
    """Say once which mode runs: a warning where a GPU server loses its full graphs."""
    if mode.cudagraph == "PIECEWISE":
        logger.warning("banditk: server mode %s: %s.", mode.label, mode.reason)
    else:
        detail = f"; decode ladders for K in {list(arms)}" if mode.cudagraph == "FULL" else ""
        logger.info("banditk: server mode %s: %s%s.", mode.label, mode.reason, detail)


# ---- the ladders of a CudaGraphManager ----------------------------------------------------


def ladders_per_k(descs: Any, k_offset: int) -> dict[int, int]:
    """FULL uniform-decode graphs per K, from descriptors whose ``uniform_token_count`` is
    ``K + k_offset`` (the tokens a decode step feeds per request besides its drafts)."""
    out: dict[int, int] = defaultdict(int)
    for d in descs:
        if vllm_compat.graph_desc_is_full(d) and d.uniform_token_count is not None:
            out[int(d.uniform_token_count) - k_offset] += 1
    return dict(sorted(out.items()))


def mend_shadowed_ladders(candidates: dict, full_descs: list) -> int:
    """Give every token count the smallest FULL graph of each decode ladder that fits it.

    vLLM files all descriptors into one run of token-count ranges, the ranges cut where any
    ladder has a graph; a batch of K=2 at 12 tokens then only finds the K=1 graph at 16 and
    leaves the full graphs (#56136). For each key (token count, LoRA case) this adds, per
    ladder (query length, LoRA case, microbatches), the smallest graph with at least that
    many tokens, before the PIECEWISE entries: dispatch takes the first compatible one.
    Returns the number of entries added.
    """
    ladders: dict[tuple, list] = defaultdict(list)
    for d in full_descs:
        if d.uniform_token_count is not None:
            ladders[(d.uniform_token_count, d.num_active_loras, d.num_ubatches)].append(d)
    for ladder in ladders.values():
        ladder.sort(key=lambda d: d.num_tokens)
    added = 0
    for (num_tokens, loras), cands in candidates.items():
        missing = []
        for (_, ladder_loras, _), ladder in ladders.items():
            if ladder_loras != loras:
                continue
            fit = next((d for d in ladder if d.num_tokens >= num_tokens), None)
            if fit is not None and fit not in cands:
                missing.append(fit)
        if missing:
            at = next((i for i, d in enumerate(cands) if not vllm_compat.graph_desc_is_full(d)), len(cands))
            cands[at:at] = sorted(missing, key=lambda d: d.num_tokens)
            added += len(missing)
    return added


_installed = False


def install() -> bool:
    """Wrap MRv2's graph manager once per process: mend its ladders where the installed vLLM
    shadows them, and log what it captured. False where there is nothing to wrap."""
    global _installed
    if _installed:
        return True
    if not vllm_compat.platform_has_cuda_graphs():
        return False
    manager = vllm_compat.graph_manager_class()
    if vllm_compat.ladder_shadowing_present():
        manager._init_candidates = _mended(manager._init_candidates)
    manager.capture = _logged_capture(manager.capture)
    _installed = True
    return True


def _mended(init_candidates):
    @functools.wraps(init_candidates)
    def _init_candidates(self, *args, **kwargs):
        out = init_candidates(self, *args, **kwargs)
        try:
            added = mend_shadowed_ladders(self._candidates, vllm_compat.full_graph_descs(self))
            if added:
                logger.info("banditk: %d graph dispatch entries mended so each K finds its own ladder.", added)
        except Exception as e:  # the unmended table still serves, on fewer full graphs
            logger.warning("banditk: ladder mend skipped (%s: %s).", type(e).__name__, e)
        return out

    return _init_candidates


def _logged_capture(capture):
    @functools.wraps(capture)
    def logged(self, *args, **kwargs):
        free_before = vllm_compat.device_free_bytes()
        out = capture(self, *args, **kwargs)
        try:
            used = max(free_before - vllm_compat.device_free_bytes(), 0)
            per_k = ladders_per_k(vllm_compat.full_graph_descs(self), vllm_compat.decode_k_offset(self))
            logger.info(
                "banditk: captured FULL decode graphs per K %s, %.2f GiB in all.",
                ", ".join(f"K={k}: {n}" for k, n in per_k.items()) or "none",
                used / 2**30,
            )
        except Exception as e:
            logger.warning("banditk: graph capture summary unavailable (%s: %s).", type(e).__name__, e)
        return out

    return logged
