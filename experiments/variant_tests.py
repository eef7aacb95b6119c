"""The governor's behaviour tests run on a governor change under study: what the change breaks.

    python experiments/variant_tests.py --variant cell-strength --out results/variant-tests/cell-strength

The tests that pin the governor's behaviour (settling, near-ties, the noisy clock, steps next to
prompt chunks, arm sets, priors) run with the variant's posterior installed and its defaults in
place of the shipped ones (experiments/cell_strength_variant.py), as the change would land. The
report lists each test's outcome; a test that fails is a behaviour the change loses, which a
simulator sweep, averaging over points, can hide. The variant's own tests
(tests/governor/test_cell_strength.py, which compare it with the shipped governor) are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))

import cell_strength_variant  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

#: The test files that pin the governor's behaviour.
BEHAVIOUR_TESTS = (
    "tests/governor",
    "tests/test_governor.py",
    "tests/test_properties.py",
    "tests/test_prior_conflict.py",
)
OWN_TESTS = "tests/governor/test_cell_strength.py"


class Outcomes:
    """A pytest plugin: installs the variant at start-up and keeps each test's outcome."""

    def __init__(self, variant: str) -> None:
        self.variant, self.outcomes = variant, {}

    def pytest_configure(self, config) -> None:
        cell_strength_variant.install(self.variant, with_defaults=True)

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:  # in any phase
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped:
            self.outcomes.setdefault(report.nodeid, "skipped")
        elif report.when == "call":
            self.outcomes.setdefault(report.nodeid, "passed")


def markdown(report: dict) -> str:
    failed = [t for t, o in report["outcomes"].items() if o == "failed"]
    lines = [
        f"# Behaviour tests on the `{report['variant']}` variant",
        "",
        f"Made by `experiments/variant_tests.py` at commit `{report['provenance'].get('commit', '?')[:7]}`; "
        f"defaults in place of the shipped ones: `{json.dumps(report['defaults'])}`.",
        "",
        f"{report['passed']} passed, {len(failed)} failed, {report['skipped']} skipped.",
        "",
        *(f"- failed: `{t}`" for t in failed),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", required=True, choices=cell_strength_variant.NAMES)
    p.add_argument("--out", type=Path, required=True, help="report folder")
    args = p.parse_args(argv)
    plugin, t0 = Outcomes(args.variant), time.time()
    code = pytest.main(
        ["-q", "-p", "no:cacheprovider", *BEHAVIOUR_TESTS, "--deselect", OWN_TESTS, "--rootdir", str(ROOT)],
        plugins=[plugin],
    )
    counts = {o: sum(1 for v in plugin.outcomes.values() if v == o) for o in ("passed", "failed", "skipped")}
    report = {
        "provenance": provenance(),
        "variant": args.variant,
        "defaults": cell_strength_variant.WIRED_DEFAULTS[args.variant],
        "tests": list(BEHAVIOUR_TESTS),
        "pytest_exit_code": int(code),
        **counts,
        "outcomes": plugin.outcomes,
        "wall_s": time.time() - t0,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(args.out / "report.md", markdown(report))
    print(markdown(report))
    return 0 if code in (0, 1) else int(code)


if __name__ == "__main__":
    raise SystemExit(main())
