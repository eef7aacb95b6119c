"""The import closure that scopes a simulator report's provenance, and the stamps regenerate writes.

The closure tests run on a small package built in a temporary root, so they say exactly which
files each import form brings in; the stamping and staleness tests use this tree's banditk/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_results_current import regen, stale_reason

from banditk.io.provenance import sources_sha256

sc = regen.source_closure


def write(root: Path, rel: str, text: str = "") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def tree(tmp_path):
    """banditk/ with lazy public names, a subpackage and relative imports; an experiments/ script."""
    write(tmp_path, "banditk/__init__.py", '_PUBLIC = {"Gov": "banditk.gov"}\n')
    write(tmp_path, "banditk/gov.py", "from banditk.core import types\n")
    write(tmp_path, "banditk/core/__init__.py")
    write(tmp_path, "banditk/core/types.py", "from . import errors\n")
    write(tmp_path, "banditk/core/errors.py")
    write(tmp_path, "banditk/sim/__init__.py")
    write(tmp_path, "banditk/sim/run.py", "def go():\n    from ..core.errors import Boom\n")
    write(tmp_path, "banditk/adapter/__init__.py")
    write(tmp_path, "banditk/adapter/plugin.py", "import banditk.gov\n")
    write(tmp_path, "experiments/helper.py", "import banditk.sim.run\n")
    return tmp_path


def rel(paths, root):
    return [p.relative_to(root).as_posix() for p in paths]


def test_closure_follows_every_import_form_and_stops_at_unreached_modules(tree):
    write(tree, "experiments/script.py", "import helper\n\ndef main():\n    from banditk import Gov\n")
    assert rel(sc.closure(tree / "experiments/script.py", tree), tree) == [
        "banditk/__init__.py",
        "banditk/core/__init__.py",
        "banditk/core/errors.py",  # relative imports, one inside a function
        "banditk/core/types.py",
        "banditk/gov.py",  # a lazy public name of banditk
        "banditk/sim/__init__.py",
        "banditk/sim/run.py",  # through the bare-name helper
    ]  # the adapter is never imported


def test_a_name_that_is_not_a_module_brings_its_package_only(tree):
    write(tree, "experiments/script.py", "from banditk.core.types import StepContext\nfrom banditk.sim import nope\n")
    assert rel(sc.closure(tree / "experiments/script.py", tree), tree) == [
        "banditk/__init__.py",
        "banditk/core/__init__.py",
        "banditk/core/errors.py",
        "banditk/core/types.py",
        "banditk/sim/__init__.py",
    ]


def test_stamp_hash_moves_with_a_closure_file_and_not_with_others(tree):
    write(tree, "experiments/script.py", "import banditk.sim.run\n")
    before = sc.stamp_for(("experiments/script.py",), tree)
    write(tree, "banditk/adapter/plugin.py", "import banditk.gov  # changed\n")
    assert sc.stamp_for(("experiments/script.py",), tree) == before
    write(tree, "banditk/core/errors.py", "class Boom(Exception): ...\n")
    after = sc.stamp_for(("experiments/script.py",), tree)
    assert after["sha256"] != before["sha256"] and after["files"] == before["files"] == 5


def test_an_excluded_module_leaves_the_stamp_and_is_listed(tree):
    """A measuring step's stamp leaves out the modules that only judge (experiments/live_judge.py)."""
    write(tree, "banditk/judge.py", "")
    write(tree, "experiments/script.py", "import banditk.sim.run\nimport banditk.judge\n")
    entries, judged = ("experiments/script.py",), ("banditk/judge.py",)
    whole, measured = sc.stamp_for(entries, tree), sc.stamp_for(entries, tree, judged)
    assert measured["excluded"] == ["banditk/judge.py"] and "excluded" not in whole
    assert measured["files"] == whole["files"] - 1
    write(tree, "banditk/judge.py", "THRESHOLD = 0.96\n")
    assert sc.stamp_for(entries, tree, judged) == measured
    assert sc.stamp_for(entries, tree)["sha256"] != whole["sha256"]
    write(tree, "banditk/core/errors.py", "class Boom(Exception): ...\n")  # measuring code: it moves
    assert sc.stamp_for(entries, tree, judged)["sha256"] != measured["sha256"]


def test_a_new_import_changes_the_stamp(tree):
    write(tree, "experiments/script.py", "import banditk.sim.run\n")
    before = sc.stamp_for(("experiments/script.py",), tree)
    write(tree, "banditk/sim/run.py", "import banditk.adapter.plugin\n")  # and no longer core.errors
    after = sc.stamp_for(("experiments/script.py",), tree)
    # + adapter/__init__, adapter/plugin, gov, core/types; core/__init__ and core/errors stay (via gov)
    assert after["files"] == before["files"] + 4


def test_a_dotted_banditk_string_counts_as_an_import(tree):
    # vLLM is handed class paths by name (--scheduler-cls), and `python -m` runs a module by name.
    write(tree, "experiments/script.py", 'CLS = "banditk.sim.run.Runner"\nNOTE = "banditk.sim: not a name"\n')
    assert rel(sc.closure(tree / "experiments/script.py", tree), tree) == [
        "banditk/__init__.py",
        "banditk/core/__init__.py",
        "banditk/core/errors.py",
        "banditk/sim/__init__.py",
        "banditk/sim/run.py",
    ]  # and not banditk.gov, which only banditk's lazy-name map spells


def test_the_lab_is_followed_and_hashed_as_the_package_is(tree):
    """A live script reaches the package through lab/ (the harness the package does not ship):
    both count, by import and by dotted name, and a lab change moves the stamp."""
    write(tree, "lab/__init__.py")
    write(tree, "lab/live/__init__.py")
    write(tree, "lab/live/server.py", "import banditk.adapter.plugin\n")
    write(tree, "lab/live/bench.py")
    script = write(tree, "experiments/live.py", "from lab.live import server\nMOD = 'lab.live.bench'\n")
    got = {p.relative_to(tree).as_posix() for p in sc.closure(script, tree)}
    assert {"lab/__init__.py", "lab/live/server.py", "lab/live/bench.py", "banditk/adapter/plugin.py"} <= got
    before = sc.stamp_for(("experiments/live.py",), tree)
    write(tree, "lab/live/bench.py", "X = 1\n")
    assert sc.stamp_for(("experiments/live.py",), tree)["sha256"] != before["sha256"]


def test_vllm_entry_points_are_the_modules_pyproject_registers_with_vllm(tree):
    write(tree, "pyproject.toml", (
        '[project.entry-points."vllm.general_plugins"]\nb = "banditk.adapter.plugin:register"\n'
        '[project.entry-points."vllm.stat_logger_plugins"]\nm = "banditk.gov:Logger"\n'
        '[project.entry-points."console_scripts"]\nc = "banditk.sim.run:go"\n'
    ))  # fmt: skip
    assert sc.vllm_entry_points(tree) == ("banditk/adapter/plugin.py", "banditk/gov.py")
    write(tree, "pyproject.toml", '[project.entry-points."vllm.general_plugins"]\nb = "banditk.gone:register"\n')
    with pytest.raises(ValueError, match=r"vllm.general_plugins = 'banditk.gone:register' names no module"):
        sc.vllm_entry_points(tree)


# ---- stamping and staleness on this tree ----------------------------------------------------------


def report(sha: str, dirty: bool = False) -> dict:
    return {"provenance": {"commit": "c0ffee", "dirty": dirty, "sources_sha256": sha}, "x": [1, 2]}


def test_stamp_reports_stamps_only_reports_of_this_tree(tmp_path):
    current = sources_sha256()
    ours = write(tmp_path, "out/report.json", json.dumps(report(current), indent=1) + "\n")
    other = write(tmp_path, "out/other/report.json", json.dumps(report("f" * 64), indent=2))
    dirty = write(tmp_path, "out/dirty.json", json.dumps(report("e" * 64, dirty=True)))
    step = regen.Step("s", "experiments/sweep.py", (), None, str(tmp_path / "out"), scope=("experiments/sweep.py",))
    texts = {p: p.read_text() for p in (other, dirty)}

    assert regen.stamp_reports(step) == [ours]
    stamped = json.loads(ours.read_text())
    assert stamped["provenance"]["closure"] == sc.stamp_for(("experiments/sweep.py",))
    assert stamped["x"] == [1, 2] and ours.read_text().startswith('{\n "provenance"')  # indent kept
    assert {p: p.read_text() for p in (other, dirty)} == texts
    assert regen.stamp_reports(regen.Step("live", "x.py", (), None, str(tmp_path / "out"))) == []  # no scope


def test_stamping_keeps_a_protocol_reports_layout(tmp_path):
    from banditk.sim.report import report_json

    made = {**report(sources_sha256()), "regret": {"bandit": {"C=1": list(range(50))}}}
    path = write(tmp_path, "out/report.json", report_json(made) + "\n")
    step = regen.Step("s", "experiments/sweep.py", (), None, str(tmp_path / "out"), scope=("experiments/sweep.py",))
    assert regen.stamp_reports(step) == [path]
    stamped = json.loads(path.read_text())
    assert "closure" in stamped["provenance"]
    assert path.read_text() == report_json(stamped) + "\n"  # still compact below the top levels


def test_a_report_from_edits_committed_unchanged_gets_the_commit_that_holds_them(tmp_path, monkeypatch):
    # A long step started with banditk/ edits outside its closure; they were committed while
    # it ran. The same sources hash means this commit's sources made it.
    current = sources_sha256()
    path = write(tmp_path, "out/report.json", json.dumps(report(current, dirty=True)))
    step = regen.Step("s", "experiments/sweep.py", (), None, str(tmp_path / "out"), scope=("experiments/sweep.py",))
    monkeypatch.setattr(regen, "provenance", lambda: {"commit": "feed", "dirty": True, "sources_sha256": current})
    assert regen.stamp_reports(step) == []  # the tree still has edits: nothing is known
    monkeypatch.setattr(regen, "provenance", lambda: {"commit": "feed", "dirty": False, "sources_sha256": current})
    assert regen.stamp_reports(step) == [path]
    made = json.loads(path.read_text())["provenance"]
    assert (made["commit"], made["dirty"], made["started_on_dirty"]) == ("feed", False, "c0ffee")
    assert made["closure"] == sc.stamp_for(("experiments/sweep.py",))
    other = write(tmp_path, "o2/report.json", json.dumps(report("f" * 64, dirty=True)))
    step2 = regen.Step("s", "experiments/sweep.py", (), None, str(tmp_path / "o2"), scope=("experiments/sweep.py",))
    assert regen.stamp_reports(step2) == [] and json.loads(other.read_text())["provenance"]["dirty"] is True


def test_a_step_imports_this_trees_banditk_whatever_the_path_says(tmp_path, monkeypatch):
    # An editable install may point at another checkout; a script that does not put the root
    # on its path would import that one's banditk and make this tree's reports with it.
    write(tmp_path, "elsewhere/banditk/__init__.py")
    script = write(tmp_path, "probe/where.py", "import banditk\nprint(banditk.__file__)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    log = tmp_path / "where.log"
    assert regen.run_logged([sys.executable, str(script)], log) == 0
    assert Path(log.read_text().split()[-1]) == regen.ROOT / "banditk" / "__init__.py"


def test_a_report_without_provenance_gets_the_one_taken_before_its_step(tmp_path):
    bare = write(tmp_path, "out/report.json", json.dumps({"x": 1}))
    step = regen.Step("s", "experiments/sweep.py", (), None, str(tmp_path / "out"), scope=("experiments/sweep.py",))
    assert regen.stamp_reports(step, made_by={**regen.provenance(), "commit": "elsewhere"}) == []  # tree moved
    assert json.loads(bare.read_text()) == {"x": 1}
    assert regen.stamp_reports(step, made_by=regen.provenance()) == [bare]
    made, tree = json.loads(bare.read_text())["provenance"], regen.provenance()
    closure = {"closure": sc.stamp_for(("experiments/sweep.py",))} if tree["dirty"] is False else {}
    assert made == {**tree, **closure}  # a tree with banditk/ edits gets no closure stamp
    assert regen.stamp_reports(step, made_by=regen.provenance()) == []  # stamped already: left alone


def test_every_step_is_scoped_but_the_priors_and_a_vllm_step_adds_the_plugin():
    served = set(sc.vllm_entry_points())
    assert {"banditk/adapter/plugin.py", "banditk/adapter/metrics.py"} <= served  # pyproject.toml's
    for step in regen.live_steps():
        assert step.scope[0] == step.script and served <= set(step.scope), step.name
    by_name = {s.name: s for s in regen.live_steps()}
    assert "experiments/live_sweep.py" in by_name["sim-vs-real"].scope  # it reads the live sweep's telemetry
    assert all(s.scope is None for s in regen.prior_steps(refit=True))
    assert all(s.scope == (s.script,) for s in regen.sim_steps())


def test_a_stamped_report_is_judged_by_its_closure():
    now = sc.stamp_for(("experiments/sweep.py",))
    made = {"commit": "c", "dirty": False, "sources_sha256": "old", "closure": dict(now)}
    assert stale_reason(made, "new", now) is None  # other banditk/ sources moved, not the closure's
    assert stale_reason(made, "new", None) is not None  # a step without scope: the whole package
    assert "import closure" in stale_reason({**made, "closure": {**now, "sha256": "0" * 64}}, "new", now)
    assert "uncommitted" in stale_reason({**made, "dirty": True}, "new", now)
    assert "other banditk/ sources" in stale_reason({k: v for k, v in made.items() if k != "closure"}, "new", now)
