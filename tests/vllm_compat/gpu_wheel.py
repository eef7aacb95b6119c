"""The GPU wheel of a vLLM release, its Python only, beside the CPU environment.

``pip download --no-deps`` takes the wheel from the package registry (sha256 pinned below) and
``pip install --no-deps --target`` unpacks it into ``.cache/vllm-<version>/``. With that folder
first on ``PYTHONPATH`` the CPU environment imports this vLLM's pure-Python modules (scheduler,
configs, Model Runner V2), which is enough to check the adapter's assumptions against it; its
CUDA kernels never load (/work/shared/VLLM_ON_CPU.md).

Usage: ``python tests/vllm_compat/gpu_wheel.py [--version 0.33.0]`` prints the folder.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: sha256 of each wheel this fetches: a changed upload fails loudly.
PINNED = {
    "0.33.0": (
        "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
    ),
    "0.34.0": (
        "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2",
    ),
}


def ensure(version: str = "0.33.0", cache: Path = REPO / ".cache") -> Path:
    """The folder holding ``vllm`` ``version``'s Python, fetched and unpacked on first use."""
    if version not in PINNED:
        raise SystemExit(f"gpu_wheel: no pinned wheel for vllm=={version}; known: {sorted(PINNED)}")
    target = cache / f"vllm-{version}"
    if (target / ".complete").exists():
        return target
    name, sha = PINNED[version]
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheels / name
    if not wheel.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"vllm=={version}"],
            check=True,
        )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha:
        raise SystemExit(f"gpu_wheel: {wheel} has sha256 {digest}, pinned {sha}; refusing it.")
    # Unpack into a fresh folder, then rename: an interrupted install never looks complete.
    tmp = Path(tempfile.mkdtemp(prefix=f"vllm-{version}.", dir=cache))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp), str(wheel)], check=True
    )
    (tmp / ".complete").touch()
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)
    return target


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="0.33.0", help="vLLM release (default %(default)s)")
    print(ensure(ap.parse_args().version))
