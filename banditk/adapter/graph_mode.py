"""Full CUDA graphs for every K: the governed server's runner and graph mode, and its ladders.

Under dynamic K vLLM's V1 runner drops to PIECEWISE graphs; Model Runner V2 (MRv2) captures
one FULL decode ladder per K that the dynamic table lists. The plugin hands vLLM a table that
lists every K of the arm set (:func:`banditk.adapter.vllm_compat.dynamic_k_table`), and this
module:

- says which mode runs and why, once, from the built config (:func:`server_mode_of`);
- mends the dispatch of those ladders where the installed vLLM lets one ladder shadow another
  (:func:`mend_shadowed_ladders`, vLLM #56136; :func:`install` applies it in the workers);
- logs the FULL graphs captured per K, and the memory each K's ladder added, at start-up
  (:class:`CaptureMeter`).

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


class CaptureMeter:
    """Device memory each captured graph added, read between graphs (no sync, no extra work).

    vLLM's ``capture`` calls ``create_forward_fn(desc, warmup=True)`` once as it starts each
    descriptor; the free memory lost between two such calls is charged to the earlier
    descriptor, and what :meth:`finish` sees lost after the last one to the last. Graphs share
    one pool, so a later, smaller graph of another K reuses memory an earlier one took: the
    figures say what each K's ladder added in capture order, and their sum is the total.
    """

    def __init__(self, free_bytes, k_offset: int) -> None:
        self._free_bytes = free_bytes
        self._k_offset = k_offset
        self._current: Any = None
        self._free_at: int | None = None
        self.bytes_per_k: dict[int, int] = defaultdict(int)
        self.other_bytes = 0  # PIECEWISE and mixed-batch graphs
        self.graphs_per_k: dict[int, int] = defaultdict(int)

    def wrap(self, create_forward_fn):
        @functools.wraps(create_forward_fn)
        def create(desc, *args, **kwargs):
            warmup = kwargs.get("warmup", args[0] if args else False)
            if warmup:
                self._charge()
                self._current = desc
            return create_forward_fn(desc, *args, **kwargs)

        return create

    def finish(self) -> None:
        self._charge()
        self._current = None

    def _charge(self) -> None:
        free = self._free_bytes()
        d, before, self._free_at = self._current, self._free_at, free
        if d is None or before is None:
            return
        used = max(before - free, 0)
        if vllm_compat.graph_desc_is_full(d) and d.uniform_token_count is not None:
            k = int(d.uniform_token_count) - self._k_offset
            self.bytes_per_k[k] += used
            self.graphs_per_k[k] += 1
        else:
            self.other_bytes += used

    def summary(self) -> str:
        per_k = ", ".join(
            f"K={k}: {self.graphs_per_k[k]} ({self.bytes_per_k[k] / 2**30:.2f} GiB)" for k in sorted(self.graphs_per_k)
        )
        total = sum(self.bytes_per_k.values()) + self.other_bytes
        return (
            f"captured FULL decode graphs per K {per_k or 'none'}; other graphs {self.other_bytes / 2**30:.2f} GiB; "
            f"{total / 2**30:.2f} GiB in all"
        )


def _logged_capture(capture):
    @functools.wraps(capture)
    def logged(self, create_forward_fn, *args, **kwargs):
        try:
            meter = CaptureMeter(vllm_compat.device_free_bytes, vllm_compat.decode_k_offset(self))
            create_forward_fn = meter.wrap(create_forward_fn)
        except Exception as e:
            meter = None
            logger.warning("banditk: graph capture summary unavailable (%s: %s).", type(e).__name__, e)
        out = capture(self, create_forward_fn, *args, **kwargs)
        if meter is not None and not vllm_compat.capture_is_profiling(self):  # the real capture only
            try:
                meter.finish()
                logger.info("banditk: %s.", meter.summary())
            except Exception as e:
                logger.warning("banditk: graph capture summary unavailable (%s: %s).", type(e).__name__, e)
        return out

    return logged
