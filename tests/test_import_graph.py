"""No import cycles, and nothing in the package that only the lab uses.

No cycles in banditk/, between the package's modules, or among experiments/ scripts. Imports
inside functions count too: a lazy import that closes a cycle still ties the two modules to each
other's shape. Every module of banditk/ is reachable from what a user runs; one that only
experiments/ or tests/ import belongs in lab/.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from experiment_scripts import load

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


def product_entries(sc) -> list[Path]:
    """What a user's process imports first: the package, its commands and every entry point vLLM loads."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    targets = list(project.get("scripts", {}).values())
    for points in project.get("entry-points", {}).values():
        targets += points.values()
    paths = [sc.module_file(t.split(":")[0].strip()) for t in targets]
    assert all(paths), f"pyproject.toml names a module that is not in the tree: {targets}"
    return [ROOT / "banditk" / "__init__.py", *paths]


def test_every_package_module_is_reachable_from_what_a_user_runs():
    sc = load("source_closure")
    reached = set()
    for entry in product_entries(sc):
        reached |= set(sc.closure(entry, ROOT, ("banditk",)))
    unreached = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "banditk").rglob("*.py")
        if p not in reached and p.name != "conftest.py"  # pytest's doctest collection settings
    )
    assert unreached == [], f"only experiments/ or tests/ import these: move them to lab/: {unreached}"
