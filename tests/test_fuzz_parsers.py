"""Property-based fuzzing of everything that parses outside input.

Every input either loads or raises banditk's own error; nothing else escapes
(no KeyError, IndexError, TypeError, ZeroDivisionError, numpy warnings as errors).
"""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import run_stream

from banditk.core.config import GovernorConfig
from banditk.core.errors import BanditkError
from banditk.governor.snapshot import governor_from_snapshot, snapshot_dict
from banditk.io.priorfile import parse_json, prior_from_dict
from banditk.tools.synthetic import SyntheticTruth

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)


def _valid_snapshot() -> dict:
    from banditk.governor import BanditGovernor

    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=3, seed=0, bucket_edges=(1, 4, 16)))
    run_stream(g, SyntheticTruth(acceptance=(0.8, 0.6, 0.5)), [1, 4, 16] * 40)
    return snapshot_dict(g)


VALID = _valid_snapshot()


def _paths(doc, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p, _ in _paths(VALID) if p]


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _load_everything(doc):
    """Load ``doc``; return None, or the BanditkError it raised (anything else escapes and fails)."""
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        try:
            prior_from_dict(doc)
            if doc.get("schema") == "banditk/snapshot":
                governor_from_snapshot(doc)
        except BanditkError as e:
            return e
    return None


def _explained(err) -> bool:
    """No error, or one with a message a user can act on."""
    return err is None or len(str(err)) > 10


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), json_values)
def test_mutated_snapshots_load_or_raise_banditk_errors(path, value):
    doc = json.loads(json.dumps(VALID))
    _set(doc, path, value)
    assert _explained(_load_everything(doc))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATHS))
def test_snapshots_with_a_field_removed(path):
    doc = json.loads(json.dumps(VALID))
    node = doc
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    assert _explained(_load_everything(doc))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_documents(value):
    try:
        doc = parse_json(json.dumps(value))
    except BanditkError as e:
        assert _explained(e)
        return
    assert isinstance(doc, dict) and _explained(_load_everything(doc))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    try:
        doc = parse_json(data.decode("utf-8", errors="replace"))
    except BanditkError as e:
        assert _explained(e)
    else:
        assert isinstance(doc, dict)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f.name for f in GovernorConfig.__dataclass_fields__.values()] + ["bogus"]),
        json_values,
        max_size=6,
    )
)
def test_governor_config_parser(d):
    d = {"drafter_class": "mtp", "k_max": 4, **d}
    try:
        cfg = GovernorConfig.from_dict(d)
    except BanditkError as e:
        assert _explained(e)
    else:
        assert cfg.k_max == d["k_max"] and cfg.drafter_class == d["drafter_class"]


def test_valid_snapshot_still_loads():
    assert governor_from_snapshot(json.loads(json.dumps(VALID))).steps == 120
