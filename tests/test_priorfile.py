"""Prior and snapshot files: round trips, merges, atomic writes and bad input."""

import json
import pickle

import numpy as np
import pytest
from streams import run_stream, trained_governor

from banditk.core.config import GovernorConfig
from banditk.core.errors import DrafterClassMismatchError, IncompatiblePriorError, PriorFormatError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.governor.snapshot import (
    governor_from_snapshot,
    load_prior,
    load_snapshot,
    merge_documents,
    prior_from_snapshot,
    save_snapshot,
    snapshot_dict,
)
from banditk.io.priorfile import MAX_FILE_BYTES, load_prior_file, prior_to_dict, read_json, save_prior
from banditk.tools.synthetic import SyntheticTruth


def trained(seed=0, steps=1500, batches=(1, 8, 64), discount=0.998, **kw) -> BanditGovernor:
    return trained_governor(seed, steps, batches, discount=discount, **kw)


def test_snapshot_restore_continues_with_the_same_decisions(tmp_path):
    truth = SyntheticTruth()
    g = trained(seed=1, steps=1001)  # odd: leaves pending regression rows and a held epoch
    path = tmp_path / "snap.json"
    save_snapshot(path, g)
    restored = load_snapshot(path)
    batches = np.random.default_rng(5).choice([2, 8, 32, 100], size=800)
    a = run_stream(g, truth, batches, seed=11)
    b = run_stream(restored, truth, batches, seed=11)
    assert np.array_equal(a, b)
    assert np.allclose(g.data.cell_sum, restored.data.cell_sum)


def test_snapshot_restore_continues_identically_with_steps_next_to_prompt_chunks(tmp_path):
    def run(g, steps, seed):
        rng, ks = np.random.default_rng(seed), []
        for i in range(steps):
            chunk = 512 * (i % 3 == 2)
            d = g.select(StepContext(8, 4, "mtp", prefill_tokens=chunk))
            out = SyntheticTruth().outcome(rng, d, 8)
            g.observe(
                d, StepOutcome(out.drafted, out.accepted, out.step_duration_s + 1e-4 * chunk, prefill_tokens=chunk)
            )
            ks.append(d.k)
        return ks

    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=3))
    run(g, 701, seed=1)
    save_snapshot(tmp_path / "snap.json", g)
    restored = load_snapshot(tmp_path / "snap.json")
    assert run(g, 600, seed=2) == run(restored, 600, seed=2)
    assert g.mixed_steps == restored.mixed_steps
    assert g.mixed_steps > 0


def test_snapshot_of_a_governor_with_a_prior_keeps_the_prior(tmp_path):
    prior = prior_from_snapshot(snapshot_dict(trained(seed=2)), strength=50)
    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=3), prior)
    save_snapshot(tmp_path / "s.json", g)
    r = load_snapshot(tmp_path / "s.json")
    assert np.allclose(r.posterior.prior_stats.cell_n, g.posterior.prior_stats.cell_n)
    assert r.prior.strength_cap == 50


def test_merge_of_two_snapshots_equals_one_governor_fed_both_streams():
    truth = SyntheticTruth()
    # Batch sizes that are their bucket's representative B: elsewhere a cell observation is
    # carried to the representative B by the latency model of the moment, so sequential and
    # merged statistics differ by that model's drift (the regression and acceptance still add up).
    b1 = [1] * 700
    b2 = [3] * 900

    # The two replicas' streams, recorded so one governor can be fed both.
    def record(seed, batches):
        g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=seed, discount=1.0, model_discount=1.0))
        log = []
        rng = np.random.default_rng(seed)
        from banditk.core.types import StepContext

        for b in batches:
            d = g.select(StepContext(int(b), 4, "mtp"))
            o = truth.outcome(rng, d, int(b))
            g.observe(d, o)
            log.append((d, o))
        return g, log

    g1, log1 = record(1, b1)
    g2, log2 = record(2, b2)
    merged = governor_from_snapshot(merge_documents([("a", snapshot_dict(g1)), ("b", snapshot_dict(g2))]))
    both = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=1, discount=1.0, model_discount=1.0))
    for d, o in log1 + log2:
        both.observe(d, o)
    both.posterior.fold_pending()
    for field in ("acc_successes", "acc_failures", "cell_n", "cell_sum", "cell_sumsq", "reg_xtx", "reg_xty"):
        assert np.allclose(getattr(merged.data, field), getattr(both.data, field)), field
    assert merged.steps == g1.steps + g2.steps


def test_import_caps_prior_strength_and_keeps_means(tmp_path):
    g = trained(seed=3, steps=3000, batches=(8,))
    save_snapshot(tmp_path / "s.json", g)
    prior = prior_from_snapshot(read_json(tmp_path / "s.json"), strength=20)
    assert prior.stats.cell_n.max() <= 20 + 1e-9
    assert (prior.stats.acc_successes + prior.stats.acc_failures).max() <= 20 + 1e-9
    n = g.data.cell_n
    busiest = np.unravel_index(np.argmax(n), n.shape)
    assert np.isclose(
        prior.stats.cell_sum[busiest] / prior.stats.cell_n[busiest], g.data.cell_sum[busiest] / g.data.cell_n[busiest]
    )
    assert prior.provenance["source"] == "snapshot"


def test_imported_prior_cuts_regret_on_a_new_deployment(tmp_path):
    # Over four deployments: one 1,500-step stream's regret swings by a tenth either way
    # with its seed, more than the prior's gain.
    truth = SyntheticTruth()
    regrets = {"flat": [], "prior": []}
    for seed in range(4, 8):
        batches = np.random.default_rng(seed).choice([1, 8, 64], size=1500)
        prior = prior_from_snapshot(snapshot_dict(trained(seed=seed, steps=4000)), strength=100)
        for name, p in (("flat", None), ("prior", prior)):
            g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=seed + 5), p)
            ks = run_stream(g, truth, batches, seed=seed + 5)
            good = [truth.goodput(b) for b in batches]
            regrets[name].append(np.mean([1 - g_[k] / g_.max() for g_, k in zip(good, ks)]))
    assert np.mean(regrets["prior"]) < np.mean(regrets["flat"]), regrets


def test_prior_file_round_trip(tmp_path):
    prior = prior_from_snapshot(snapshot_dict(trained(seed=5)))
    save_prior(tmp_path / "p.json", prior)
    again = load_prior(tmp_path / "p.json")
    assert json.dumps(prior_to_dict(again)) == json.dumps(prior_to_dict(prior))


def test_cells_of_steps_with_a_prompt_chunk_travel_and_old_files_still_load(tmp_path):
    g = trained(seed=7, steps=200)
    rng = np.random.default_rng(7)
    for _ in range(50):
        d = g.select(StepContext(8, 4, "mtp", prefill_tokens=512))
        out = SyntheticTruth().outcome(rng, d, 8)
        g.observe(d, StepOutcome(out.drafted, out.accepted, out.step_duration_s + 0.1, prefill_tokens=512))
    assert g.data.mix_n.sum() > 10
    save_prior(tmp_path / "p.json", prior_from_snapshot(snapshot_dict(g)))
    again = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4), load_prior(tmp_path / "p.json"))
    np.testing.assert_allclose(again.posterior.prior_stats.mix_n, np.minimum(g.data.mix_n, again.prior.strength_cap))
    doc = read_json(tmp_path / "p.json")
    del doc["stats"]["mixed_cells"]  # as written before those cells existed
    old = load_prior(write(tmp_path, doc, "old.json"))
    assert old.stats.mix_n.sum() == 0 and old.stats.cell_n.sum() > 0


# ---- bad input --------------------------------------------------------------------------


@pytest.fixture
def prior_doc():
    return prior_to_dict(prior_from_snapshot(snapshot_dict(trained(seed=6, steps=300))))


def write(tmp_path, doc, name="p.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_prior_of_another_class_is_refused(tmp_path, prior_doc):
    p = write(tmp_path, prior_doc)
    with pytest.raises(DrafterClassMismatchError, match="prior for drafter class 'mtp', not 'eagle'"):
        load_prior(p, drafter_class="eagle")
    prior = load_prior(p)
    with pytest.raises(DrafterClassMismatchError, match="never transfer across drafter classes"):
        BanditGovernor(GovernorConfig(drafter_class="eagle", k_max=4), prior)


def test_prior_with_smaller_k_max_or_other_edges_is_refused(tmp_path, prior_doc):
    prior = load_prior(write(tmp_path, prior_doc))
    with pytest.raises(IncompatiblePriorError, match="prior k_max=4 is below the server's k_max=6"):
        BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=6), prior)
    with pytest.raises(IncompatiblePriorError, match=r"bucket_edges=\[1, 2, 3"):
        BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, bucket_edges=(1, 4, 16)), prior)
    # A prior for a deeper K_max is truncated, not refused.
    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=2), prior)
    assert g.posterior.prior_stats.cell_n.shape[1] == 3


@pytest.mark.parametrize(
    "mutate,pattern",
    [
        (lambda d: d.update(schema_version=99), r"unknown `schema_version`=99"),
        (lambda d: d.update(schema="something/else"), r"not a banditk prior or snapshot: `schema` is 'something/else'"),
        (lambda d: d.update(k_max=0), r"`k_max` must be an integer in \[1, 64\], got 0"),
        (lambda d: d.update(bucket_edges=[2, 4]), r"`bucket_edges` must be increasing positive integers from 1"),
        (
            lambda d: d["stats"]["acceptance"].update(successes=[1, 2]),
            r"`stats.acceptance.successes` must have shape \[4\]",
        ),
        (
            lambda d: d["stats"]["acceptance"].update(failures=[-1, 0, 0, 0]),
            r"`stats.acceptance.failures` must be >= 0",
        ),
        (lambda d: d["stats"]["cells"].pop("n"), r"`stats.cells.n` is missing"),
        (lambda d: d["stats"].update(cells="x"), r"`stats.cells` must be a JSON object, got str"),
        (lambda d: d.update(strength_cap=-1), r"`strength_cap` must be a positive number, got -1"),
        (lambda d: d["stats"]["mixed_cells"].update(n=[1]), r"`stats.mixed_cells.n` must have shape \[16, 5\]"),
        (lambda d: d["latency_model"].update(weights=[1, 2]), r"`latency_model.weights` must be 4 finite numbers"),
    ],
)
def test_malformed_priors_name_the_field(tmp_path, prior_doc, mutate, pattern):
    mutate(prior_doc)
    with pytest.raises(PriorFormatError, match=pattern):
        load_prior(write(tmp_path, prior_doc))


def test_unknown_drafter_class_in_a_prior(tmp_path, prior_doc):
    from banditk.core.errors import UnknownDrafterClassError

    prior_doc["drafter"]["class"] = "medusa"
    with pytest.raises(UnknownDrafterClassError, match=r"Unknown drafter.class='medusa'; expected one of: .*mtp"):
        load_prior(write(tmp_path, prior_doc))


def test_inconsistent_cell_statistics_are_refused(tmp_path, prior_doc):
    cells = prior_doc["stats"]["cells"]
    b, k = next((b, k) for b, row in enumerate(cells["n"]) for k, v in enumerate(row) if v > 0)
    cells["sum_sq_s2"][b][k] = 0.0
    with pytest.raises(PriorFormatError, match=rf"bucket {b}, K={k} is inconsistent"):
        load_prior(write(tmp_path, prior_doc))


def test_regression_statistics_that_disagree_with_their_weight_are_refused(tmp_path, prior_doc):
    # Found by atheris: xtx all zero with n = 5 once scaled the latency model by 1/1e-300.
    reg = prior_doc["stats"]["regression"]
    reg["xtx"] = [[0.0] * 4 for _ in range(4)]
    reg["n"] = 5.0
    with pytest.raises(
        PriorFormatError, match=r"`stats.regression.xtx` must have first row >= 0 starting with `n`=5.0"
    ):
        load_prior(write(tmp_path, prior_doc))


def test_cell_sums_too_large_to_square_are_refused_not_raised(tmp_path, prior_doc):
    cells = prior_doc["stats"]["cells"]
    cells["n"][0][0], cells["sum_s"][0][0], cells["sum_sq_s2"][0][0] = 1.0, 1.3407807929942597e154, 1.0
    with pytest.raises(PriorFormatError, match=r"`stats.cells` at bucket 0, K=0 is inconsistent"):
        with np.errstate(over="raise"):
            load_prior(write(tmp_path, prior_doc))


def test_nan_in_json_is_refused(tmp_path, prior_doc):
    text = json.dumps(prior_doc).replace('"strength_cap": ', '"strength_cap": NaN, "x": ', 1)
    with pytest.raises(PriorFormatError, match="JSON constant NaN is not allowed"):
        load_prior(write(tmp_path, text))


def test_malformed_json_names_line_and_column(tmp_path):
    with pytest.raises(PriorFormatError, match="is not valid JSON: .* at line 1 column"):
        load_prior(write(tmp_path, '{"schema": '))


def test_a_file_that_is_not_a_prior(tmp_path):
    with pytest.raises(PriorFormatError, match="top level is a list"):
        load_prior(write(tmp_path, "[1, 2]"))
    with pytest.raises(PriorFormatError, match="not a banditk prior"):
        load_prior(write(tmp_path, '{"hello": 1}'))


def test_pickle_is_never_loaded(tmp_path):
    p = tmp_path / "evil.json"
    p.write_bytes(pickle.dumps({"schema": "banditk/prior"}))
    with pytest.raises(PriorFormatError, match="not UTF-8 text|not valid JSON"):
        load_prior(p)


def test_oversized_and_deeply_nested_files_are_refused(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(PriorFormatError, match="over the .*-byte limit"):
        load_prior(big)
    with pytest.raises(PriorFormatError, match="nested too deeply"):
        load_prior(write(tmp_path, "[" * 100_000 + "]" * 100_000))


def test_missing_file(tmp_path):
    with pytest.raises(PriorFormatError, match="Cannot read .*nope.json"):
        load_prior(tmp_path / "nope.json")


def test_merge_refuses_other_class_and_mixed_kinds(prior_doc):
    other = json.loads(json.dumps(prior_doc))
    other["drafter"]["class"] = "eagle"
    with pytest.raises(DrafterClassMismatchError, match="cannot merge 'b'"):
        merge_documents([("a", prior_doc), ("b", other)])
    with pytest.raises(PriorFormatError, match="not a mix"):
        merge_documents([("a", prior_doc), ("b", snapshot_dict(trained(seed=1, steps=50)))])
    with pytest.raises(PriorFormatError, match="at least two"):
        merge_documents([("a", prior_doc)])


def test_snapshot_with_corrupt_state_is_refused(tmp_path):
    doc = snapshot_dict(trained(seed=1, steps=100))
    doc["governor"]["state"]["prev_k"] = 17
    with pytest.raises(PriorFormatError, match=r"`prev_k` must be an integer in \[-1, 4\], got 17"):
        governor_from_snapshot(doc)
    doc = snapshot_dict(trained(seed=1, steps=100))
    doc["governor"]["state"]["mixed_steps"] = ""
    with pytest.raises(PriorFormatError, match=r"`mixed_steps` must be an integer in \[0, \d+\], got ''"):
        governor_from_snapshot(doc)
    doc = snapshot_dict(trained(seed=1, steps=100))
    doc["governor"]["state"]["mixed_share"] = [0.3] * 16  # kept by snapshots of older versions: ignored
    assert governor_from_snapshot(doc).steps == 100
    doc = snapshot_dict(trained(seed=1, steps=100))
    doc["governor"]["state"]["rng"] = {"bit_generator": "PCG64", "state": "x"}
    with pytest.raises(PriorFormatError, match="`rng` is not a valid PCG64 state"):
        governor_from_snapshot(doc)


def test_the_prior_file_loader_refuses_a_snapshot_and_names_the_loader_that_reads_it(tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(path, trained(seed=1, steps=200))
    with pytest.raises(PriorFormatError, match=r"is a snapshot, not a prior file: read it with banditk.load_prior"):
        load_prior_file(path)
    assert load_prior(path).k_max == load_snapshot(path).config.k_max  # the package's loader reads it
