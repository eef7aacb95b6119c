"""Atomic file writes: a reader sees the old file or the new one, never a torn one."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, fsync and rename.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.json"
    >>> atomic_write_text(p, "{}"); p.read_text()
    '{}'
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # Make the rename itself durable.
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def remove_orphans(target: Path) -> int:
    """Remove temporary files of ``target`` left by writers that died (killed mid-write).

    A temporary file's name carries its writer's pid; one whose process no longer runs is an
    orphan. Temporary files of live writers are left alone. Returns how many were removed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / ".x.json.999999999.abc.tmp").write_text("torn")
    >>> remove_orphans(d / "x.json"), sorted(p.name for p in d.iterdir())
    (1, [])
    """
    removed = 0
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        pid = tmp.name[len(target.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            tmp.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process, or no such pid at all
        return False
    except PermissionError:  # another user's live process
        return True
    return True
