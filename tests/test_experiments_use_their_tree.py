"""Every experiment script imports the banditk of its own checkout.

Run directly (``python experiments/x.py``), a script imports whichever banditk the environment's
editable install points at: with two checkouts, another tree's code. A benchmark once timed the
wrong checkout that way. Each script that imports banditk or lab therefore puts its repository
first on ``sys.path`` before its first import of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "experiments").glob("*.py"))


def _ours(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return node.module.split(".")[0] in ("banditk", "lab")
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in ("banditk", "lab") for a in node.names)
    return False


def _puts_root_first(node: ast.AST) -> bool:
    """``sys.path.insert(0, ...)`` or ``sys.path[:0] = ...`` naming ROOT or the script's parents."""
    text = ast.unparse(node)
    return ("sys.path.insert(0," in text or "sys.path[:0]" in text) and ("ROOT" in text or "parents[1]" in text)


def _is_script(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_imports_its_own_checkout(path):
    tree = ast.parse(path.read_text())
    if not _is_script(tree) or not any(_ours(n) for n in ast.walk(tree)):
        pytest.skip("not a script, or imports neither banditk nor lab")
    for node in tree.body:
        if _puts_root_first(node):
            return
        assert not _ours(node), f"{path.name}: imports {ast.unparse(node)} before putting its checkout on sys.path"
    pytest.fail(f"{path.name}: imports banditk or lab in functions, and never puts its checkout on sys.path")
