"""The resident memory of vLLM's engine-core and worker processes, sampled on a timer, and its slope."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (psutil if present, else /proc)."""
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def process_name(pid: int) -> str:
    """The process's title (vLLM names its processes ``VLLM::EngineCore``, ``VLLM::Worker``)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def rss_mb(pid: int) -> float | None:
    """Resident set size of ``pid`` in MB (psutil if present, else /proc/<pid>/status VmRSS)."""
    try:
        import psutil

        try:
            return psutil.Process(pid).memory_info().rss / 2**20
        except psutil.Error:
            return None
    except ImportError:
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def find_vllm_processes(server_pid: int) -> dict[str, int]:
    """``{"api_server", "engine_core", "worker"}`` pids under a server (those found)."""
    found = {"api_server": server_pid}
    for pid in _children(server_pid):
        name = process_name(pid)
        if "EngineCore" in name:
            found.setdefault("engine_core", pid)
        elif "Worker" in name:
            found.setdefault("worker", pid)
    return found


class RssSampler:
    """Samples the RSS of a server's processes every ``interval_s`` on a background thread."""

    def __init__(self, server_pid: int, interval_s: float, t0: float) -> None:
        self.server_pid, self.interval_s, self.t0 = server_pid, interval_s, t0
        self.pids = find_vllm_processes(server_pid)
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-rss", daemon=True)

    def sample(self) -> dict:
        row: dict = {"t_s": round(time.monotonic() - self.t0, 2)}
        for role, pid in self.pids.items():
            v = rss_mb(pid)
            row[f"{role}_mb"] = None if v is None else round(v, 2)
        self.samples.append(row)
        return row

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def rss_slope_mb_per_hour(t_s, rss, second_half: bool = True) -> float | None:
    """Least-squares slope of RSS (MB) against time (s), in MB per hour, over the second half
    of the run (by time); None with fewer than 3 samples.

    >>> t = [0, 60, 120, 180, 240, 300]
    >>> rss_slope_mb_per_hour(t, [100 + 0.5 * x for x in t])  # 0.5 MB/s
    1800.0
    """
    t, y = np.asarray(t_s, dtype=float), np.asarray(rss, dtype=float)
    keep = np.isfinite(y)
    t, y = t[keep], y[keep]
    if second_half and t.size:
        mid = t.min() + (t.max() - t.min()) / 2
        keep = t >= mid
        t, y = t[keep], y[keep]
    if t.size < 3 or np.ptp(t) == 0:
        return None
    tc = t - t.mean()
    slope = float(np.dot(tc, y - y.mean()) / np.dot(tc, tc))
    return round(slope * 3600.0, 6)


# ---- snapshots, telemetry, logs, /metrics ------------------------------------------------------
