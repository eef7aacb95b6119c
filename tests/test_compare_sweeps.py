"""experiments/compare_sweeps.py: check-by-check status changes between two sets of sweep reports."""

import json

from experiment_scripts import load

cs = load("compare_sweeps")


def _write(root, scenario: str, checks: list[tuple]) -> None:
    folder = root / f"sweep-{scenario}"
    folder.mkdir(parents=True)
    rows = [{"check": c, "policy": p, "point": pt, "status": s, "value": v} for c, p, pt, s, v in checks]
    (folder / "report.json").write_text(json.dumps({"checks": rows}))


def test_counts_passes_and_lists_each_flip_with_both_values(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(
        a,
        "x",
        [
            ("tput", "bandit", "c1", "pass", 0.99),
            ("tput", "bandit", "c2", "fail", 0.9),
            ("tput", "fixed:1", "c1", "pass", 1.0),
        ],
    )
    _write(
        b,
        "x",
        [
            ("tput", "bandit", "c1", "fail", 0.94),
            ("tput", "bandit", "c2", "fail", 0.91),
            ("tput", "fixed:1", "c1", "fail", 0.5),
        ],
    )
    _write(a, "only-a", [("tput", "bandit", "c1", "pass", 1.0)])
    out = tmp_path / "flips.json"
    assert cs.main([str(a), str(b), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    # fixed:1 is not a governed policy: its flip is not counted.
    assert result["totals"]["tput"] == {"base_pass": 1, "new_pass": 0, "both": 2}
    assert [(f["point"], f["change"], f["base_value"], f["new_value"]) for f in result["flips"]] == [
        ("c1", "pass->fail", 0.99, 0.94)
    ]
    assert result["only_base"] == ["only-a"]
    text = capsys.readouterr().out
    assert "| x | tput | bandit | c1 | pass->fail | 0.99 | 0.94 |" in text
    assert "1 status changes: 1 pass->fail" in text


def test_a_side_that_is_not_there_is_named(tmp_path, capsys):
    _write(tmp_path / "a", "x", [("tput", "bandit", "c1", "pass", 1.0)])
    assert cs.main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "missing' is neither a folder nor git:<ref>" in capsys.readouterr().err
    assert cs.main([str(tmp_path / "a"), "git:no-such-ref-anywhere"]) == 2
    assert "no-such-ref-anywhere" in capsys.readouterr().err


def test_the_committed_reports_compare_with_themselves_without_flips(capsys):
    # git:HEAD against itself: every committed sweep read through git, nothing changed (and
    # no dependence on a working tree that may be mid-regeneration).
    assert cs.main(["git:HEAD", "git:HEAD"]) == 0
    text = capsys.readouterr().out
    assert "0 status changes: none" in text
