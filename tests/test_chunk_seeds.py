"""experiments/chunk_seeds.py: the chunk-run test's run, per seed, on the shipped governor or a variant."""

import json

from banditk.governor import bandit
from tests.experiment_scripts import load

chunk_seeds = load("chunk_seeds")


def test_seed_two_is_the_run_the_test_and_the_variant_tests_saw(tmp_path, monkeypatch):
    # tests/governor/test_chunk_runs.py passes seed 2 on the shipped governor (>= 90% of late
    # prompts on K = 1). Before likely-revisits the relative ridge failed it (84%,
    # results/variant-relative-ridge/tests); on likely-revisits both hold the chunk K throughout.
    monkeypatch.setattr(bandit, "GoodputPosterior", bandit.GoodputPosterior)  # install() replaces it
    share = {}
    for variant in (None, "relative-ridge"):
        out = tmp_path / f"{variant}.json"
        chunk_seeds.main(["--seeds", "2-2", "--out", str(out)] + (["--variant", variant] if variant else []))
        report = json.loads(out.read_text())
        assert report["variant"] == variant and report["share_asked"] == 0.9
        share[variant] = report["per_seed"][0]["late_share_on_chunk_k"]
    assert share[None] >= 0.9 and share["relative-ridge"] >= 0.9, share
