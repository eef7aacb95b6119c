"""experiments/live_per_request.py runs on the live sweep's loop: repeats, servers, its checks.

vLLM is not started: the sweep's server and point measurement are replaced by fakes that
record what they were asked for, so the test checks the script's wiring (which once broke
when the sweep's measurement changed its arguments) and its report.
"""

import contextlib
import json
import sys

import pytest
from experiment_scripts import load

pytest.importorskip("vllm")


@pytest.fixture()
def scripts(monkeypatch, tmp_path):
    # By their own names: live_per_request imports live_sweep, whose functions the test replaces.
    live_sweep = load("live_sweep", "live_sweep")
    live_per_request = load("live_per_request", "live_per_request")
    made = []

    def fake_server(policy, args, target, draft):
        run_dir = args.out / "runs" / policy
        run_dir.mkdir(parents=True, exist_ok=True)
        made.append({"policy": policy, "out": args.out, "config": dict(args.governor_config or {})})
        if args.governor_config.get("per_request"):
            (run_dir / "server.log").write_text("bandit K=2 | verified 71% of drafts, n0=3.5\n")
        return contextlib.nullcontext(), run_dir

    # Each run of a point a distinct throughput: the per-request runs 100, 104, 108; the bandit's 100.
    runs = {}

    def fake_point(server, policy, c, args, run_dir, repeat=0):
        runs[policy] = runs.get(policy, -1) + 1
        tput = 100.0 + (4.0 * runs[policy] if policy == "bandit-per-request" else 0.0)
        return {"policy": policy, "concurrency": c, "throughput_tok_s": tput, "tpot_p99_s": 0.05, "num_prompts": 8}

    monkeypatch.setattr(live_sweep, "make_server", fake_server)
    monkeypatch.setattr(live_sweep, "run_point", fake_point)
    monkeypatch.setattr(live_sweep, "plots", lambda points, out: [])
    monkeypatch.setattr(live_per_request, "build_split", lambda args: ("/target", "/draft"))
    return live_per_request, made, tmp_path


def test_repeats_run_every_policy_and_the_report_checks_per_request_against_the_bandit(scripts):
    live_per_request, made, out = scripts
    argv = ["--out", str(out), "--concurrency", "4", "--repeats", "3", "--policies", "bandit,bandit-per-request"]
    assert live_per_request.main(argv) == 0

    assert sorted(p.name for p in (out / "points").iterdir()) == [
        f"{p}__c4__r{r}.json" for p in ("bandit-per-request", "bandit") for r in range(3)
    ]
    # The per-request policy is the bandit served with per_request on, in a folder of its own.
    per_request = [m for m in made if m["config"].get("per_request")]
    assert len(made) == 2 and len(per_request) == 1
    assert per_request[0]["policy"] == "bandit" and per_request[0]["out"] == out / "per-request"

    report = json.loads((out / "report.json").read_text())
    assert report["setup"]["repeats"] == 3
    # 104 / 100; paired by round: 100/100, 104/100, 108/100
    assert report["per_request_vs_bandit"]["C=4"] == pytest.approx(
        {"throughput": 1.04, "tpot_p99": 1.0, "throughput_paired": 1.04}
    )
    check = next(c for c in report["checks"] if c["check"] == "throughput_vs_bandit")
    assert (check["point"], check["status"], check["threshold"]) == ("C=4", "pass", 1.0)
    assert report["per_request_governor"] == {"verified_share": 0.71, "n0": 3.5}


def test_a_slower_per_request_point_fails_its_check(scripts, monkeypatch):
    live_per_request, _, out = scripts
    live_sweep = sys.modules["live_sweep"]

    def slower(server, policy, c, args, run_dir, repeat=0):
        tput = 95.0 if policy == "bandit-per-request" else 100.0
        return {"policy": policy, "concurrency": c, "throughput_tok_s": tput, "tpot_p99_s": 0.05, "num_prompts": 8}

    monkeypatch.setattr(live_sweep, "run_point", slower)
    live_per_request.main(["--out", str(out), "--concurrency", "8", "--policies", "bandit,bandit-per-request"])
    report = json.loads((out / "report.json").read_text())
    check = next(c for c in report["checks"] if c["check"] == "throughput_vs_bandit")
    assert check["status"] == "fail" and check["value"] == pytest.approx(0.95)


def test_a_pinned_per_request_policy_runs_the_inner_bandit_on_one_k_next_to_pinned(scripts, monkeypatch):
    live_per_request, made, out = scripts
    live_sweep = sys.modules["live_sweep"]

    def point(server, policy, c, args, run_dir, repeat=0):
        tput = {"bandit-per-request:2": 90.0, "pinned:2": 100.0}.get(policy, 80.0)
        return {"policy": policy, "concurrency": c, "throughput_tok_s": tput, "tpot_p99_s": 0.05, "num_prompts": 8}

    monkeypatch.setattr(live_sweep, "run_point", point)
    policies = "pinned:2,bandit,bandit-per-request,bandit-per-request:2"
    assert live_per_request.main(["--out", str(out), "--concurrency", "8", "--policies", policies]) == 0
    pinned = next(m for m in made if m["config"].get("k_set"))
    assert pinned["config"]["k_set"] == [2] and pinned["config"]["per_request"] and pinned["policy"] == "bandit"
    assert pinned["out"] == out / "per-request-k2"
    free = next(m for m in made if m["config"].get("per_request") and "k_set" not in m["config"])
    assert free["out"] == out / "per-request"
    report = json.loads((out / "report.json").read_text())
    entry = report["per_request_pinned"]["bandit-per-request:2"]
    assert entry["vs"] == "pinned:2" and entry["throughput_vs"] == {"C=8": pytest.approx(0.9)}
    assert entry["governor"] == {"verified_share": 0.71, "n0": 3.5}
    # Only the free per-request policy is checked against the bandit.
    assert [c["policy"] for c in report["checks"] if c["check"] == "throughput_vs_bandit"] == ["bandit-per-request"]


@pytest.mark.parametrize("policy", ["bandit-per-request:x", "bandit-per-request:9"])
def test_a_bad_pinned_k_is_refused_before_any_server_starts(scripts, policy):
    live_per_request, made, out = scripts
    with pytest.raises(SystemExit, match="bandit-per-request"):
        live_per_request.main(["--out", str(out), "--concurrency", "8", "--policies", f"bandit,{policy}"])
    assert made == []


def test_rounds_rotate_the_policy_order_and_the_paired_ratio_compares_within_a_round(scripts, monkeypatch):
    # The machine doubles its speed from round to round, and the per-request policy is 10% slower
    # in the second round only: the paired ratio is the median of each round's own comparison.
    live_per_request, _, out = scripts
    live_sweep = sys.modules["live_sweep"]
    order, rounds = [], {}

    def drifting(server, policy, c, args, run_dir, repeat=0):
        order.append(policy)
        r = rounds[policy] = rounds.get(policy, -1) + 1
        tput = 100.0 * 2**r * (0.9 if policy == "bandit-per-request" and r == 1 else 1.0)
        return {"policy": policy, "concurrency": c, "throughput_tok_s": tput, "tpot_p99_s": 0.05, "num_prompts": 8}

    monkeypatch.setattr(live_sweep, "run_point", drifting)
    argv = ["--out", str(out), "--concurrency", "4", "--repeats", "2", "--policies", "bandit,bandit-per-request"]
    live_per_request.main(argv)
    assert order == ["bandit", "bandit-per-request", "bandit-per-request", "bandit"]
    ratio = json.loads((out / "report.json").read_text())["per_request_vs_bandit"]["C=4"]
    assert ratio["throughput"] == pytest.approx((100 + 180) / (100 + 200))  # medians of 2 runs: their means
    assert ratio["throughput_paired"] == pytest.approx((1.0 + 0.9) / 2)
