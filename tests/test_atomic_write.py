"""Atomic writes under SIGKILL: the file is always the old or the new complete version."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from banditk.io.atomic import atomic_write_text

WRITER = r"""
import json, sys
from banditk.io.atomic import atomic_write_text
path = sys.argv[1]
big = "x" * 2_000_000
i = 0
while True:
    i += 1
    atomic_write_text(path, json.dumps({"version": i, "payload": big, "end": i}))
    print(i, flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_mid_write_leaves_a_complete_file(tmp_path):
    path = tmp_path / "snapshot.json"
    atomic_write_text(path, json.dumps({"version": 0, "payload": "", "end": 0}))
    versions = []
    for trial in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # at least one write done: kills land mid-write from here on
        time.sleep(0.01 + 0.013 * trial)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        doc = json.loads(path.read_text())  # never torn
        assert doc["version"] == doc["end"] and len(doc["payload"]) == 2_000_000
        versions.append(doc["version"])
    assert max(versions) > 0
    # A killed writer may leave its temporary file; the next write removes every such orphan.
    assert all(p.name.startswith(".snapshot.json.") for p in tmp_path.iterdir() if p.name != "snapshot.json")
    atomic_write_text(path, json.dumps({"version": -1, "payload": "", "end": -1}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshot.json"]


def test_an_orphan_is_removed_but_a_live_writers_temp_is_kept(tmp_path):
    path = tmp_path / "s.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f".s.json.{int(dead.stdout)}.abc.tmp"
    live = tmp_path / f".s.json.{os.getppid()}.def.tmp"  # our parent runs
    other = tmp_path / ".t.json.1.x.tmp"  # another file's temporary
    for p in (orphan, live, other):
        p.write_text("partial")
    atomic_write_text(path, "{}")
    assert not orphan.exists() and live.exists() and other.exists()


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    atomic_write_text(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


TWO_WRITERS = r"""
import json, sys
from banditk.io.atomic import atomic_write_text
path, who = sys.argv[1], sys.argv[2]
for i in range(200):
    atomic_write_text(path, json.dumps({"writer": who, "i": i, "payload": who * 200_000}))
"""


def test_two_writers_on_one_path_never_corrupt_it(tmp_path):
    """Two engines given the same snapshot path: the last complete write wins, never a mix.

    (Use one path per engine to keep both; `banditk prior merge` combines them.)
    """
    path = tmp_path / "shared.json"
    procs = [subprocess.Popen([sys.executable, "-c", TWO_WRITERS, str(path), who]) for who in "ab"]
    seen = set()
    while any(p.poll() is None for p in procs):
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        assert doc["payload"] == doc["writer"] * 200_000
        seen.add(doc["writer"])
    assert all(p.returncode == 0 for p in procs)
    assert json.loads(path.read_text())["i"] == 199
