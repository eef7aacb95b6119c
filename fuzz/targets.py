"""Fuzz targets: every input must load or raise banditk's own error.

``check_input(data)`` picks a parser by the first byte and feeds it the rest:
0 prior/snapshot JSON, 1 governor config JSON, 2 a step outcome for ``observe``,
3 a trace line. Anything other than a :class:`banditk.core.errors.BanditkError` escaping
is a bug. Used by the atheris driver (``fuzz/fuzz_inputs.py``) and by the regression
test that replays every kept crash input (``tests/test_fuzz_regressions.py``).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import tempfile
from pathlib import Path

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.core.errors import BanditkError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.governor.snapshot import governor_from_snapshot
from banditk.io.priorfile import parse_json, prior_from_dict
from banditk.io.trace import read_trace

_GOV = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=0))
_TMP = Path(tempfile.mkdtemp(prefix="banditk-fuzz-"))


def _prior(text: str) -> None:
    doc = parse_json(text)
    prior_from_dict(doc)
    if doc.get("schema") == "banditk/snapshot":
        governor_from_snapshot(doc)


def _config(text: str) -> None:
    GovernorConfig.from_dict(parse_json(text))


def _observe(data: bytes) -> None:
    if len(data) < 10:
        return
    batch, n, k = data[0], data[1] % 16, data[2] % 6
    (duration,) = struct.unpack("<d", data[3:11].ljust(8, b"\0"))
    raw = np.frombuffer(data[11 : 11 + 2 * n].ljust(2 * n, b"\0"), dtype=np.int8).astype(np.int64) - 2
    d = _GOV.select(StepContext(batch, 4, "mtp", kv_usage=(data[2] / 255.0)))
    if not 0 <= d.k <= 4:
        raise AssertionError(f"K out of range: {d.k}")
    outcome = StepOutcome(raw[:n], raw[n : 2 * n], duration)
    _GOV.observe(dataclasses.replace(d, k=k) if d.bucket >= 0 else d, outcome)
    if not np.all(np.isfinite(_GOV.latency_params()[0])):
        raise AssertionError("latency posterior went non-finite")


def _trace(text: str) -> None:
    p = _TMP / "t.jsonl"
    p.write_text('{"trace":"banditk/trace","version":1,"drafter":{"class":"mtp"},"k_max":4,"source":"fuzz"}\n' + text)
    read_trace(p)


def check_input(data: bytes) -> None:
    if not data:
        return
    which, rest = data[0] % 4, data[1:]
    text = rest.decode("utf-8", errors="replace")
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            if which == 0:
                _prior(text)
            elif which == 1:
                _config(text)
            elif which == 2:
                _observe(rest)
            else:
                _trace(text)
    except BanditkError:
        pass


def seed_corpus(folder: Path) -> None:
    """A few valid inputs to start from."""
    from banditk.governor.snapshot import snapshot_dict

    folder.mkdir(parents=True, exist_ok=True)
    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=2, seed=0, bucket_edges=(1, 8)))
    doc = snapshot_dict(g)
    (folder / "snapshot").write_bytes(b"\0" + json.dumps(doc).encode())
    (folder / "config").write_bytes(b"\1" + json.dumps({"drafter_class": "mtp", "k_max": 4}).encode())
    (folder / "observe").write_bytes(
        b"\2" + bytes([8, 4, 2]) + struct.pack("<d", 0.02) + bytes([4, 4, 4, 4, 3, 2, 4, 5])
    )
    (folder / "trace").write_bytes(
        b"\3" + b'{"step":1,"B":2,"k":1,"step_s":0.01,"acc_s":[1,0,0,0],"acc_f":[1,0,0,0]}\n'
    )
