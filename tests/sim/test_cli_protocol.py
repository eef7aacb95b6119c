"""``banditk sim`` / ``sweep`` entry points and a tiny protocol run."""

import json
from pathlib import Path

from banditk.sim.cli import main
from banditk.sim.protocol import ProtocolConfig, run_protocol

SCN = Path(__file__).resolve().parents[2] / "experiments" / "scenarios" / "49548.json"
FIELDS = (
    "throughput_tok_s",
    "tpot_p50_s",
    "tpot_p95_s",
    "tpot_p99_s",
    "ttft_p99_s",
    "k_switches_per_1000",
    "oscillations_per_1000",
    "regret_fraction",
    "steps",
    "policy",
    "scenario",
)


def test_sim_cli_writes_report(tmp_path):
    out = tmp_path / "r.json"
    assert main(["sim", "--scenario", str(SCN), "--policy", "table", "--steps", "400", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    for f in FIELDS:
        assert f in r
    assert r["policy"] == "table" and r["steps"] == 400 and r["scenario"] == "49548"


def test_sim_cli_errors_name_the_argument(tmp_path, capsys):
    assert main(["sim", "--scenario", str(SCN), "--policy", "fixed:9", "--steps", "10"]) == 2
    assert "fixed K must be an integer in [0, k_max=2], got 9" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hardware": "gb10"}))
    assert main(["sim", "--scenario", str(bad), "--policy", "oracle"]) == 2
    assert "`model`=None" in capsys.readouterr().err


def test_tiny_protocol_reports_every_check(tmp_path):
    from banditk.sim.plots import plot_report

    cfg = ProtocolConfig.quick_mode(
        points=(1, 8),
        warmup=50,
        measured=250,
        regret_steps=400,
        convergence_levels=(2, 16),
        convergence_phase_steps=300,
        workers=1,
        policies=(
            "nospec",
            "fixed:1",
            "fixed:2",
            "table",
            "ucb",
            "peer:sglang",
            "peer:vllm-adaptive-k",
            "bandit",
            "oracle",
        ),
    )
    from banditk.sim.scenario import load_scenario

    rep = run_protocol(load_scenario(SCN), cfg, progress=False)
    names = {c["check"] for c in rep["checks"]}
    assert names >= {
        "throughput_vs_nospec",
        "p99_tpot_vs_nospec",
        "throughput_vs_best_fixed",
        "throughput_vs_table",
        "throughput_vs_peer_each_point",
        "throughput_vs_peer_geomean",
        "oscillations_per_1000_stationary",
        "steps_to_settle",
        "regret_fraction_flat_prior",
        "regret_fraction_shipped_prior",
    }
    assert all(c["status"] in ("pass", "fail", "not_run") for c in rep["checks"])
    assert set(rep["results"]) == {"c1", "c8", "c8-out180"}
    paths = plot_report(rep, tmp_path)
    assert len(paths) == 4 and all(Path(p).stat().st_size > 1000 for p in paths)


def test_sweep_cli_quick(tmp_path, capsys):
    out = tmp_path / "sweep"
    rc = main(
        [
            "sweep",
            "--scenario",
            str(SCN),
            "--quick",
            "--points",
            "4",
            "--workers",
            "1",
            "--policies",
            "nospec,fixed:2,table,bandit,oracle",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["quick"] and rep["check_counts"]["pass"] + rep["check_counts"]["fail"] > 0
    text = capsys.readouterr().out
    assert "report:" in text and "plot:" in text and ("PASS" in text or "FAIL" in text)
    assert main(["sweep", "--scenario", str(SCN), "--points", "x"]) == 2


def test_protocol_reports_a_failing_policy_instead_of_crashing(monkeypatch):
    import banditk.sim.protocol as proto
    from banditk.sim.scenario import load_scenario

    real = proto.run_policy

    def flaky(scn, spec, **kw):
        if spec == "ucb":
            raise AttributeError("boom")
        return real(scn, spec, **kw)

    monkeypatch.setattr(proto, "run_policy", flaky)
    cfg = ProtocolConfig.quick_mode(
        points=(2,),
        warmup=20,
        measured=100,
        regret_steps=150,
        convergence_levels=(2, 4),
        convergence_phase_steps=100,
        workers=1,
        include_49548_shape=False,
        policies=("nospec", "fixed:2", "ucb", "bandit"),
    )
    rep = run_protocol(load_scenario(SCN), cfg, progress=False)
    assert rep["errors"] and rep["errors"][0]["policy"] == "ucb" and "boom" in rep["errors"][0]["error"]
    assert "ucb" not in rep["results"]["c2"] and "bandit" in rep["results"]["c2"]


def test_only_bandit_plus_prior_starts_from_the_prior(monkeypatch):
    """docs/evaluation.md: `bandit` is banditk with a flat prior, `bandit+prior` with the shipped one.
    (The sweep used to hand the prior to both, so its `bandit` rows were not flat.)"""
    from banditk.sim import protocol

    seen = {}

    def fake_run_policy(scn, spec, *, prior_path=None, **kw):
        seen[spec] = prior_path
        raise RuntimeError("stop here")

    monkeypatch.setattr(protocol, "run_policy", fake_run_policy)
    for spec in ("bandit", "bandit+prior", "ucb"):
        protocol._job(("point", "c1", None, spec, 0, 10, 0, "priors/some.json"))
    assert seen == {"bandit": None, "bandit+prior": "priors/some.json", "ucb": None}


def test_the_shipped_prior_is_found_by_class_and_whole_hardware_name(tmp_path):
    from banditk.sim.policies import find_shipped_prior
    from banditk.sim.scenario import parse_scenario

    for name in ("mtp-glm5.2-8xh200.json", "mtp-step-x-h200.json", "mtp-qwen3.6-gb10.json"):
        (tmp_path / name).write_text("{}")

    def scn(cls, hw):
        model = "step-3.7-flash-int4" if cls == "mtp-step" else "qwen3.5-122b-a10b-int4"
        return parse_scenario(
            {
                "hardware": hw,
                "model": model,
                "drafter": {"class": cls, "k_max": 2, "acceptance": [0.8, 0.6]},
                "workload": {"concurrency": 8, "prompt_tokens": 512, "output_tokens": 180},
            }
        )

    assert find_shipped_prior(scn("mtp", "gb10"), tmp_path).name == "mtp-qwen3.6-gb10.json"
    assert find_shipped_prior(scn("mtp", "8xh200"), tmp_path).name == "mtp-glm5.2-8xh200.json"
    # h200 is not 8xh200, and mtp-step's prior is not mtp's.
    assert find_shipped_prior(scn("mtp", "h200"), tmp_path) is None
    assert find_shipped_prior(scn("mtp-step", "h200"), tmp_path).name == "mtp-step-x-h200.json"
