"""Context buckets: cells per (batch bucket, context bucket), their files and their decisions."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from banditk.core.buckets import DEFAULT_CONTEXT_EDGES, cell_label, check_context_edges
from banditk.core.config import GovernorConfig
from banditk.core.errors import ConfigError, IncompatiblePriorError, PriorFormatError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.governor.snapshot import governor_from_snapshot, merge_documents, prior_from_snapshot, snapshot_dict
from banditk.io.priorfile import prior_from_dict, prior_to_dict

CTX = (0, 2048, 8192)


def _cfg(**kw) -> GovernorConfig:
    return GovernorConfig(drafter_class="mtp", k_max=3, **kw)


def _ctx(batch: int, mean_context: int) -> StepContext:
    return StepContext(batch, 3, "mtp", context_tokens=batch * mean_context)


def test_context_edges_are_checked_and_name_the_field():
    assert check_context_edges([0, 512]) == (0, 512)
    for bad, why in (([], "non-empty"), ([1, 5], "start at 0"), ([0, 5, 5], "strictly"), ([0, -1], ">= 0")):
        with pytest.raises(ConfigError, match=why) as e:
            check_context_edges(bad)
        assert "context_edges" in str(e.value)
    with pytest.raises(ConfigError, match="at most 8"):
        check_context_edges(list(range(0, 900, 100)))
    with pytest.raises(ConfigError, match="context_edges"):
        GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 3, "context_edges": [0, "x"]})


def test_cells_are_batch_buckets_times_context_buckets():
    cfg = GovernorConfig.from_dict(
        {"drafter_class": "mtp", "k_max": 3, "bucket_edges": [1, 4], "context_edges": [0, 2048]}
    )
    assert (cfg.num_batch_buckets, cfg.num_context_buckets, cfg.num_buckets) == (2, 2, 4)
    assert _cfg().num_buckets == _cfg().num_batch_buckets  # one context bucket: cells are the batch buckets
    assert [cell_label(cfg.bucket_edges, cfg.context_edges, i) for i in range(4)] == [
        "B>=1,L>=0",
        "B>=1,L>=2048",
        "B>=4,L>=0",
        "B>=4,L>=2048",
    ]
    assert GovernorConfig.from_dict(cfg.to_dict()) == cfg


def test_the_governor_consults_the_cell_of_the_mean_context():
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX, bucket_dwell=1, bucket_hysteresis=0.0))
    nc = len(CTX)
    assert g.select(_ctx(2, 100)).bucket == 0 * nc + 0
    assert g.select(_ctx(2, 3000)).bucket == 0 * nc + 1
    assert g.select(_ctx(6, 3000)).bucket == 1 * nc + 1
    assert g.select(_ctx(6, 9000)).bucket == 1 * nc + 2
    # Unknown context (0) is the shortest context bucket.
    assert g.select(StepContext(6, 3, "mtp")).bucket == 1 * nc + 0


def test_context_hysteresis_and_dwell_keep_the_cell_near_an_edge():
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=(0, 2000), bucket_dwell=2, bucket_hysteresis=0.1))
    assert g.select(_ctx(2, 2100)).bucket == 1
    assert g.select(_ctx(2, 1900)).bucket == 1  # 1900 >= 2000 - 10%: kept
    assert g.select(_ctx(2, 1000)).bucket == 1  # first step elsewhere: dwell keeps it
    assert g.select(_ctx(2, 1000)).bucket == 0  # second: moved


def test_without_context_edges_the_context_changes_nothing():
    a, b = BanditGovernor(_cfg(seed=3)), BanditGovernor(_cfg(seed=3))
    rng = np.random.default_rng(0)
    for step in range(400):
        batch = int(rng.integers(1, 12))
        da = a.select(StepContext(batch, 3, "mtp", context_tokens=int(rng.integers(0, 10**6))))
        db = b.select(StepContext(batch, 3, "mtp"))
        assert (da.k, da.bucket) == (db.k, db.bucket), step
        out = StepOutcome(np.full(batch, da.k), np.zeros(batch, dtype=int), 0.01 * (1 + 0.1 * da.k))
        a.observe(da, out)
        b.observe(db, out)


def _learn(g: BanditGovernor, times_by_context: dict[int, np.ndarray], steps: int, batch: int = 8, acc: float = 0.7):
    """Run ``g`` on a noise-free stream alternating contexts every 200 steps; step time per K is
    ``times_by_context[L][K]``, each draft accepted with probability ``acc`` (seeded)."""
    rng = np.random.default_rng(0)
    contexts = sorted(times_by_context)
    for step in range(steps):
        L = contexts[(step // 200) % len(contexts)]
        d = g.select(_ctx(batch, L))
        drafted = np.full(batch, d.k)
        accepted = np.array([int(np.argmin(np.append(rng.random(d.k) < acc, False))) for _ in range(batch)])
        g.observe(d, StepOutcome(drafted, np.minimum(accepted, drafted), float(times_by_context[L][d.k])))


def test_the_best_k_is_learnt_per_context_where_it_differs():
    # A long context adds 40 ms whatever K is, which makes deep K pay.
    base = np.array([0.010, 0.013, 0.018, 0.024])
    times = {500: base, 20_000: base + 0.040}
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX))
    _learn(g, times, 6000)
    best = np.argmax(g.mean_goodput(), axis=1)
    short, long_ = 1 * len(CTX) + 0, 1 * len(CTX) + 2
    e = np.cumsum(np.append(1.0, 0.7 ** np.arange(1, 4)))  # E(K) = 1 + a + a^2 + ...
    assert best[short] == np.argmax(e / times[500]) == 1
    assert best[long_] == np.argmax(e / times[20_000]) == 3


@settings(max_examples=25, deadline=None)
@given(
    verify_ms=st.floats(0.5, 8.0),
    extra_ms=st.floats(0.0, 80.0),
    acc=st.floats(0.3, 0.95),
)
def test_a_slower_context_never_lowers_the_learnt_k(verify_ms, extra_ms, acc):
    """Same batch, the drafter's cost independent of context: a step time that rises with context
    (by a cost every K pays) never makes the posterior's best K fall."""
    base = 0.010 + verify_ms * 1e-3 * np.arange(4)
    g = BanditGovernor(_cfg(bucket_edges=(1, 2), context_edges=(0, 4096), explore_steps=4))
    # Every K observed in both cells at B = 1 (its bucket's representative B: no batch ratio).
    for L, extra in ((100, 0.0), (10_000, extra_ms * 1e-3)):
        for k in range(4):
            for _ in range(12):
                d = g.select(_ctx(1, L))
                d = type(d)(k=k, bucket=d.bucket, num_decoding=1, step_id=d.step_id)
                n_acc = int(round(acc * k))
                g.observe(d, StepOutcome(np.array([k]), np.array([n_acc]), float(base[k] + extra)))
    best = np.argmax(g.mean_goodput(), axis=1)
    assert best[1] >= best[0]


def _prior_doc(governor: BanditGovernor) -> dict:
    """The governor's posterior exported as a prior file (``banditk prior import``)."""
    doc = json.loads(json.dumps(snapshot_dict(governor)))
    return json.loads(json.dumps(prior_to_dict(prior_from_snapshot(doc))))


def test_a_prior_without_context_starts_every_context_bucket():
    flat = BanditGovernor(_cfg(bucket_edges=(1, 4)))
    _learn(flat, {100: 0.01 + 0.004 * np.arange(4)}, 300)
    doc = _prior_doc(flat)
    assert "context_edges" not in doc  # a file without them reads as one context bucket
    prior = prior_from_dict(doc)
    assert prior.context_edges == (0,) and prior.stats.cell_n.sum() > 0
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX), prior)
    cells = g.posterior.prior_loaded.cell_n.reshape(2, len(CTX), 4)
    for c in range(len(CTX)):
        np.testing.assert_array_equal(cells[:, c], np.minimum(prior.stats.cell_n, prior.strength_cap))


def test_a_prior_with_other_context_edges_is_refused_naming_the_field():
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX))
    prior = prior_from_dict(_prior_doc(g))
    assert prior.context_edges == CTX
    with pytest.raises(IncompatiblePriorError, match="context_edges"):
        BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=(0, 1000)), prior)


def test_prior_files_round_trip_and_refuse_bad_context_edges():
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX))
    _learn(g, {500: 0.01 + 0.004 * np.arange(4), 20_000: 0.05 + 0.004 * np.arange(4)}, 600)
    doc = _prior_doc(g)
    assert doc["context_edges"] == list(CTX)
    back = prior_from_dict(doc)
    assert json.loads(json.dumps(prior_to_dict(back))) == doc
    assert back.stats.cell_n.shape == (2 * len(CTX), 4)
    g.posterior.fold_pending()
    np.testing.assert_allclose(back.stats.cell_n, np.minimum(g.data.cell_n, back.strength_cap))
    for bad in ([1, 2], "0", [0, 0]):
        with pytest.raises(PriorFormatError, match="context_edges"):
            prior_from_dict({**doc, "context_edges": bad})
    with pytest.raises(
        PriorFormatError, match=r"stats\.cells\.n.*shape \[2, 4\]"
    ):  # cells shaped for one context bucket
        prior_from_dict({**doc, "context_edges": [0]})


def test_a_snapshot_with_context_buckets_continues_the_same_decisions():
    g = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX, seed=5))
    times = {500: 0.01 + 0.004 * np.arange(4), 20_000: 0.05 + 0.004 * np.arange(4)}
    _learn(g, times, 700)
    doc = json.loads(json.dumps(snapshot_dict(g)))
    h = governor_from_snapshot(doc)
    assert h.config.context_edges == CTX
    for L in (500, 20_000, 500):
        for _ in range(50):
            a, b = g.select(_ctx(8, L)), h.select(_ctx(8, L))
            assert (a.k, a.bucket) == (b.k, b.bucket)
            out = StepOutcome(np.full(8, a.k), np.zeros(8, dtype=int), float(times[L][a.k]))
            g.observe(a, out)
            h.observe(b, out)


def test_merge_refuses_snapshots_of_other_context_edges():
    a = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=CTX))
    b = BanditGovernor(_cfg(bucket_edges=(1, 4), context_edges=(0, 1000)))
    _learn(b, {100: 0.01 + 0.004 * np.arange(4)}, 50)
    with pytest.raises(IncompatiblePriorError, match="context_edges"):
        merge_documents([("a", snapshot_dict(a)), ("b", snapshot_dict(b))])


def test_the_shipped_context_edges_split_short_medium_and_long():
    assert DEFAULT_CONTEXT_EDGES == check_context_edges(list(DEFAULT_CONTEXT_EDGES))
    assert len(DEFAULT_CONTEXT_EDGES) == 3
