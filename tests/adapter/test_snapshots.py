"""The snapshot writer never stops the engine, and says when it fails and when it recovers."""

import logging

from streams import trained_governor

from banditk.adapter.snapshots import SnapshotWriter
from banditk.governor.snapshot import load_snapshot


def test_write_failures_are_logged_once_and_again_when_they_recover(tmp_path, caplog):
    gov = trained_governor(seed=1, steps=100)
    w = SnapshotWriter("/proc/banditk-snapshot.json", 0.0, gov)
    with caplog.at_level(logging.WARNING, logger="vllm.banditk"):
        assert not w.write() and not w.write() and not w.write()
        assert w.errors == 3 and [r.levelname for r in caplog.records] == ["ERROR"]
        w.path = str(tmp_path / "snap.json")
        assert w.write() and w.write()
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "written again after 3 failed writes" in caplog.records[1].getMessage()
    assert load_snapshot(w.path).steps == gov.steps
