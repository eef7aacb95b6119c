"""Replays every kept crash input, and runs the coverage-guided fuzzer for a bounded time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
sys.path.insert(0, str(FUZZ))

import targets  # noqa: E402

CRASHES = sorted(p for p in (FUZZ / "crashes").glob("*") if p.name != ".keep")


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_kept_crash_inputs_no_longer_crash(path):
    targets.check_input(path.read_bytes())


def test_seed_corpus_runs_clean(tmp_path):
    targets.seed_corpus(tmp_path)
    for p in tmp_path.iterdir():
        targets.check_input(p.read_bytes())


def test_fuzz_a_fixed_number_of_seeded_runs(tmp_path):
    """A seeded atheris run of FUZZ_RUNS inputs (the same inputs every time) in `make test`;
    the open-ended search is `make fuzz`."""
    pytest.importorskip("atheris")
    runs = int(os.environ.get("FUZZ_RUNS", "150000"))
    r = subprocess.run(
        [
            sys.executable,
            str(FUZZ / "fuzz_inputs.py"),
            "-seed=1",
            f"-runs={runs}",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    log = r.stderr[-3000:]
    assert r.returncode == 0, f"the fuzzer found a crash (input kept in fuzz/crashes/):\n{log}"
    assert "Done" in r.stderr and "stat::number_of_executed_units" in r.stderr, log
