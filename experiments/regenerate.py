"""Regenerate every report under results/ and the README's results block with the code in this tree.

    python experiments/regenerate.py                 # full mode: every report, as committed (hours)
    python experiments/regenerate.py --quick         # every step at smoke size, into .cache/results-quick/
    python experiments/regenerate.py --list          # the steps: what each runs and writes
    python experiments/regenerate.py --only sweep-49548,regret --dry-run

Each step runs one experiment script as a subprocess, one at a time, in dependency order
(the live sweep before sim-vs-real, which calibrates on its telemetry; sim-vs-real before the
priors report, whose CPU prior reads its profile). A failing step is reported and the run goes
on; the exit code is 1 if any step failed. Every step's output is also logged to
.cache/regenerate/<mode>/<step>.log. Last, experiments/readme_results.py rewrites README.md's
results block and docs/results.md, and experiments/docs_quotes.py the numbers docs/ quotes, from the
reports (--no-readme leaves them).

After a step, a report that records no provenance gets the tree's, taken before the step ran.
A step's reports are also stamped with the hash of the banditk/ modules its script can import
(experiments/source_closure.py; a step that starts vLLM adds the plugin's entry points), so an
adapter change leaves simulator reports current and a simulator change leaves live reports
current; --stamp stamps reports made before stamps existed, when this tree's banditk/ made them.

Full mode writes where the committed reports live, with the arguments they were made with.
Quick mode never touches results/: it writes under .cache/results-quick/ (git ignores .cache/),
with each script's --quick or shorter runs and one worker process, so a smoke run cannot
overwrite a committed report; its README block is printed, not written. Steps marked `vllm`
start real vLLM (the `cpu` extra) and are left out by --skip-live; `pyro` steps need the `fit`
extra. The shipped priors in
priors/ are inputs: the priors step reruns their regret check; --refit-priors (full mode only)
also records vLLM-CPU telemetry and refits every shipped prior first.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This tree's banditk, not whichever an editable install points at (another checkout's).
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import live_judge  # noqa: E402
import source_closure  # noqa: E402

from banditk.io.provenance import provenance  # noqa: E402

SCENARIOS = ROOT / "experiments" / "scenarios"
QUICK_ROOT = Path(".cache/results-quick")
LOG_ROOT = Path(".cache/regenerate")
#: What each `needs` tag means, and how to get it.
NEEDS = {
    "vllm": (
        "vllm",
        "real vLLM on CPU: `make .venv/.banditk-full` installs the `cpu` extra; --skip-live leaves it out",
    ),
    "pyro": ("pyro", "Pyro for `banditk fit`: `pip install -e '.[fit]'` (the `fit` extra)"),
}


@dataclass(frozen=True)
class Step:
    """One experiment script run: where its output goes in full mode and how it runs in quick mode.

    Attributes:
        name: the step's name for --only.
        script: the script, relative to the repository root.
        full: arguments in full mode (the committed reports' own).
        quick: arguments in quick mode, with ``{q}`` for the scratch folder; None: not run in quick mode.
        writes: what full mode writes, relative to the root.
        needs: tags of NEEDS the step requires.
        minutes: full-mode minutes when the committed report has no ``wall_s``; None if unknown.
        note: why the step is as it is, for --list.
        scope: the scripts whose import closure (:mod:`source_closure`) holds every banditk/
            source the report depends on; its reports are stamped with that closure's hash,
            so only a change inside it makes them stale. A step that starts vLLM adds the
            plugin's entry-point modules. None: the whole of banditk/.
        judged: modules of the scope that only judge the measurement (live_judge.JUDGE_MODULES):
            left out of the stamp, since the report's verdicts carry their own (``judged_by``).
        reports: False for a step that writes pages or re-judges, not reports to stamp.
    """

    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...] | None
    writes: str
    needs: tuple[str, ...] = ()
    minutes: float | None = None
    note: str = ""
    scope: tuple[str, ...] | None = None
    judged: tuple[str, ...] = ()
    reports: bool = True

    def argv(self, quick: bool, quick_root: Path) -> list[str] | None:
        """The command line of this step, or None when the mode leaves it out."""
        args = self.quick if quick else self.full
        if args is None:
            return None
        return [sys.executable, self.script, *(a.format(q=quick_root) for a in args)]

    def full_minutes(self) -> tuple[float | None, str]:
        """Full-mode minutes: the committed report's ``wall_s`` where it has one, else the estimate."""
        path = ROOT / self.writes
        path = path / "report.json" if path.is_dir() else path
        try:
            wall = json.loads(path.read_text()).get("wall_s")
        except (OSError, ValueError, AttributeError):
            wall = None
        if isinstance(wall, int | float):
            return wall / 60, "wall_s"
        return self.minutes, "estimate"


def sweep_scenarios() -> list[Path]:
    """The shipped scenarios the closed-loop protocol runs on.

    An open-loop scenario (``workload.arrival_rate``) is left out: the protocol replaces the
    workload with its closed-loop points, so it would repeat the sweep of the scenario it was
    made from (open-loop-gb10 is #49548's setup; repro_49548.py runs it open-loop).
    """
    out = []
    for path in sorted(SCENARIOS.glob("*.json")):
        workload = json.loads(path.read_text()).get("workload", {})
        if "arrival_rate" not in workload:
            out.append(path)
    return out


def sim_steps() -> list[Step]:
    """The simulator's reports: numpy and scipy only, minutes each."""
    steps = [
        Step("repro-49548", "experiments/repro_49548.py", ("--out", "results/repro-49548"),
             ("--quick", "--workers", "1", "--out", "{q}/repro-49548"), "results/repro-49548"),
        Step("repro-49986", "experiments/repro_49986.py", ("--out", "results/repro-49986"),
             ("--quick", "--workers", "1", "--out", "{q}/repro-49986"), "results/repro-49986", minutes=1,
             note="K=3 vs no speculation by context length (H100 NVL, Gemma-4-31B FP8, c=256)"),
        Step("context-mix", "experiments/context_mix.py", ("--out", "results/context-mix"),
             ("--quick", "--workers", "1", "--out", "{q}/context-mix"), "results/context-mix", minutes=4,
             note="bandit+context against bandit where the context moves (H100 NVL, Gemma-4-31B FP8)"),
        Step("per-request-sim", "experiments/per_request_sim.py", ("--out", "results/per-request-sim"),
             ("--quick", "--workers", "1", "--out", "{q}/per-request-sim"), "results/per-request-sim", minutes=20,
             note="bandit-per-request against bandit and vLLM's adaptive verification on mixed requests"),
        Step("data-parallel", "experiments/dp_sweep.py", ("--out", "results/data-parallel"),
             ("--quick", "--workers", "1", "--out", "{q}/data-parallel"), "results/data-parallel", minutes=20,
             note="ranks in lockstep with unequal loads, one K per step (the largest vote), against the best fixed K"),
        Step("graph-ladders", "experiments/graph_ladders.py", ("--with-gpu-wheel", "--out", "results/graph-ladders"),
             ("--out", "{q}/graph-ladders"), "results/graph-ladders", minutes=1,
             note="MRv2's decode ladders under banditk's table, vLLM #56136's shadowing before and after the mend"),
        Step("calibrate-cpu", "experiments/calibrate_cpu.py", ("--out", "results/calibrate-cpu"),
             ("--out", "{q}/calibrate-cpu"), "results/calibrate-cpu", minutes=1),
    ]  # fmt: skip
    for path in sweep_scenarios():
        name = f"sweep-{path.stem}"
        scenario = str(path.relative_to(ROOT))
        steps.append(
            Step(name, "experiments/sweep.py", ("--scenario", scenario, "--out", f"results/{name}"),
                 ("--scenario", scenario, "--quick", "--workers", "1", "--out", f"{{q}}/{name}"), f"results/{name}")
        )  # fmt: skip
    steps += [
        Step("regret", "experiments/regret.py", ("--out", "results/regret"),
             ("--scenario", "experiments/scenarios/49548.json", "--steps", "2000", "--workers", "1",
              "--out", "{q}/regret"),
             "results/regret", note="every shipped scenario, open-loop included, 1 seed"),
        Step("tradeoff-switching", "experiments/tradeoff_switching.py", ("--out", "results/tradeoff_switching.json"),
             ("--steps", "1200", "--seeds", "1", "--out", "{q}/tradeoff_switching.json"),
             "results/tradeoff_switching.json", minutes=3),
        Step("soak", "experiments/soak.py", ("--out", "results/soak.json"),
             ("--steps", "20000", "--requests", "2000", "--out", "{q}/soak.json"), "results/soak.json"),
        Step("noisy-clock", "experiments/noisy_clock.py", ("--out", "results/noisy-clock"),
             ("--quick", "--out", "{q}/noisy-clock"), "results/noisy-clock",
             note="the live-clock-cpu scenario's noisy step clock, at the live sweep's points"),
        Step("noisy-clock-unspaced", "experiments/noisy_clock.py",
             ("--governor-config", '{{"revisit_spacing": 1}}', "--out", "results/noisy-clock-unspaced"),
             ("--quick", "--governor-config", '{{"revisit_spacing": 1}}', "--out", "{q}/noisy-clock-unspaced"),
             "results/noisy-clock-unspaced", minutes=2,
             note="the same without spacing revisits: the contrast that shows what the spacing does"),
        Step("noisy-clock-long", "experiments/noisy_clock.py",
             ("--scenario", "experiments/scenarios/context/live-clock-cpu-long.json", "--concurrency", "2,4,8",
              "--out", "results/noisy-clock-long"),
             ("--quick", "--scenario", "experiments/scenarios/context/live-clock-cpu-long.json", "--concurrency", "4",
              "--out", "{q}/noisy-clock-long"),
             "results/noisy-clock-long", minutes=4,
             note="the same clock with 3,000-token prompts in two chunks: steps next to a chunk (issues 17, 18)"),
        Step("oscillation-actions", "experiments/oscillation_actions.py", ("--out", "results/oscillation-actions"),
             ("--quick", "--workers", "1", "--out", "{q}/oscillation-actions"), "results/oscillation-actions",
             minutes=4, note="the sweeps' failing oscillation checks rerun, each oscillation split by the governor's "
             "action (after the sweeps: it reads them)"),
    ]  # fmt: skip
    # None of them starts vLLM or reads a vLLM run: their scripts' imports are their sources.
    return [dataclasses.replace(s, scope=(s.script,)) for s in steps]


#: The live sweep's points in rounds: the protocol's 60 s and 32 requests a point, as 3 runs of at
#: least 20 s and 11 requests, each round over every policy (docs/evaluation.md).
LIVE_ROUNDS = ("--repeats", "3", "--min-seconds", "20", "--min-requests", "11")


def live_steps() -> list[Step]:
    """Real vLLM on this machine, and the simulator calibrated on it.

    A vLLM server imports banditk through the plugin's entry points besides whatever the sweep
    script imports, so both are the scope; sim-vs-real and acceptance-by-k read the live
    sweep's telemetry, so the live sweep's scope is part of theirs.
    """
    served = ("experiments/live_sweep.py", *source_closure.vllm_entry_points())
    steps = [
        Step("live", "experiments/live_sweep.py", ("--fresh", "--out", "results/live", *LIVE_ROUNDS),
             ("--quick", "--fresh", "--out", "{q}/live", "--repeats", "2"), "results/live", needs=("vllm",), minutes=70,
             note="--fresh: finished points of an earlier run (older code) are not reused; each point in "
                  "3 rounds of 20 s over the policies, so the machine's drift falls on all of them alike"),
        Step("sim-vs-real", "experiments/sim_vs_real.py", ("--live", "results/live", "--out", "results/sim-vs-real"),
             ("--live", "{q}/live", "--seeds", "1", "--out", "{q}/sim-vs-real"), "results/sim-vs-real",
             needs=("vllm",), minutes=5,
             note="calibrates on the live sweep's telemetry (results/live/runs/, not committed)"),
        Step("acceptance-by-k", "experiments/acceptance_by_k.py", ("--out", "results/acceptance-by-k"),
             ("--live", "{q}/live", "--out", "{q}/acceptance-by-k"), "results/acceptance-by-k",
             needs=("vllm",), minutes=0.2,
             note="acceptance per position by the K it was drafted under, from the live sweep's telemetry"),
        *(Step(f"live-context-{kind}", "experiments/live_sweep.py",
               ("--fresh", "--out", f"results/live-context-{kind}", *CONTEXT_POINT, *args),
               ("--quick", "--fresh", "--out", f"{{q}}/live-context-{kind}", *args[:2]),
               f"results/live-context-{kind}", needs=("vllm",), minutes=minutes,
               note=f"{kind} prompts at concurrency 4, next to the other one (issue 17)")
          for kind, args, minutes in (
              ("short", ("--input-len", "128"), 30),
              ("long", ("--input-len", "3000", "--max-model-len", "4096", "--kv-cache-mb", "768"), 35),
          )),
        Step("live-context-fit", "experiments/live_context_fit.py", (), ("--short", "{q}/live-context-short",
             "--long", "{q}/live-context-long", "--out", "{q}/live-context-fit"), "results/live-context-fit",
             needs=("pyro",), minutes=3,
             note="a prior with context buckets fitted from the two context points' telemetry (issue 17)"),
        Step("live-context-short-r7", "experiments/live_sweep.py",
             ("--fresh", "--out", "results/live-context-short-r7", "--concurrency", "4", "--output-len", "200",
              "--min-requests", "16", "--input-len", "128", "--policies", R7_POLICIES, "--repeats", "7"),
             ("--quick", "--fresh", "--out", "{q}/live-context-short-r7", "--policies", R7_POLICIES, "--repeats", "2"),
             "results/live-context-short-r7", needs=("vllm",), minutes=50,
             note="the short point again in 7 rounds: at 3 a governor as fast as the best fixed K fails its "
             "check 15% of the time (results/live-noise)"),
        Step("live-c1-recheck", "experiments/live_sweep.py",
             ("--fresh", "--out", "results/live-c1-recheck", "--concurrency", "1", "--policies", C1_POLICIES),
             ("--quick", "--fresh", "--out", "{q}/live-c1-recheck", "--concurrency", "1", "--policies", C1_POLICIES),
             "results/live-c1-recheck", needs=("vllm",), minutes=10,
             note="C=1 alone, the plugin pinned to K=3 next to vLLM's K=3: is the sweep's C=1 gap plumbing or choice"),
        Step("live-recheck", "experiments/live_sweep.py",
             ("--fresh", "--out", "results/live-recheck", "--concurrency", "2,16", "--policies", RECHECK_POLICIES,
              "--repeats", "3"),
             ("--quick", "--fresh", "--out", "{q}/live-recheck", "--concurrency", "2", "--policies", RECHECK_POLICIES,
              "--repeats", "2"),
             "results/live-recheck", needs=("vllm",), minutes=50,
             note="the sweep's failing points (C=2, 16) again, each the median of 3 runs (issue 18)"),
        Step("live-per-request", "experiments/live_per_request.py", ("--fresh", "--repeats", "3"),
             ("--quick", "--fresh", "--out", "{q}/live-per-request", "--repeats", "2"), "results/live-per-request",
             needs=("vllm",), minutes=75,
             note="the split pair (requests accepting 90% and 30%), bandit-per-request next to bandit, each point "
             "the median of 3 runs (issue 16)"),
    ]  # fmt: skip
    return [
        dataclasses.replace(
            s,
            scope=(*dict.fromkeys((s.script, *served)),),
            judged=live_judge.JUDGE_MODULES if s.script == LIVE_SWEEP else (),
        )
        for s in steps
    ]


#: The script whose reports experiments/live_judge.py judges.
LIVE_SWEEP = "experiments/live_sweep.py"


def live_judge_step() -> Step:
    """Every live sweep report's verdicts made again from its points by this tree's checks: seconds,
    where a new sweep takes hours (experiments/live_judge.py)."""
    judged = tuple(s.writes for s in live_steps() if s.script == LIVE_SWEEP)
    return Step("live-judge", "experiments/live_judge.py", judged, None, "", minutes=0.05, reports=False,
                note="after a change to banditk/evaluation.py; the measurements stay as made")  # fmt: skip


def overhead_step() -> Step:
    """The governor's CPU cost per step: synthetic, and in a real vllm-cpu engine (which imports
    banditk through the plugin's entry points too)."""
    script = "experiments/bench_overhead.py"
    return Step("overhead", script, ("--engine", "--out", "results/overhead"),
                ("--steps", "2000", "--warmup", "500", "--repeats", "1", "--engine", "--rounds", "2", "--out", "{q}/overhead"),
                "results/overhead", needs=("vllm",), minutes=4, note="timings: nothing else should run meanwhile",
                scope=(script, *source_closure.vllm_entry_points()))  # fmt: skip


def live_noise_step() -> Step:
    """The repeated live reports re-read against the machine's noise: no vLLM, after them."""
    return Step("live-noise", "experiments/live_noise.py", ("--out", "results/live-noise"),
                ("--draws", "500", "--out", "{q}/live-noise"), "results/live-noise", minutes=0.1,
                note="each repeated live point's verdict against the machine's run-to-run noise",
                scope=("experiments/live_noise.py",))  # fmt: skip


#: The short context point's policies for its 7-round rerun: the checks' own (no bandit+context).
R7_POLICIES = "nospec,fixed:1,fixed:2,fixed:3,bandit"
#: The C=1 recheck's policies: vLLM's static K=3 and K=2, its table, the plugin pinned to K=3, the bandit.
C1_POLICIES = "fixed:3,pinned:3,table:[[1,4,3],[5,256,0]],fixed:2,bandit"
#: The recheck's policies: those the sweep's failing checks at C=2 and 16 compare.
RECHECK_POLICIES = "nospec,fixed:1,fixed:2,table:[[1,4,3],[5,256,0]],bandit,bandit+prior"

#: The live context points: the same concurrency, policies and output length for short and long
#: prompts, each the median of 3 runs (one run of fixed:2 and fixed:3 differed by 3.5%).
CONTEXT_POINT = (
    "--concurrency", "4", "--output-len", "200", "--min-requests", "16",
    "--policies", "nospec,fixed:1,fixed:2,fixed:3,bandit,bandit+context", "--repeats", "3",
)  # fmt: skip


def prior_steps(refit: bool) -> list[Step]:
    """The shipped priors' report (and, with ``refit``, the priors themselves), their README, fit speed."""
    steps = []
    if refit:
        steps.append(
            Step("cpu-prior-fit", "experiments/cpu_prior.py", ("--out", "results/priors/cpu"), None,
                 "priors/draft_model-cyclic-4x1024-cpu-2core.json", needs=("vllm", "pyro"), minutes=60,
                 note="records vLLM-CPU telemetry and refits the CPU prior")
        )  # fmt: skip
    priors_full = ("--out", "results/priors") if refit else ("--skip-fit", "--out", "results/priors")
    steps += [
        Step("priors", "experiments/make_priors.py", priors_full,
             ("--skip-fit", "--rows", "mtp-qwen3.6", "--hardware", "gb10", "--seeds", "1", "--out", "{q}/priors"),
             "results/priors", needs=("pyro",) if refit else (), minutes=240 if refit else 15,
             note=("refits every shipped prior, then " if refit else "")
             + "the regret check of the shipped priors, the CPU prior's included (results/priors/cpu)"),
        Step("priors-readme", "experiments/priors_readme.py", (), None, "priors/README.md", minutes=0.1,
             note="full mode only: it writes priors/README.md from results/priors"),
        Step("fit-speed", "experiments/fit_speed.py", ("--out", "results/priors/fit_speed.json"),
             ("--steps", "5000", "--out", "{q}/priors/fit_speed.json"), "results/priors/fit_speed.json",
             needs=("pyro",), minutes=1.7, note="timings: nothing else should run meanwhile"),
    ]  # fmt: skip
    return steps


def readme_step() -> Step:
    """The README's results block and docs/results.md; quick mode prints both from the scratch reports."""
    return Step(
        "readme",
        "experiments/readme_results.py",
        (),
        ("--results", "{q}", "--print"),
        "README.md",
        minutes=0.01,
        reports=False,
    )


def docs_step() -> Step:
    """The numbers docs/ quotes from the reports (experiments/docs_quotes.py); not in quick mode,
    which leaves results/ as committed."""
    return Step("docs", "experiments/docs_quotes.py", (), None, "docs", minutes=0.01, reports=False)


#: The steps that rewrite pages from whatever reports a run remade; --no-readme leaves them out.
PAGE_STEPS = ("readme", "docs")


def plan(refit_priors: bool = False) -> list[Step]:
    """Every step in the order it runs: producers before the steps that read their output."""
    return [
        *live_steps(),
        live_noise_step(),
        *prior_steps(refit_priors),
        *sim_steps(),
        overhead_step(),
        live_judge_step(),
        readme_step(),
        docs_step(),
    ]


def step_for(report: str) -> str | None:
    """The step whose full-mode output holds ``report`` (relative to the root); the closest output wins."""
    owners = [s for s in plan() if s.reports and (report == s.writes or report.startswith(s.writes + "/"))]
    return max(owners, key=lambda s: len(s.writes)).name if owners else None


def select(steps: list[Step], only: str | None, skip_live: bool, no_readme: bool) -> list[Step]:
    """The steps a run keeps: --only patterns (fnmatch), less vLLM steps and the readme when asked.

    Raises:
        ValueError: a pattern of --only names no step; the message lists the steps.
    """
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        unknown = [p for p in patterns if not any(fnmatch.fnmatch(s.name, p) for s in steps)]
        if unknown:
            names = ", ".join(s.name for s in steps)
            raise ValueError(f"--only {','.join(unknown)}: no such step; the steps are: {names}")
        keep = [s for s in steps if any(fnmatch.fnmatch(s.name, p) for p in patterns)]
        # The README block and the docs' quotes follow whatever reports a run remade.
        steps = keep + [s for s in steps if s.name in PAGE_STEPS and s not in keep]
    if skip_live:
        steps = [s for s in steps if "vllm" not in s.needs]
    if no_readme:
        steps = [s for s in steps if s.name not in PAGE_STEPS]
    return steps


def missing_needs(step: Step) -> list[str]:
    """The step's needs whose module this Python cannot import."""
    return [n for n in step.needs if importlib.util.find_spec(NEEDS[n][0]) is None]


def fmt_minutes(m: float | None) -> str:
    """Minutes for a table: one decimal under ten, whole above."""
    if m is None:
        return "?"
    return f"{m:.1f}" if m < 10 else f"{m:.0f}"


def print_list(steps: list[Step], quick_root: Path) -> None:
    """The step table: name, needs, full-mode minutes and source, what it writes, both commands."""
    total, unknown = 0.0, 0
    for i, s in enumerate(steps, 1):
        minutes, source = s.full_minutes()
        total += minutes or 0.0
        unknown += minutes is None
        needs = ",".join(s.needs) or "-"
        print(f"{i:>2}. {s.name:<32} needs {needs:<10} ~{fmt_minutes(minutes):>4} min ({source})  writes {s.writes}")
        for mode, quick in (("full", False), ("quick", True)):
            argv = s.argv(quick, quick_root)
            print(f"      {mode:<5} {shlex.join(argv[1:]) if argv else '(not run)'}")
        if s.note:
            print(f"      note  {s.note}")
    print(f"full mode: about {total / 60:.1f} h on the 2-core box the committed reports were made on", end="")
    print(f", plus {unknown} step(s) of unknown length" if unknown else "")


def print_dry_run(steps: list[Step], quick: bool, quick_root: Path) -> None:
    """The commands a run would execute, in order, with what each needs."""
    for i, s in enumerate(steps, 1):
        argv = s.argv(quick, quick_root)
        command = shlex.join(["python", *argv[1:]]) if argv else "(not run in this mode)"
        needs = f"  [needs {','.join(s.needs)}]" if s.needs else ""
        print(f"[{i}/{len(steps)}] {s.name}: {command}{needs}")


def run_logged(argv: list[str], log: Path) -> int:
    """Run ``argv`` in the root, its output to the terminal and to ``log``; return its exit code."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    # Each step imports this tree's banditk: a script that does not put the root on its path
    # would get the editable install's, which may be another checkout, and make its reports.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    with (
        log.open("wb") as f,
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc,
    ):
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            f.write(chunk)
    return proc.returncode


def log_tail(log: Path, lines: int = 5) -> list[str]:
    """The last non-blank lines of a step's log; a progress bar's carriage returns end lines too."""
    try:
        text = log.read_text(errors="replace").replace("\r", "\n")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def stamp_reports(step: Step, made_by: dict | None = None) -> list[Path]:
    """Stamp the step's JSON reports with what made them; return the files changed.

    Args:
        step: the step whose ``writes`` holds the reports.
        made_by: the tree's provenance taken before the step ran. A report that records none
            gets it, when the tree is still the same: then it is what made the report.

    A report made by this tree's banditk/ from a clean tree is also stamped with the hash of
    the step's scope's import closure: the closure hashed now is the closure that made it.
    A report made from uncommitted banditk/ sources that were then committed unchanged (its
    ``sources_sha256`` is this clean tree's) is made by this commit's sources: it gets this
    commit, ``dirty`` false, and keeps the commit it was started on as ``started_on_dirty``.
    A report from a clean earlier commit with no stamp gets the closure of that commit.
    """
    from banditk.io.atomic import atomic_write_text

    if not step.reports:  # a page or a judgement: nothing under it is a report
        return []
    now = provenance()
    made_by = made_by if made_by == now else None
    stamp, out = None, []
    target = ROOT / step.writes
    for path in sorted(target.rglob("*.json")) if target.is_dir() else [target] if target.is_file() else []:
        text = path.read_text()
        try:
            report = json.loads(text)
        except ValueError:
            continue
        if not isinstance(report, dict):
            continue
        changed = "provenance" not in report and made_by is not None
        if changed:
            report["provenance"] = dict(made_by)
        made = report.get("provenance")
        same_sources = isinstance(made, dict) and made.get("sources_sha256") == now["sources_sha256"]
        if same_sources and made.get("dirty") is True and now["dirty"] is False:
            made["started_on_dirty"], made["commit"], made["dirty"] = made.get("commit"), now["commit"], False
            changed = True
        ours = same_sources and made.get("dirty") is False
        if not ours and step.scope is not None and _clean_stamp_due(made, now["commit"], step.judged):
            # Made by a clean earlier commit (the tree moved on outside the step's closure while
            # it ran), or stamped before the step left its judging modules out: stamp the
            # closure of that commit, which the staleness check compares.
            at = source_closure.stamp_at(made["commit"], step.scope, made.get("sources_sha256"), exclude=step.judged)
            if at is not None:
                made["closure"], changed = at, True
        if ours and step.scope is not None:
            stamp = stamp or source_closure.stamp_for(step.scope, exclude=step.judged)
            changed |= made.get("closure") != stamp
            made["closure"] = stamp
        if changed:
            atomic_write_text(path, dumps_like(report, text))
            out.append(path)
    return out


def _clean_stamp_due(made: object, commit_now: str, judged: tuple[str, ...] = ()) -> bool:
    """A report's provenance from a clean tree of another known commit whose closure stamp is
    missing, or does not leave out the step's judging modules (``judged``)."""
    if not (
        isinstance(made, dict)
        and made.get("dirty") is False
        and made.get("commit") not in (None, "unknown", commit_now)
    ):
        return False
    stamp = made.get("closure")
    return not isinstance(stamp, dict) or stamp.get("excluded", []) != list(judged)


def dumps_like(report: dict, text: str) -> str:
    """``report`` serialised as ``text`` was: a protocol report keeps its layout (indented near
    the top, compact below: banditk/sim/report.py), any other JSON its indent."""
    from banditk.sim.report import report_json

    if text == report_json(json.loads(text)) + "\n":
        return report_json(report) + "\n"
    return json.dumps(report, indent=json_indent(text)) + "\n" * text.endswith("\n")


def json_indent(text: str) -> int | None:
    """The indent of a JSON text (its second line's leading spaces); None for one line."""
    lines = text.splitlines()
    return len(lines[1]) - len(lines[1].lstrip(" ")) if len(lines) > 1 else None


def run_steps(steps: list[Step], quick: bool, quick_root: Path) -> list[tuple[Step, str, float]]:
    """Run each step in turn; a failure is recorded and the next step runs. Returns (step, status, seconds)."""
    mode = "quick" if quick else "full"
    t_start = time.monotonic()
    done = []
    for i, s in enumerate(steps, 1):
        argv = s.argv(quick, quick_root)
        head = f"[{i}/{len(steps)} {(time.monotonic() - t_start) / 60:5.1f} min]"
        if argv is None:
            print(f"{head} {s.name}: skipped (full mode only)", flush=True)
            done.append((s, "skipped: full mode only", 0.0))
            continue
        missing = missing_needs(s)
        if missing:
            why = "; ".join(NEEDS[n][1] for n in missing)
            print(f"{head} {s.name}: FAILED, needs {','.join(missing)}: {why}", flush=True)
            done.append((s, f"FAILED: needs {','.join(missing)}", 0.0))
            continue
        print(f"{head} {s.name}: {shlex.join(['python', *argv[1:]])}", flush=True)
        log = ROOT / LOG_ROOT / mode / f"{s.name}.log"
        t0 = time.monotonic()
        made_by = None if quick else provenance()
        try:
            rc = run_logged(argv, log)
        except KeyboardInterrupt:  # the step got the interrupt too; the summary still says what ran
            done.append((s, "FAILED: interrupted", time.monotonic() - t0))
            print(f"{head} {s.name}: interrupted; the steps after it did not run", flush=True)
            return done
        secs = time.monotonic() - t0
        status = "ok" if rc == 0 else f"FAILED: exit {rc}, log {log.relative_to(ROOT)}"
        if rc == 0 and not quick and s.reports:
            stamped = stamp_reports(s, made_by)
            status += f", {len(stamped)} report(s) stamped with what made them" if stamped else ""
        print(f"{head} {s.name}: {status} in {secs / 60:.1f} min", flush=True)
        for line in log_tail(log) if rc != 0 else []:
            print(f"    | {line}", flush=True)
        done.append((s, status, secs))
    return done


def print_summary(done: list[tuple[Step, str, float]], wall: float) -> None:
    """One line per step: status and minutes; then the total."""
    print("\nregenerate: summary")
    for s, status, secs in done:
        print(f"  {s.name:<32} {secs / 60:6.1f} min  {status}")
    failed = sum(status.startswith("FAILED") for _, status, _ in done)
    print(f"{len(done)} steps, {failed} failed, {wall / 60:.1f} min")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="experiments/regenerate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--full", dest="quick", action="store_false", help="full mode, into results/ (the default)")
    mode.add_argument("--quick", action="store_true", help="smoke size, into --quick-root; never writes results/")
    p.add_argument("--only", metavar="NAME[,NAME]", help="run these steps only (patterns, e.g. 'sweep-*'); see --list")
    p.add_argument("--skip-live", action="store_true", help="leave out the steps that start vLLM (marked vllm)")
    p.add_argument("--refit-priors", action="store_true", help="full mode: refit the shipped priors in priors/ too")
    p.add_argument(
        "--no-readme",
        action="store_true",
        help="do not rewrite README.md's results block, docs/results.md and the docs' quotes afterwards",
    )
    p.add_argument("--list", action="store_true", help="list the steps (commands, outputs, minutes) and exit")
    p.add_argument("--dry-run", action="store_true", help="print the commands the run would execute and exit")
    p.add_argument(
        "--stamp",
        action="store_true",
        help="run nothing: stamp the selected steps' committed reports that this tree's banditk/ made "
        "with their sources' closure (a report made before stamps existed)",
    )
    p.add_argument(
        "--quick-root", type=Path, default=QUICK_ROOT, help=f"quick mode's output folder (default {QUICK_ROOT})"
    )
    p.set_defaults(quick=False)  # --full's store_false would otherwise make quick the default
    args = p.parse_args(argv)
    if args.refit_priors and args.quick:
        p.error("--refit-priors writes the shipped priors in priors/: full mode only")
    if args.stamp and args.quick:
        p.error("--stamp stamps the committed reports under results/: full mode only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steps = plan(args.refit_priors)
    if args.list:
        print_list(steps, args.quick_root)
        return 0
    try:
        steps = select(steps, args.only, args.skip_live, args.no_readme)
    except ValueError as e:
        print(f"regenerate: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print_dry_run(steps, args.quick, args.quick_root)
        return 0
    if args.stamp:
        for s in steps:
            for path in stamp_reports(s) if s.reports else []:
                print(f"{s.name}: stamped {path.relative_to(ROOT)}")
        return 0
    t0 = time.monotonic()
    done = run_steps(steps, args.quick, args.quick_root)
    print_summary(done, time.monotonic() - t0)
    return 1 if any(status.startswith("FAILED") for _, status, _ in done) else 0


if __name__ == "__main__":
    sys.exit(main())
