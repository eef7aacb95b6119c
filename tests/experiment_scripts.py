"""Load an experiments/ script as a module (experiments/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load(name: str, module_name: str | None = None) -> ModuleType:
    """``experiments/<name>.py`` as ``module_name`` (default ``experiments_<name>``).

    experiments/ goes on sys.path, since scripts import their sibling scripts by bare name; the
    module is registered in sys.modules first, as dataclasses look their module up while built.
    """
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    module_name = module_name or f"experiments_{name}"
    spec = importlib.util.spec_from_file_location(module_name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
