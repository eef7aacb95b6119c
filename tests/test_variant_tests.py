"""experiments/variant_tests.py: each test's outcome as pytest reports it, and the report's list."""

from types import SimpleNamespace

from tests.experiment_scripts import load

variant_tests = load("variant_tests")


def report(nodeid, when, outcome):
    return SimpleNamespace(
        nodeid=nodeid, when=when, failed=outcome == "failed", skipped=outcome == "skipped", outcome=outcome
    )


def test_a_failure_in_any_phase_fails_the_test_and_a_pass_needs_the_call():
    plugin = variant_tests.Outcomes("cell-strength")
    for r in [
        report("a", "setup", "passed"),
        report("a", "call", "passed"),
        report("a", "teardown", "passed"),
        report("b", "setup", "passed"),
        report("b", "call", "passed"),
        report("b", "teardown", "failed"),
        report("c", "setup", "failed"),
        report("d", "setup", "skipped"),
    ]:
        plugin.pytest_runtest_logreport(r)
    assert plugin.outcomes == {"a": "passed", "b": "failed", "c": "failed", "d": "skipped"}


def test_the_markdown_lists_the_failures():
    text = variant_tests.markdown(
        {
            "variant": "cell-strength",
            "provenance": {"commit": "abcdef0123"},
            "defaults": {"cell_prior_count": 4.0},
            "passed": 1,
            "skipped": 0,
            "outcomes": {"t::ok": "passed", "t::bad": "failed"},
        }
    )
    assert "1 passed, 1 failed, 0 skipped." in text
    assert "- failed: `t::bad`" in text and "t::ok" not in text
    assert "`abcdef0`" in text
