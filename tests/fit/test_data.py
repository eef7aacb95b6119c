import json

import numpy as np
import pytest

from banditk.core.errors import BanditkError, DrafterClassMismatchError
from banditk.fit.acceptance import fit_acceptance
from banditk.fit.data import aggregate, load
from banditk.fit.errors import FitInputError
from banditk.fit.fitter import FitOptions
from banditk.io.trace import header
from banditk.tools.synthetic import SyntheticTruth

from .conftest import write_chunked_trace, write_trace


def test_aggregate_matches_per_group_numpy():
    rng = np.random.default_rng(0)
    b, k, t = rng.integers(1, 5, 500), rng.integers(0, 3, 500), rng.gamma(5.0, 0.01, 500)
    g = aggregate(b, k, t)
    assert g.steps == 500
    for i in range(len(g)):
        sel = (b == g.batch[i]) & (k == g.k[i])
        assert g.n[i] == sel.sum()
        assert g.mean[i] == pytest.approx(t[sel].mean(), rel=1e-12)
        assert g.m2[i] == pytest.approx(((t[sel] - t[sel].mean()) ** 2).sum(), rel=1e-9)


def test_acceptance_posterior_is_the_closed_form_beta():
    from scipy import stats

    f = fit_acceptance(np.array([30.0, 5.0]), np.array([10.0, 0.0]), level=0.9)
    assert f.a.tolist() == [31.0, 6.0] and f.b.tolist() == [11.0, 1.0]
    assert f.lo[0] == pytest.approx(stats.beta(31, 11).ppf(0.05))
    assert f.hi[1] == pytest.approx(stats.beta(6, 1).ppf(0.95))
    assert f.to_dict()["observations"] == [40.0, 5.0]


def test_load_sums_acceptance_and_respects_k_max(tmp_path):
    truth = SyntheticTruth()
    p = write_trace(tmp_path / "t.jsonl", truth, 300, seed=3)
    full = load([p])
    assert full.k_max == 4 and full.steps == 300
    lines = [json.loads(x) for x in p.read_text().splitlines()[1:]]
    assert full.acc_successes.tolist() == np.sum([r["acc_s"] for r in lines], axis=0).tolist()
    cut = load([p], k_max=2)
    assert cut.k_max == 2 and cut.acc_successes.size == 2
    assert cut.steps == sum(r["k"] <= 2 for r in lines)
    assert cut.inputs[0]["dropped_k_above_k_max"] == sum(r["k"] > 2 for r in lines)


def test_trace_of_another_class_is_refused(tmp_path):
    p = write_trace(tmp_path / "eagle.jsonl", SyntheticTruth(), 50, drafter_class="eagle")
    with pytest.raises(DrafterClassMismatchError, match=r"drafter class 'eagle', not --drafter-class='mtp'"):
        load([p], drafter_class="mtp")


def test_traces_of_mixed_classes_are_refused(tmp_path):
    a = write_trace(tmp_path / "a.jsonl", SyntheticTruth(), 50, drafter_class="mtp")
    b = write_trace(tmp_path / "b.jsonl", SyntheticTruth(), 50, drafter_class="dflash")
    with pytest.raises(DrafterClassMismatchError, match="several drafter classes.*'dflash'"):
        load([a, b])


@pytest.mark.parametrize(
    ("head", "match"),
    [
        ({"k_max": 0}, r"`k_max` must be an integer in \[1, 64\], got 0"),
        ({"drafter": {"class": "medusa"}}, r"drafter.class='medusa'"),
        ({"version": 7}, r"`version`=7"),
    ],
)
def test_malformed_header_names_the_field_and_value(tmp_path, head, match):
    doc = header("mtp", 4, "sim") | head
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(doc) + "\n" + json.dumps({"B": 1, "k": 0, "step_s": 0.01}) + "\n")
    # An unknown class raises UnknownDrafterClassError, the rest PriorFormatError: both BanditkErrors.
    with pytest.raises(BanditkError, match=match):
        load([p])


def test_no_paths_and_bad_k_max_name_the_argument(tmp_path):
    with pytest.raises(FitInputError, match="`traces` is empty"):
        load([])
    p = write_trace(tmp_path / "t.jsonl", SyntheticTruth(), 20)
    with pytest.raises(FitInputError, match=r"`k_max` must be an integer in \[1, 64\], got 99"):
        load([p], k_max=99)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "mcmc"}, r"`method` must be one of \['auto', 'nuts', 'svi'\], got 'mcmc'"),
        ({"strength": -1.0}, r"`strength` must be a positive number of observations, got -1.0"),
        ({"bucket_edges": (2, 4)}, r"`bucket_edges` must start at 1.*\[2, 4\]"),
        ({"samples": 0}, r"`samples` must be an integer >= 10, got 0"),
        ({"k_max": 0}, r"`k_max` must be an integer in \[1, 64\], got 0"),
        ({"shape_terms": "yes"}, r"`shape_terms` must be true or false, got 'yes'"),
    ],
)
def test_bad_options_name_the_field_and_value(kwargs, match):
    with pytest.raises(FitInputError, match=match):
        FitOptions(**kwargs)


def test_steps_next_to_a_chunk_are_kept_in_the_bucket_the_governor_consults(tmp_path):
    from banditk.core.buckets import DEFAULT_BUCKET_EDGES, bucket_of

    p, mixed = write_chunked_trace(tmp_path / "t.jsonl")
    data = load([p])
    # Decode-only steps alone feed the latency groups.
    assert data.steps == 320 and data.inputs[0]["steps_next_to_a_prompt_chunk"] == 80
    m = data.mixed
    b8, b7 = bucket_of(DEFAULT_BUCKET_EDGES, 8), bucket_of(DEFAULT_BUCKET_EDGES, 7)
    # A one-step dip to B = 7 stays in B = 8's bucket (the governor's dwell): B = 7's own bucket is empty.
    assert m.mix_n[b7].sum() == 0 and m.mix_n[b8].sum() == 80 and m.steps == 80
    for k, ts in mixed.items():
        ts = np.array(ts)
        assert m.mix_n[b8, k] == ts.size
        assert m.mix_sum[b8, k] == pytest.approx(ts.sum()) and m.mix_sumsq[b8, k] == pytest.approx((ts**2).sum())
        assert m.mix_p[b8, k] == 256 * ts.size and m.mix_pp[b8, k] == 256**2 * ts.size
        assert m.mix_tp[b8, k] == pytest.approx(256 * ts.sum())
    # Steps above k_max are dropped here too.
    assert load([p], k_max=2).mixed.mix_n.sum() == sum(len(mixed[k]) for k in range(3))


def test_a_load_that_stays_at_a_new_batch_size_moves_its_chunks_there(tmp_path):
    from banditk.core.buckets import DEFAULT_BUCKET_EDGES, bucket_of

    lines = [json.dumps(header("mtp", 2, "sim"))]
    batches = [16] * 10 + [3] * 10  # the load drops from 16 to 3 and stays
    for i, b in enumerate(batches):
        lines.append(
            json.dumps({"step": i + 1, "B": b, "k": 1, "step_s": 0.02, "acc_s": [0, 0], "acc_f": [0, 0], "prefill": 64})
        )
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    # Every step has a chunk, so no decode-only step: the fit has no latency data to use.
    with pytest.raises(FitInputError, match="no prefill"):
        load([p])
    lines.append(json.dumps({"step": 21, "B": 3, "k": 0, "step_s": 0.01, "acc_s": [0, 0], "acc_f": [0, 0]}))
    p.write_text("\n".join(lines) + "\n")
    m = load([p]).mixed
    # The dwell (4 steps) keeps the first 3 steps at B = 3 in B = 16's bucket.
    assert m.mix_n[bucket_of(DEFAULT_BUCKET_EDGES, 16), 1] == 13
    assert m.mix_n[bucket_of(DEFAULT_BUCKET_EDGES, 3), 1] == 7


def test_a_giant_chunk_is_left_out_of_the_cells(tmp_path):
    # One step of a whole batch of prompts (8,000 tokens) among 512-token chunks would
    # set the slope along P by itself; it is dropped, the 1,024-token ones are kept.
    p, mixed = write_chunked_trace(tmp_path / "t.jsonl")
    lines = p.read_text().splitlines()
    rows = [json.loads(x) for x in lines[1:]]
    chunk_rows = [r for r in rows if r["prefill"]]
    chunk_rows[0]["prefill"], chunk_rows[1]["prefill"] = 8000, 1024
    p.write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n")
    m = load([p]).mixed
    assert m.steps == 79 and m.mix_p.sum() == 256 * 78 + 1024
