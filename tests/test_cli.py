"""The banditk command line, run in-process and as a real console script."""

import json
import subprocess
import sys

import pytest
from streams import trained_governor as trained

from banditk.governor.snapshot import save_snapshot
from banditk.io.priorfile import read_json
from banditk.tools.cli import main


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(path, trained(seed=1, steps=1200, batches=(1, 8)))
    return path


def test_show_prints_goodput_pbest_and_best_k_per_bucket(snapshot, capsys):
    assert main(["prior", "show", str(snapshot)]) == 0
    out = capsys.readouterr().out
    assert "snapshot:" in out and "class=mtp" in out
    acc = out.split("acceptance per position (posterior mean):")[1].splitlines()[0].split()
    assert abs(float(acc[0]) - 0.8) < 0.05  # the synthetic stream's true first-position acceptance
    rows = [line for line in out.splitlines() if line.strip().startswith(("1 ", "8-11 "))]
    assert len(rows) == 2
    for row in rows:
        assert row.rstrip().split()[-1].startswith("K=")
        assert row.count("(") == 5  # one P(best) per K


def test_validate_exit_codes_and_reasons(snapshot, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    doc = read_json(snapshot)
    doc["k_max"] = "four"
    bad.write_text(json.dumps(doc))
    assert main(["prior", "validate", str(snapshot)]) == 0
    assert main(["prior", "validate", str(snapshot), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"OK {snapshot}" in out
    assert "INVALID" in out and "`k_max` must be an integer in [1, 64], got 'four'" in out


def test_import_then_validate_then_show(snapshot, tmp_path, capsys):
    prior = tmp_path / "prior.json"
    assert main(["prior", "import", str(snapshot), "-o", str(prior), "--strength", "30", "--hardware", "cpu"]) == 0
    doc = read_json(prior)
    assert doc["schema"] == "banditk/prior" and doc["strength_cap"] == 30 and doc["drafter"]["hardware"] == "cpu"
    assert main(["prior", "validate", str(prior)]) == 0
    assert main(["prior", "show", str(prior), "--all"]) == 0


def test_import_refuses_a_bad_strength(snapshot, tmp_path, capsys):
    assert main(["prior", "import", str(snapshot), "-o", str(tmp_path / "p.json"), "--strength", "-3"]) == 1
    assert "--strength must be a number of observations in (0, 1e+12), got -3.0" in capsys.readouterr().err


def test_merge_snapshots(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_snapshot(a, trained(seed=1, steps=300))
    save_snapshot(b, trained(seed=2, steps=500))
    out = tmp_path / "m.json"
    assert main(["prior", "merge", str(a), str(b), "-o", str(out)]) == 0
    merged = read_json(out)
    assert merged["governor"]["state"]["steps"] == 800


def test_errors_go_to_stderr_with_exit_1(tmp_path, capsys):
    assert main(["prior", "show", str(tmp_path / "missing.json")]) == 1
    assert "banditk: error: Cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [[], ["prior"], ["prior", "show"], ["prior", "validate"], ["prior", "import"], ["prior", "merge"], ["demo"]]
)
def test_help_on_every_command(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    assert "usage: banditk" in capsys.readouterr().out


def test_console_script_runs_the_demo(tmp_path):
    snap = tmp_path / "demo.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "banditk.tools.cli",
            "demo",
            "--steps",
            "300",
            "--phases",
            "1,64",
            "--snapshot",
            str(snap),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "true best K" in r.stdout and snap.exists()
    assert main(["prior", "validate", str(snap)]) == 0


@pytest.mark.parametrize("command", ["show", "import", "merge"])
def test_out_of_memory_reading_a_file_is_an_error_not_a_traceback(command, snapshot, tmp_path, monkeypatch, capsys):
    # What `ulimit -v` does to a reader of a large prior: the allocation fails inside it.
    import banditk.io.priorfile as priorfile

    def no_memory(path):
        raise MemoryError

    monkeypatch.setattr(priorfile, "read_json", no_memory)  # the commands import it when they run
    argv = {
        "show": ["prior", "show", str(snapshot)],
        "import": ["prior", "import", str(snapshot), "-o", str(tmp_path / "p.json")],
        "merge": ["prior", "merge", str(snapshot), str(snapshot), "-o", str(tmp_path / "m.json")],
    }[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "out of memory" in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "m.json").exists()
