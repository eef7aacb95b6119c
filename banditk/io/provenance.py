"""What made a report: the commit, whether the tree was clean, and a hash of the package's sources.

A report that carries these can be checked against the code that is committed: the same
``sources_sha256`` means the same ``banditk/`` sources, whatever the commit.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def sources_sha256(root: Path = PACKAGE) -> str:
    """SHA-256 over every ``.py`` file under ``root``, by relative path and content."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def provenance() -> dict:
    """``{"commit", "dirty", "sources_sha256"}``; commit ``"unknown"`` outside a git checkout."""
    repo = PACKAGE.parent

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD") or "unknown"
    status = git("status", "--porcelain", "--", "banditk")
    return {"commit": commit, "dirty": bool(status) if status is not None else None, "sources_sha256": sources_sha256()}
