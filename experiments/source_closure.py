"""The banditk/ and lab/ sources a report depends on: the static import closure of the script that made it.

A report records ``provenance.sources_sha256``, a hash of every file under banditk/. That is
exact and too strict: a change to the vLLM adapter makes every simulator report stale, though
no simulator run imports the adapter. The closure narrows the check to the modules the
report's script can reach by any import statement, at module level or inside a function,
through local experiments/ helpers, relative imports and banditk's lazy public names.

The closure over-approximates what ran (an import on an untaken branch still counts), which is
the safe side. Code loaded by name is followed too: a string constant that spells a dotted
banditk name (vLLM's ``--scheduler-cls``, ``python -m banditk.tools.cli``) counts as an import.
A plugin loaded by entry point is not reachable from any import: steps that start vLLM add the
package's vLLM entry points (:func:`vllm_entry_points`) to their entries. The evaluation lab
(lab/: the live harness) is followed and hashed as banditk/ is: a live report depends on it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import subprocess
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "banditk"
#: The packages whose files a closure holds: the product and the lab that measures it.
PACKAGES = (PACKAGE, "lab")

#: A string constant that names a module or attribute of them: ``banditk.adapter.scheduler.Cls``.
_DOTTED = re.compile(rf"(?:{'|'.join(PACKAGES)})(\.[A-Za-z_]\w*)+")


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of a dotted module name under ``root``: ``a/b.py`` or ``a/b/__init__.py``."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


#: Folders whose modules scripts import by bare name.
LOCAL_FOLDERS = ("experiments", "tests")


@functools.cache
def local_helpers(root: Path = ROOT) -> dict[str, list[Path]]:
    """``{module name: files}`` of the .py files under :data:`LOCAL_FOLDERS`."""
    out: dict[str, list[Path]] = {}
    for folder in LOCAL_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            out.setdefault(path.stem, []).append(path)
    return out


def _lazy_public(init: Path) -> dict[str, str]:
    """A package's ``_PUBLIC = {name: module}`` map (banditk's lazy public names), or {}."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PUBLIC" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def _package_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])


def imported_names(path: Path, root: Path = ROOT) -> set[str]:
    """Dotted names a file may import: every ``import``/``from`` anywhere in it, relative ones resolved."""
    names: set[str] = set()
    package = _package_of(path, root) if path.is_relative_to(root) else ""
    tree = ast.parse(path.read_text(), filename=str(path))
    # The lazy map's module names are imported only for the names imported from it (_resolve).
    lazy_map = {
        id(c)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PUBLIC" for t in node.targets)
        for c in ast.walk(node.value)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            # `from a import b` imports a.b when b is a module; a name otherwise (checked later).
            names.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in lazy_map:
            if _DOTTED.fullmatch(node.value):
                names.add(node.value)  # imported by name: a class path handed to vLLM, `python -m`
    return {n for n in names if n}


def closure(entry: Path, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every file of ``packages`` reachable from ``entry``'s imports, sorted; local modules are followed.

    Local modules are those that resolve to a file under ``root`` (experiments/ helpers imported
    by bare name resolve against the entry's folder too). Each module brings its parent packages'
    ``__init__``, which Python runs first.
    """
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_names(path, root):
            for target in _resolve(name, path, root, packages):
                if target not in seen:
                    todo.append(target)
    return sorted(p for p in seen if any(p.is_relative_to(root / package) for package in packages))


def _resolve(name: str, importer: Path, root: Path, packages: tuple[str, ...]) -> list[Path]:
    """The files running ``import name`` executes: its parent packages' ``__init__`` and itself."""
    parts = name.split(".")
    if parts[0] not in packages:
        # A helper imported by bare name (scripts put experiments/ or a tests/ folder on sys.path):
        # every file of that name counts, the safe side.
        return local_helpers(root).get(name, []) if len(parts) == 1 else []
    out = []
    for i in range(1, len(parts) + 1):
        found = module_file(".".join(parts[:i]), root)
        if found is None:
            if i == len(parts) and i > 1:
                # `from pkg import Name`: Name may be a lazy public name of pkg.
                init = module_file(".".join(parts[:-1]), root)
                lazy = _lazy_public(init) if init is not None and init.name == "__init__.py" else {}
                if parts[-1] in lazy:
                    out += _resolve(lazy[parts[-1]], importer, root, packages)
            break
        out.append(found)
    return out


def vllm_entry_points(root: Path = ROOT) -> tuple[str, ...]:
    """The files of the modules pyproject.toml registers under ``vllm.*`` entry points, relative to ``root``.

    vLLM imports them at start-up (general and stat-logger plugins), so every run of a server
    depends on their closure whatever the script that started it imports.
    """
    groups = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("entry-points", {})
    out = []
    for group, points in sorted(groups.items()):
        if not group.startswith("vllm."):
            continue
        for target in sorted(points.values()):
            path = module_file(target.split(":")[0].strip(), root)
            if path is None:
                raise ValueError(f"pyproject.toml: entry point {group} = {target!r} names no module under {root}")
            out.append(path.relative_to(root).as_posix())
    return tuple(dict.fromkeys(out))


def closure_sha256(files: list[Path], root: Path = ROOT) -> str:
    """SHA-256 over the files by relative path and content (the scheme of ``sources_sha256``)."""
    h = hashlib.sha256()
    for p in sorted(files):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def stamp_for(entries: tuple[str, ...], root: Path = ROOT, exclude: tuple[str, ...] = ()) -> dict:
    """``{"entries", "files", "sha256"}`` of entry scripts (relative to ``root``), for a report's provenance.

    ``exclude`` (files relative to ``root``) leaves out modules that judge a measurement and take
    no part in it: a live report's verdicts carry their own stamp (experiments/live_judge.py), so
    a change to the protocol's checks re-judges the report instead of remaking it. The stamp
    lists them under ``excluded``.
    """
    skip = {root / e for e in exclude}
    files = sorted({f for entry in entries for f in closure(root / entry, root)} - skip)
    stamp = {"entries": list(entries), "files": len(files), "sha256": closure_sha256(files, root)}
    return {**stamp, "excluded": list(exclude)} if exclude else stamp


def extract_commit(commit: str, dest: Path, root: Path = ROOT) -> bool:
    """Write the tree of ``commit`` (banditk/, lab/ where it has one, experiments/, tests/,
    pyproject.toml) under ``dest``; False when git does not know the commit."""
    listed = subprocess.run(["git", "ls-tree", "--name-only", commit], cwd=root, capture_output=True, text=True)
    paths = [p for p in (*PACKAGES, "experiments", "tests", "pyproject.toml") if p in listed.stdout.split()]
    tar = subprocess.run(["git", "archive", commit, *paths], cwd=root, capture_output=True)
    if tar.returncode != 0:
        return False
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(dest, filter="data")
    return True


def stamp_at(
    commit: str, entries: tuple[str, ...], sources_sha256: str, root: Path = ROOT, exclude: tuple[str, ...] = ()
) -> dict | None:
    """The stamp of ``entries`` (less ``exclude``) in the tree of ``commit``, for a report made there.

    None when git does not know ``commit``, or when that commit's banditk/ does not hash to
    ``sources_sha256`` (the report's): then the commit is not what made the report.
    """
    from banditk.io.provenance import sources_sha256 as package_sha256

    with tempfile.TemporaryDirectory() as tmp:
        if not extract_commit(commit, Path(tmp), root) or package_sha256(Path(tmp) / PACKAGE) != sources_sha256:
            return None
        return stamp_for(entries, Path(tmp), exclude)
