"""No import cycles: in banditk/, between the package's modules, and among experiments/ scripts.

Imports inside functions count too: a lazy import that closes a cycle still ties the two modules
to each other's shape.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(path: Path, known: set[str], package: str | None) -> set[str]:
    """The known modules ``path`` imports anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and (package is None or n.startswith(package)):
                found.add(n)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycles_finds_a_cycle_and_nothing_else():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_banditk_has_no_import_cycle():
    mods = package_modules(ROOT, "banditk")
    known = set(mods)
    # A package's __init__ importing its own submodules is not a cycle of the code's design.
    graph = {
        m: {d for d in imports_of(p, known, "banditk") if d != m and not m.startswith(d + ".")} for m, p in mods.items()
    }
    assert cycles(graph) == []


def test_experiments_have_no_import_cycle():
    scripts = {p.stem: p for p in (ROOT / "experiments").glob("*.py")}
    known = set(scripts)
    graph = {m: imports_of(p, known, None) - {m} for m, p in scripts.items()}
    assert cycles(graph) == []
