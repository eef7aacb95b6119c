"""The snapshot schema of the governor's state: complete, and every bad value a clear error."""

import copy

import pytest
from streams import trained_governor

from banditk.core.errors import PriorFormatError
from banditk.governor.snapshot import governor_from_snapshot, snapshot_dict
from banditk.governor.state import OBSOLETE, SCHEMA

BAD_VALUES = ("", None, -1, "NaN", [], {}, 1e308, True)


@pytest.fixture(scope="module")
def snapshot():
    return snapshot_dict(trained_governor(1, 300, (1, 8, 64), bucket_edges=(1, 8, 64)))


def test_every_field_the_governor_writes_is_in_the_schema(snapshot):
    written = set(snapshot["governor"]["state"])
    assert written == set(SCHEMA), written ^ set(SCHEMA)
    assert not written & OBSOLETE


def _leaves(node, path=()):
    """Every leaf, every list, and the first entry of each list: the places a value can be wrong."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(node, list) and node:
        yield from _leaves(node[0], path + (0,))


def _replaced(doc, path, value):
    out = copy.deepcopy(doc)
    node = out["governor"]["state"]
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


def test_every_leaf_replaced_by_a_bad_value_loads_or_names_the_field(snapshot):
    state = snapshot["governor"]["state"]
    paths = [p for p in _leaves(state) if p]
    assert len(paths) > 80
    loaded = refused = 0
    for path in paths:
        for value in BAD_VALUES:
            doc = _replaced(snapshot, path, value)
            try:
                governor_from_snapshot(doc)
                loaded += 1
            except PriorFormatError as e:
                assert str(path[0]) in str(e) or "governor.state" in str(e), (path, value, str(e))
                refused += 1
    assert refused > loaded  # most of these are nonsense; the rest (e.g. prev_k = -1) are valid states


@pytest.mark.parametrize(("field", "value"), [("bucket_k", 5), ("prev_k", 5), ("chunk_explore_k", 5)])
def test_a_k_above_the_servers_k_max_is_refused_by_the_schema(snapshot, field, value):
    # K_max is 4: a snapshot of a deeper server must not load its Ks here.
    state = snapshot["governor"]["state"]
    bad = [value] * len(state[field]) if isinstance(state[field], list) else value
    with pytest.raises(PriorFormatError, match=f"`{field}` must be") as e:
        governor_from_snapshot(_replaced(snapshot, (field,), bad))
    assert ", 4]" in str(e.value)


def test_played_counts_survive_a_snapshot_and_an_older_snapshot_reads_none(snapshot):
    # Played counts tell the switching rule that a K was looked at: lost, cold Ks would be re-looked.
    played = snapshot["governor"]["state"]["bucket_played"]
    assert sum(map(sum, played)) > 0
    assert governor_from_snapshot(snapshot).bucket_played.tolist() == played
    older = copy.deepcopy(snapshot)
    del older["governor"]["state"]["bucket_played"]
    assert not governor_from_snapshot(older).bucket_played.any()
