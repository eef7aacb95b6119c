"""experiments/live_sweep.py's policy list: every name its --help lists is one it runs."""

import dataclasses
import importlib.util
import json
import types
from pathlib import Path

import pytest

pytest.importorskip("vllm")
SPEC = importlib.util.spec_from_file_location(
    "live_sweep", Path(__file__).resolve().parents[1] / "experiments" / "live_sweep.py"
)
live_sweep = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(live_sweep)


def test_a_bare_table_is_the_table_flag_and_every_policy_builds_a_config(tmp_path):
    from lab.live.policies import speculative_config

    args = live_sweep.parse_args(["--policies", "nospec,table,bandit", "--table", "[[1,4,2],[5,256,0]]"])
    assert args.policies == ["nospec", "table:[[1,4,2],[5,256,0]]", "bandit"]
    for policy in args.policies:  # the sweep died here, after running every earlier policy
        speculative_config(policy, draft="/draft", k_max=args.k_max, work_dir=tmp_path)


def test_bandit_context_reaches_the_governor_with_the_shipped_context_edges(tmp_path):
    from banditk.adapter.policy_factory import governor_config_dict
    from banditk.adapter.settings import split_speculative_config
    from banditk.core.buckets import DEFAULT_CONTEXT_EDGES
    from banditk.core.config import GovernorConfig
    from lab.live.policies import speculative_config

    spec = speculative_config("bandit+context", draft="/draft", k_max=3, work_dir=tmp_path)
    _, settings = split_speculative_config(spec)
    settings = dataclasses.replace(settings, k_max=3, method="draft_model")
    cfg = GovernorConfig.from_dict(governor_config_dict(settings))
    assert cfg.context_edges == DEFAULT_CONTEXT_EDGES and cfg.num_buckets == 3 * len(cfg.bucket_edges)
    assert "context_edges" not in speculative_config("bandit", draft="/d", k_max=3)["governor_config"]


def test_long_prompts_get_their_model_length_and_kv_cache_recorded():
    args = live_sweep.parse_args(["--input-len", "3000", "--max-model-len", "4096", "--kv-cache-mb", "768"])
    assert (args.input_len, args.max_model_len, args.kv_cache_mb) == (3000, 4096, 768)
    default = live_sweep.parse_args([])
    assert (default.max_model_len, default.kv_cache_mb) == (512, 256)


@pytest.mark.parametrize("output_len, k_max", [(64, 3), (200, 3), (16, 7)])
def test_learning_policies_warm_up_for_the_protocols_steps_and_static_ones_for_a_batch(output_len, k_max):
    args = live_sweep.parse_args(["--output-len", str(output_len), "--k-max", str(k_max)])
    for c in (1, 16):
        for policy in ("bandit", "bandit+prior", "ucb"):
            n = live_sweep.warmup_requests(policy, c, args)
            # Even at K_max + 1 tokens a step, every request's output takes this many steps.
            assert n % c == 0 and (n // c) * output_len / (k_max + 1) >= args.warmup_steps == 200
        for policy in ("nospec", "fixed:2", "pinned:3", "table:[[1,4,3],[5,256,0]]"):
            assert live_sweep.warmup_requests(policy, c, args) == c


def test_later_rounds_warm_up_for_a_batch_and_draw_their_own_prompts(tmp_path, monkeypatch):
    """A round after the first meets a governor that settled at this concurrency: one batch of
    warm-up. Every round measures new prompts, the same ones for every policy of the round."""
    args = live_sweep.parse_args(["--repeats", "3", "--out", str(tmp_path)])
    assert live_sweep.warmup_requests("bandit", 8, args, 0) > 8
    assert live_sweep.warmup_requests("bandit", 8, args, 1) == live_sweep.warmup_requests("bandit", 8, args, 2) == 8
    loads = []

    def client(url, model, warm, measure, **kw):
        loads.append((warm, measure))
        result = {"output_throughput": 1.0, "completed": 1, "duration": 1.0}
        result.update({f"p{q}_tpot_ms": 1.0 for q in (50, 95, 99)} | {"p99_ttft_ms": 1.0})
        return result, {"t0": 0.0, "t1": 1.0, "num_prompts": measure.num_prompts}

    monkeypatch.setattr(live_sweep, "run_warm_then_measure", client)
    server = types.SimpleNamespace(base_url="http://x", model="m")
    for policy in ("bandit", "fixed:2"):
        for r in range(3):
            live_sweep.run_point(server, policy, 8, args, tmp_path / policy, r)
    seeds = [[m.seed for _, m in loads[i : i + 3]] for i in (0, 3)]
    assert seeds[0] == seeds[1] and len(set(seeds[0])) == 3
    assert [w.num_prompts for w, _ in loads] == [live_sweep.warmup_requests("bandit", 8, args), 8, 8, 8, 8, 8]


def test_repeats_are_saved_apart_and_reported_as_one_point(tmp_path):
    args = live_sweep.parse_args(["--repeats", "3", "--out", str(tmp_path), "--policies", "fixed:2,bandit"])
    keys = [(p, 4, r) for p in args.policies for r in range(args.repeats)]
    done = {key: live_sweep.point_file(tmp_path, *key, args.repeats) for key in keys}
    assert len(set(done.values())) == 6  # no run overwrites another
    (tmp_path / "points").mkdir()
    for (policy, c, r), f in list(done.items())[:-1]:  # the bandit's last run is not measured yet
        f.write_text(json.dumps({"policy": policy, "concurrency": c, "throughput_tok_s": 100.0 + 10 * r}))
    points = {p["policy"]: p for p in live_sweep.collected_points(done, args.repeats)}
    assert points["fixed:2"]["throughput_tok_s"] == 110.0 and len(points["fixed:2"]["runs"]) == 3
    assert points["bandit"]["throughput_tok_s"] == 105.0 and len(points["bandit"]["runs"]) == 2


def test_repeats_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        live_sweep.parse_args(["--repeats", "0"])
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err


def test_bandit_prior_is_the_bandit_runs_snapshot_imported_for_this_machine(tmp_path):
    from streams import trained_governor

    from banditk.governor.snapshot import load_prior, save_snapshot

    out = tmp_path / "sweep"
    (out / "runs" / "bandit").mkdir(parents=True)
    save_snapshot(out / "runs" / "bandit" / "snapshot.json", trained_governor(0, 400, (1, 8)))
    # Not the default models: no shipped prior applies, the snapshot is imported.
    args = live_sweep.parse_args(["--out", str(out), "--hidden", "512"])
    path = live_sweep.prior_for(args)
    prior = load_prior(path)
    assert path == out / "runs" / "bandit_prior.json"
    assert prior.key.hardware == "cpu-2core" and prior.strength_cap == 200


def test_the_sweeps_reports_do_not_depend_on_the_simulator():
    # What the sweep runs (and imports) reaches neither the simulator nor the CLI that loads it,
    # so a simulator change leaves the live reports current (experiments/source_closure.py).
    from experiment_scripts import load

    files = load("source_closure").closure(Path(live_sweep.__file__).resolve())
    assert files and not [f for f in files if f.parent.name in ("sim", "fit", "tools")]
