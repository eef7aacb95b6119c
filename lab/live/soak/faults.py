"""What went wrong during a soak: snapshot rewrites that do not load, orphaned temp files, the
governor's fallbacks and faults (telemetry log, server log, /metrics), and the engine's drain.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from pathlib import Path


class SnapshotWatcher:
    """Polls the snapshot file; every rewrite it sees is counted and loaded with banditk's loader."""

    def __init__(self, path: Path, interval_s: float = 0.5) -> None:
        self.path, self.interval_s = Path(path), interval_s
        self.writes_seen = 0
        self.loads = 0
        self.load_failures = 0
        self.failure_messages: list[str] = []
        self.observations = None  # the governor's observation count at the last load
        self._last = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-snapshots", daemon=True)

    def check(self) -> None:
        from banditk.governor.snapshot import load_snapshot

        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._last:
            return
        self._last = key
        self.writes_seen += 1
        self.loads += 1
        try:
            gov = load_snapshot(self.path)
            self.observations = gov.counters().get("observations")
        except Exception as e:  # any failure to load is what this counts
            self.load_failures += 1
            if len(self.failure_messages) < 5:
                self.failure_messages.append(f"{type(e).__name__}: {e}"[:300])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self.interval_s)

    def start(self) -> SnapshotWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.check()

    def as_dict(self) -> dict:
        return {
            "writes_seen": self.writes_seen,
            "loads": self.loads,
            "load_failures": self.load_failures,
            "failure_messages": self.failure_messages,
            "governor_observations_at_last_load": self.observations,
        }


def orphaned_tmp_files(folder: Path) -> list[str]:
    """Temporary files (``*.tmp``) left in ``folder``."""
    return sorted({p.name for p in Path(folder).glob("*.tmp")} | {p.name for p in Path(folder).glob(".*.tmp")})


def persistent_tmp_files(folder: Path, wait_s: float = 1.5) -> list[str]:
    """Temporary files present in two looks ``wait_s`` apart: with a write every second, each under
    a fresh name, one that stays is an orphan (its write will never be renamed), not a write in flight."""
    first = set(orphaned_tmp_files(folder))
    if not first:
        return []
    time.sleep(wait_s)
    return sorted(first & set(orphaned_tmp_files(folder)))


def describe_orphans(folder: Path, names: list[str], snapshot: Path) -> list[dict]:
    """For each orphan: its writer's pid (from the name) and whether it is a whole, loadable snapshot
    equal to ``snapshot`` (the write finished but its rename never happened)."""
    from banditk.governor.snapshot import load_snapshot

    out = []
    for name in names:
        parts = name.split(".")
        pid = next((int(x) for x in parts if x.isdigit()), None)
        path = Path(folder) / name
        try:
            load_snapshot(path)
            loadable = True
        except Exception:
            loadable = False
        try:
            same = path.read_bytes() == Path(snapshot).read_bytes()
        except OSError:
            same = False
        out.append({"name": name, "writer_pid": pid, "loadable": loadable, "same_as_snapshot": same})
    return out


def telemetry_faults(log: Path) -> dict:
    """Steps and fallback events in the telemetry log (with its rotated parts).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = p.write_text('{"trace": "banditk/trace"}\\n{"k": 2}\\n{"event": "fallback", "kind": "select"}\\nnot json\\n')
    >>> telemetry_faults(p)
    {'steps': 1, 'fallbacks': 1, 'fallback_kinds': {'select': 1}, 'malformed_lines': 1, 'files': 1}
    """
    from banditk.io.trace import trace_files

    steps = fallbacks = malformed = 0
    kinds: dict[str, int] = {}
    files = trace_files(log)
    for f in files:
        with open(f, errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    malformed += 1
                    continue
                if not isinstance(rec, dict) or "trace" in rec:
                    continue
                if rec.get("event") == "fallback":
                    fallbacks += 1
                    kind = str(rec.get("kind"))
                    kinds[kind] = kinds.get(kind, 0) + 1
                elif "event" not in rec:
                    steps += 1
    return {
        "steps": steps,
        "fallbacks": fallbacks,
        "fallback_kinds": kinds,
        "malformed_lines": malformed,
        "files": len(files),
    }


def server_log_errors(log: Path, limit: int = 10, start: int = 0, end: int | None = None) -> dict:
    """ERROR/CRITICAL lines of the server log that mention banditk (by the fault kind banditk names:
    ``banditk: <kind> failed``), and tracebacks; in the log's bytes ``start:end``."""
    lines, tracebacks, kinds = [], 0, {}
    text = Path(log).read_bytes()[start:end].decode(errors="replace")
    for line in text.splitlines():
        tracebacks += "Traceback (most recent call last)" in line
        if "banditk" in line and (" ERROR " in line or " CRITICAL " in line):
            lines.append(line[:400])
            m = re.search(r"banditk: (\w+) failed", line)
            kind = m.group(1) if m else "other"
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"banditk_error_lines": len(lines), "by_kind": kinds, "examples": lines[:limit], "tracebacks": tracebacks}


def scrape_metrics(base_url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """``/metrics`` samples of banditk and vLLM's request gauges, by ``name{labels}``."""
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        if line.startswith(("banditk:", "vllm:num_requests_running", "vllm:num_requests_waiting")):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def metric_by_label(m: dict[str, float], name: str, label: str) -> dict[str, float]:
    """Samples of ``name`` by the value of ``label``.

    >>> metric_by_label({'f_total{kind="slow",engine="0"}': 2.0}, "f_total", "kind")
    {'slow': 2.0}
    """
    out = {}
    for k, v in m.items():
        n, _, labels = k.partition("{")
        hit = re.search(label + r'="([^"]*)"', labels)
        if n == name and hit:
            out[hit.group(1)] = out.get(hit.group(1), 0.0) + v
    return out


def metric_sum(m: dict[str, float], name: str) -> float:
    """Sum of the samples called exactly ``name`` (any labels).

    >>> metric_sum({'a_total{x="1"}': 2.0, 'a_total{x="2"}': 3.0, 'a_created{x="1"}': 9.0}, "a_total")
    5.0
    """
    return float(sum(v for k, v in m.items() if k.partition("{")[0] == name))


def wait_drained(base_url: str, timeout_s: float = 120.0) -> dict:
    """Wait until the server runs and queues no request (aborted ones released); the last gauges."""
    deadline, m = time.monotonic() + timeout_s, {}
    while True:
        try:
            m = scrape_metrics(base_url)
            running = metric_sum(m, "vllm:num_requests_running")
            waiting = metric_sum(m, "vllm:num_requests_waiting")
        except (OSError, http.client.HTTPException):
            running = waiting = float("nan")
        if (running == 0 and waiting == 0) or time.monotonic() > deadline:
            return {"drained": running == 0 and waiting == 0, "running": running, "waiting": waiting, "metrics": m}
        time.sleep(1.0)


# ---- the run --------------------------------------------------------------------------------
