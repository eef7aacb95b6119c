"""Fetch vLLM's own tests from its source distribution into an ignored cache folder.

The sdist on the package registry ships ``tests/``; the wheels do not. pip cannot build the
sdist here, but ``pip download --no-binary :all: --no-clean`` unpacks it before it fails at
the metadata step, which is all we need (see /work/shared/VLLM_ON_CPU.md). Only the registry
is used: the tests run offline, with a hand-written ``config.json`` for ``facebook/opt-125m``
in a local Hugging Face cache (vLLM's test utilities build a ``ModelConfig`` from that name).

Usage: ``python tests/vllm_compat/fetch_sdist.py [--version 0.32.0] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VERSION = "0.32.0"

#: sha256 of the sdist files the suite depends on, per release: a changed upload fails loudly.
PINNED = {
    "0.32.0": {
        "tests/conftest.py": "ffcef5eed3c822467ab883c09bb1185caa143d0c9c9f7394aa5260b47231deb5",
        "tests/v1/core/utils.py": "19313b305ce016a2b1763154e41208a7066b2268ec0d0e1db858b15f71cdcc19",
        "tests/v1/core/test_scheduler.py": "78e9f47f51f61e59141731b366225e09f1c2ca756b82450decd31b92f65a0984",
        "tests/v1/core/test_async_scheduler.py": "bd510ff234924844f263290766d05bdad8d5d7d2032550ad1dbc29effcd3d48e",
        "tests/v1/core/test_priority_scheduler_random.py": "ccb5025888c303ee6803e3832a4553bc2d4a2fdcfd4c38bde7d04ff8566b2ba2",
        "tests/v1/spec_decode/test_dynamic_sd.py": "85114e83c1d36e01a50717c037a6e6b831c41bf767a9a90ac3d3c013855a217b",
    },
    "0.34.0": {
        "tests/conftest.py": "10474ec680b5edb85c07f77111d848949fa55db9bb5cfe49f2338d428fa6a01e",
        "tests/v1/core/utils.py": "ae566ab7afa33357dae68bc1d764828f70817c9490f2f6ac841279ce3e805b3b",
        "tests/v1/core/test_scheduler.py": "e2b71f2225c3681c28e7088f18bb290d5da1a3e9d27110d2878ee7dbd46507b4",
        "tests/v1/core/test_async_scheduler.py": "3ef4e9c6dd39563c45a45b32ad246fe12a46107fde1495d1d131aeefa089672c",
        "tests/v1/spec_decode/test_dynamic_sd.py": "85114e83c1d36e01a50717c037a6e6b831c41bf767a9a90ac3d3c013855a217b",
    },
}

#: Files of the sdist whose behaviour the tests pin; the installed vLLM must hold the same bytes,
#: or the tests would check a scheduler other than the one the governor subclasses.
SAME_AS_INSTALLED = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/sched/async_scheduler.py",
    "vllm/v1/core/sched/output.py",
    "vllm/v1/spec_decode/dynamic/utils.py",
    "vllm/config/speculative.py",
)

# facebook/opt-125m's config.json as published; ModelConfig reads nothing else for these tests.
OPT_125M_CONFIG = {
    "_name_or_path": "facebook/opt-125m",
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "transformers_version": "4.21.0.dev0",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}
# Any 40-hex name works for an offline snapshot; a fixed one keeps the cache reproducible.
_FAKE_COMMIT = "0" * 40


def default_cache(version: str) -> Path:
    return REPO / ".cache" / f"vllm-sdist-{version}"


def hf_cache(cache: Path) -> Path:
    """The HF hub cache the tests run against (``HF_HUB_CACHE``)."""
    return cache / "hf-hub"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _installed_vllm_root() -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    return None if spec is None or spec.origin is None else Path(spec.origin).parent.parent


def _unpack(version: str, work: Path) -> Path:
    """Let pip download and unpack the sdist; return the unpacked source root."""
    tmp = work / "tmp"
    tmp.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"vllm=={version}",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--no-build-isolation",
        "--no-clean",
        "-q",
        "-d",
        str(work / "dl"),
    ]
    # Expected to fail at "metadata-generation" (the build needs Rust and CUDA); the source stays.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    # Where pip could build the metadata, the download succeeds and the archive is in dl/.
    for archive in glob.glob(str(work / "dl" / "vllm-*.tar.gz")):
        with tarfile.open(archive) as tar:
            tar.extractall(tmp / "pip-download-archive", filter="data")
    roots = [
        Path(p)
        for p in glob.glob(str(tmp / "pip-download-*" / "vllm*"))
        if (Path(p) / "tests").is_dir() and (Path(p) / "pyproject.toml").is_file()
    ]
    if len(roots) != 1:
        raise SystemExit(
            f"fetch_sdist: pip did not leave vLLM {version}'s source under {tmp} (exit {proc.returncode}).\n"
            f"{proc.stderr[-2000:]}"
        )
    return roots[0]


def _check(root: Path, version: str) -> list[str]:
    """The pinned hashes of the sdist's test files; returns problems."""
    problems = []
    for rel, want in PINNED.get(version, {}).items():
        got = _sha256(root / rel) if (root / rel).is_file() else "missing"
        if got != want:
            problems.append(f"{rel}: sha256 {got}, pinned {want}")
    return problems


def check_installed(cache: Path, vllm_root: Path | None = None) -> list[str]:
    """The scheduler sources of the vLLM the tests will import (the installed one, or the one
    under ``vllm_root``: the folder holding its ``vllm/``) against the sdist's, hashed at fetch;
    returns problems."""
    recorded = json.loads((cache / "sources.json").read_text())
    installed = vllm_root or _installed_vllm_root()
    if installed is None:
        return ["vLLM is not installed"]
    problems = []
    for rel, want in recorded.items():
        path = installed / rel
        if not path.is_file() or _sha256(path) != want:
            problems.append(f"{rel}: the installed vLLM's copy ({path}) differs from the sdist's")
    return problems


def fetch(
    version: str = DEFAULT_VERSION, cache: Path | None = None, *, force: bool = False, vllm_root: Path | None = None
) -> Path:
    """Return the cache folder holding the sdist's ``tests/``, fetching it if needed; the vLLM
    they will test (installed, or under ``vllm_root``) must hold the sdist's scheduler sources."""
    cache = Path(cache or default_cache(version))
    stamp = cache / ".complete"
    if stamp.is_file() and not force:
        _require_installed(cache, version, vllm_root)
        return cache
    with tempfile.TemporaryDirectory(prefix="banditk-sdist-") as d:
        root = _unpack(version, Path(d))
        problems = _check(root, version)
        if problems:
            raise SystemExit(f"fetch_sdist: vLLM {version}'s sdist does not match:\n  " + "\n  ".join(problems))
        if cache.exists():
            shutil.rmtree(cache)
        cache.mkdir(parents=True)
        # The whole tests/ tree: vLLM's root conftest imports helpers from all over it.
        shutil.copytree(root / "tests", cache / "tests")
        # Its pytest section (markers) makes the cache folder the rootdir, away from banditk's.
        shutil.copy2(root / "pyproject.toml", cache / "pyproject.toml")
        sources = {rel: _sha256(root / rel) for rel in SAME_AS_INSTALLED}
        (cache / "sources.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")
    snap = hf_cache(cache) / "models--facebook--opt-125m"
    (snap / "refs").mkdir(parents=True)
    (snap / "refs" / "main").write_text(_FAKE_COMMIT)
    (snap / "snapshots" / _FAKE_COMMIT).mkdir(parents=True)
    (snap / "snapshots" / _FAKE_COMMIT / "config.json").write_text(json.dumps(OPT_125M_CONFIG, indent=2))
    stamp.write_text(version + "\n")
    _require_installed(cache, version, vllm_root)
    return cache


def _require_installed(cache: Path, version: str, vllm_root: Path | None = None) -> None:
    problems = check_installed(cache, vllm_root)
    if problems:
        raise SystemExit(
            f"fetch_sdist: vLLM {version}'s tests do not test the installed vLLM:\n  " + "\n  ".join(problems)
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=DEFAULT_VERSION)
    ap.add_argument("--cache", type=Path, default=None, help="default: .cache/vllm-sdist-VERSION")
    ap.add_argument("--force", action="store_true", help="fetch again even if the cache is complete")
    args = ap.parse_args(argv)
    print(fetch(args.version, args.cache, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
