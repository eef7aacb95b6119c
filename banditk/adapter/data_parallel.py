"""Data parallelism: which ranks govern K, and each rank's own files.

vLLM switches dynamic K off whenever ``data_parallel_size > 1``
(``VllmConfig._maybe_disable_dynamic_sd_for_data_parallel``, 0.32-0.34): its ranks could
draft different K and deadlock. That holds for MoE models only. vLLM runs the ranks of a
dense model as independent engines (``ParallelConfig.reconfigure_for_independent_dp_rank``):
no collective joins their steps, so each rank's scheduler may draft its own K. For a governed
dense model the wrapper here keeps the table, and every rank's governor governs its own K from
its own telemetry. A MoE model keeps vLLM's rule: its ranks step in lockstep, and the governor
only observes there (docs/data-parallel.md says what agreeing on one K per step takes).

Each rank writes its own snapshot and telemetry log (``<name>.rank<i><suffix>``), so ranks
never write one file, and ``banditk prior merge`` merges their snapshots as it merges servers'.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY

logger = logging.getLogger("vllm.banditk")

#: Key of the plugin's settings dict that records the deployment's data-parallel size (the
#: engine cores of a dense model see 1 once vLLM made them independent).
DP_SIZE_KEY = "data_parallel_size"


def install() -> bool:
    """Wrap vLLM's data-parallel switch-off once per process (where its shape is as assumed)."""
    from vllm.config import VllmConfig

    from banditk.adapter import vllm_compat

    vllm_compat.check_data_parallel_shape()  # raises: vLLM's own rule then stands
    original = VllmConfig._maybe_disable_dynamic_sd_for_data_parallel
    if not getattr(original, "_banditk_wrapped", False):
        VllmConfig._maybe_disable_dynamic_sd_for_data_parallel = wrap_disable(original)
    return True


def wrap_disable(original):
    @functools.wraps(original)
    def maybe_disable(self, *args, **kwargs):
        if governs_each_rank(self):
            return None  # each independent rank governs its own K
        return original(self, *args, **kwargs)

    maybe_disable._banditk_wrapped = True  # type: ignore[attr-defined]
    return maybe_disable


def governs_each_rank(vllm_config: Any) -> bool:
    """A governed config of a dense model: vLLM runs its data-parallel ranks independently."""
    try:
        governed = ADDITIONAL_CONFIG_KEY in (vllm_config.additional_config or {})
        return governed and not bool(vllm_config.model_config.is_moe)
    except Exception:  # an unknown config shape: vLLM's own rule stands
        return False


def rank_of(vllm_config: Any) -> int:
    """This engine core's data-parallel rank (0 without data parallelism).

    ``data_parallel_index`` keeps the rank where vLLM reset ``data_parallel_rank`` to 0 for an
    independent rank."""
    par = getattr(vllm_config, "parallel_config", None)
    for name in ("data_parallel_index", "data_parallel_rank"):
        value = getattr(par, name, None)
        if type(value) is int and value >= 0:
            return value
    return 0


def per_rank_path(path: str | None, rank: int) -> str | None:
    """``path`` with ``.rank<i>`` before its suffix.

    >>> per_rank_path("/var/banditk/snapshot.json", 1)
    '/var/banditk/snapshot.rank1.json'
    >>> per_rank_path("steps", 0), per_rank_path(None, 2)
    ('steps.rank0', None)
    """
    if not path:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))
