"""Defects found by hand (issue 20), each pinned: bad input gives exit 1 or a banditk error
naming the file and the value, never a traceback, a hang or an unbounded read."""

import dataclasses
import os

import pytest
from streams import trained_governor

from banditk.core.errors import PriorFormatError
from banditk.governor.snapshot import merge_documents, save_snapshot, snapshot_dict
from banditk.io.priorfile import read_json
from banditk.tools.cli import main


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    path = tmp_path_factory.mktemp("snap") / "snap.json"
    save_snapshot(path, trained_governor(seed=3, steps=200))
    return path


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "dir"])
def test_readers_take_regular_files_only(tmp_path, special):
    # /dev/zero reports st_size 0 and reads without end; a FIFO blocks; a folder is no file.
    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "f"), "dir": str(tmp_path)}[special]
    if special == "fifo":
        os.mkfifo(path)
    with pytest.raises(PriorFormatError, match="is not a regular file"):
        read_json(path)
    assert main(["prior", "validate", path]) == 1


def test_a_file_over_the_cap_is_refused_by_what_is_read(tmp_path, monkeypatch):
    import banditk.io.priorfile as pf

    monkeypatch.setattr(pf, "MAX_FILE_BYTES", 10)
    p = tmp_path / "big.json"
    p.write_text('{"a": "' + "x" * 20 + '"}')
    with pytest.raises(PriorFormatError, match="over the 10-byte limit"):
        read_json(p)


def test_merge_refuses_a_file_with_itself(snapshot):
    doc = read_json(snapshot)
    with pytest.raises(PriorFormatError, match="is the same file as"):
        merge_documents([(str(snapshot), doc), ("copy.json", doc)])


def test_merge_refuses_another_hardware_or_target(snapshot):
    a = snapshot_dict(trained_governor(seed=1, steps=100))
    b = snapshot_dict(trained_governor(seed=2, steps=100))
    b["drafter"] = dict(b["drafter"], hardware="gb10")
    with pytest.raises(PriorFormatError, match="hardware=gb10"):
        merge_documents([("a", a), ("b", b)])
    b = snapshot_dict(trained_governor(seed=2, steps=100))
    b["drafter"] = dict(b["drafter"], target_model="other")
    with pytest.raises(PriorFormatError, match="target=other"):
        merge_documents([("a", a), ("b", b)])


@pytest.mark.parametrize("strength", ["1e308", "inf", "nan", "0"])
def test_import_strength_out_of_range_is_exit_1(snapshot, tmp_path, capsys, strength):
    out = tmp_path / "p.json"
    assert main(["prior", "import", str(snapshot), "-o", str(out), "--strength", strength]) == 1
    assert "--strength must be a number of observations" in capsys.readouterr().err
    assert not out.exists()


def test_a_strength_just_inside_the_range_writes_a_valid_prior(snapshot, tmp_path):
    out = tmp_path / "p.json"
    assert main(["prior", "import", str(snapshot), "-o", str(out), "--strength", "9e11"]) == 0
    assert main(["prior", "validate", str(out)]) == 0


def test_outputs_that_are_folders_are_exit_1(snapshot, tmp_path, capsys):
    assert main(["prior", "import", str(snapshot), "-o", str(tmp_path)]) == 1
    assert main(["prior", "merge", str(snapshot), str(snapshot), "-o", str(tmp_path)]) == 1
    assert capsys.readouterr().err.count("is a directory") == 2


@pytest.mark.parametrize("samples", ["0", "-5", "x"])
def test_show_samples_must_be_positive(snapshot, capsys, samples):
    with pytest.raises(SystemExit) as e:
        main(["prior", "show", str(snapshot), "--samples", samples])
    assert e.value.code == 2  # argparse's usage error, with the value named
    assert f"got {samples if samples == 'x' else int(samples)}" in capsys.readouterr().err.replace("'", "")


def test_merge_of_distinct_replicas_still_works(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_snapshot(a, trained_governor(seed=1, steps=100))
    save_snapshot(b, trained_governor(seed=2, steps=100))
    assert main(["prior", "merge", str(a), str(b), "-o", str(tmp_path / "m.json")]) == 0
    assert dataclasses.is_dataclass(trained_governor(seed=1, steps=1).config)


def test_a_live_snapshot_carries_the_servers_key(tmp_path, capsys):
    # prior show printed method=- target=- for a flat server's snapshot that recorded them.
    path = tmp_path / "live.json"
    save_snapshot(path, trained_governor(seed=1, steps=50), {"method": "mtp", "target_model": "/m/qwen"})
    assert main(["prior", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "method=mtp" in out and "target=/m/qwen" in out
