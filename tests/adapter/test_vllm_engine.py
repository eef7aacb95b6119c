"""The governor inside a real vLLM engine on CPU (in-process layout), with tiny local models.

Engines are shared per module: one ungoverned reference, one governed engine whose
policy is swapped between tests, then short-lived ones for start-up paths.
"""

import contextlib
import time

import numpy as np
import pytest
from hand_scheduler import answer, async_scheduler

pytestmark = pytest.mark.vllm

K_MAX = 3
PROMPTS = [
    "def main(argv):",
    "import os\nimport sys",
    "class Foo(object):",
    "for i in range(10):",
    "return None",
    "with open(path) as f:",
]
MAX_TOKENS = 40


def spec(tiny_pair, **extra):
    return {"method": "draft_model", "model": tiny_pair.draft, "num_speculative_tokens": K_MAX, **extra}


def generate(llm, prompts, max_tokens=MAX_TOKENS):
    from vllm import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, sp, use_tqdm=False)]


@pytest.fixture(scope="module")
def reference(vllm_cpu, tiny_pair):
    """Ungoverned K=3 outputs and vLLM's acceptance counters (batch, then one request)."""
    from banditk.testing.engines import metrics_delta, spec_metrics, tiny_llm

    with tiny_llm(tiny_pair.target, spec(tiny_pair)) as llm:
        assert "banditk" not in llm.llm_engine.vllm_config.additional_config
        assert llm.llm_engine.vllm_config.scheduler_config.scheduler_cls is None
        batch = generate(llm, PROMPTS)
        m0 = spec_metrics(llm)
        single = generate(llm, PROMPTS[:1], 64)
        single_metrics = metrics_delta(m0, spec_metrics(llm))
    return {"batch": batch, "single": single, "single_metrics": single_metrics}


@pytest.fixture(scope="module")
def governed(vllm_cpu, tiny_pair, tmp_path_factory):
    from banditk.testing.engines import tiny_llm

    d = tmp_path_factory.mktemp("governed")
    cfg = {
        "snapshot_path": str(d / "snapshot.json"),
        "snapshot_interval_s": 0,
        "telemetry_log": str(d / "steps.jsonl"),
        "state_log_interval_s": 1,
        "seed": 0,
        "fallback_k": 2,
    }
    with tiny_llm(tiny_pair.target, spec(tiny_pair, governor="bandit", governor_config=cfg)) as llm:
        yield llm, d


def runtime(llm):
    from banditk.testing.engines import scheduler

    return scheduler(llm).banditk


@contextlib.contextmanager
def swapped_policy(rt, policy):
    """Run the engine with ``policy`` in place of its governor, then put the governor back."""
    old, rt.policy = rt.policy, policy
    try:
        yield old
    finally:
        rt.policy = old


def test_reference_follows_the_cyclic_map(reference, tiny_pair, vllm_cpu):
    from transformers import AutoTokenizer

    from banditk.testing.engines import greedy_chain

    tok = AutoTokenizer.from_pretrained(tiny_pair.target)
    for prompt, out in zip(PROMPTS, reference["batch"]):
        last = tok(prompt)["input_ids"][-1]
        assert out == greedy_chain(tiny_pair.next_token, last, MAX_TOKENS)


def test_plugin_selects_governed_scheduler(governed):
    from banditk.adapter.scheduler import GovernedScheduler
    from banditk.testing.engines import scheduler

    llm, _ = governed
    cfg = llm.llm_engine.vllm_config
    assert isinstance(scheduler(llm), GovernedScheduler)
    assert cfg.speculative_config.num_speculative_tokens_per_batch_size == [(1, 16, K_MAX)] or [
        list(x) for x in cfg.speculative_config.num_speculative_tokens_per_batch_size
    ] == [[1, 16, K_MAX]]
    assert cfg.additional_config["banditk"]["governor"] == "bandit"
    assert cfg.additional_config["banditk"]["k_max"] == K_MAX


def test_bandit_greedy_output_equals_ungoverned(governed, reference):
    llm, _ = governed
    rt = runtime(llm)
    errors0, calls0 = dict(rt.telemetry.errors), rt.select_calls  # other tests of the module inject faults
    assert generate(llm, PROMPTS) == reference["batch"]
    added = {kind: n - errors0.get(kind, 0) for kind, n in rt.telemetry.errors.items() if n > errors0.get(kind, 0)}
    # A call over the time budget on a loaded machine is the breaker at work (test_runtime
    # tests it; a clean-clone run with two fits beside it hit one); any other error is a fault.
    assert rt.select_calls > calls0 and set(added) <= {"slow"}, added


class Spy:
    """Wraps a policy; records every context and K."""

    def __init__(self, inner):
        self.inner, self.name = inner, "spy"
        self.calls = []

    def select(self, ctx):
        d = self.inner.select(ctx)
        self.calls.append((ctx, d.k))
        return d

    def observe(self, decision, outcome):
        self.inner.observe(decision, outcome)


def test_one_call_per_decoding_step_k_in_range_and_written(governed):
    from banditk.testing.engines import scheduler

    llm, _ = governed
    sch = scheduler(llm)
    rt = sch.banditk
    spy = rt.policy = Spy(rt.policy)
    seen = []
    orig = sch.schedule

    def schedule(*a, **kw):
        out = orig(*a, **kw)
        new = {r.req_id for r in out.scheduled_new_reqs}
        decoding = [
            r
            for r, n in out.num_scheduled_tokens.items()
            if r not in new and n <= 1 + len(out.scheduled_spec_decode_tokens.get(r, ()))
        ]
        if out.total_num_scheduled_tokens > 0:  # a step that runs the model
            seen.append((len(decoding), out.num_spec_tokens_to_schedule))
        return out

    sch.schedule = schedule
    try:
        generate(llm, PROMPTS[:4])
    finally:
        del sch.schedule
        rt.policy = spy.inner
    # One call per step that runs the model, prefill-only steps (B = 0) included.
    assert len(spy.calls) == len(seen) > 5 and any(b == 0 for b, _ in seen)
    assert [k for _, k in spy.calls] == [k for _, k in seen]
    assert [c.num_decoding for c, _ in spy.calls] == [b for b, _ in seen]
    assert all(0 <= k <= K_MAX for _, k in spy.calls)


def test_telemetry_totals_equal_vllm_metrics(governed):
    from banditk.testing.engines import metrics_delta, spec_metrics

    llm, _ = governed
    t = runtime(llm).telemetry
    before = (t.num_drafts, t.num_draft_tokens, t.num_accepted_tokens, t.accepted_per_position.copy())
    m0 = spec_metrics(llm)
    generate(llm, PROMPTS)
    d = metrics_delta(m0, spec_metrics(llm))
    assert t.num_drafts - before[0] == d["num_drafts"] > 0
    assert t.num_draft_tokens - before[1] == d["num_draft_tokens"]
    assert t.num_accepted_tokens - before[2] == d["num_accepted_tokens"]
    assert (t.accepted_per_position - before[3]).tolist() == d["num_accepted_tokens_per_pos"]


def swap_policy(llm, spec_str):
    from banditk.policies import make_policy

    rt = runtime(llm)
    old = rt.policy
    rt.policy = make_policy(spec_str, k_max=K_MAX, drafter_class="draft_model")
    return rt, old


def test_fixed_at_kmax_has_same_per_position_acceptance(governed, reference):
    from banditk.testing.engines import metrics_delta, spec_metrics

    assert hasattr(pytest.importorskip("banditk.policies", reason="needs make_policy"), "make_policy")
    llm, _ = governed
    rt, old = swap_policy(llm, f"fixed:{K_MAX}")
    try:  # the prefill-only step asks the policy too: K_max there, as in vLLM
        m0 = spec_metrics(llm)
        out = generate(llm, PROMPTS[:1], 64)
        d = metrics_delta(m0, spec_metrics(llm))
    finally:
        rt.policy = old
    assert out == reference["single"]
    ref = reference["single_metrics"]
    assert d["num_accepted_tokens_per_pos"] == ref["num_accepted_tokens_per_pos"]
    assert d["num_draft_tokens"] == ref["num_draft_tokens"] and d["num_drafts"] == ref["num_drafts"]


def test_k0_keeps_the_drafter_cache_sync_forward(governed, reference):
    from banditk.testing.engines import metrics_delta, model_runner, spec_metrics

    llm, _ = governed
    rt, old = swap_policy(llm, "fixed:0")
    drafter = model_runner(llm).drafter
    calls = []
    hook = drafter.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        generate(llm, PROMPTS[:1], 8)  # K set to 0 from here on (first step still uses the old K)
        calls.clear()
        m0 = spec_metrics(llm)
        out = generate(llm, PROMPTS[:2])
        d = metrics_delta(m0, spec_metrics(llm))
    finally:
        hook.remove()
        rt.policy = old
    assert out == reference["batch"][:2]
    assert d.get("num_draft_tokens", 0) <= K_MAX * 2  # at most the first step's drafts, from the previous K
    assert len(calls) >= MAX_TOKENS - 2  # the drafter still ran its forward each step


class Raising:
    name = "raising"

    def select(self, ctx):
        raise RuntimeError("governor exploded")

    def observe(self, decision, outcome):
        raise RuntimeError("never called")


def test_raising_governor_falls_back_and_generation_is_correct(governed, reference):
    llm, _ = governed
    rt = runtime(llm)
    before = rt.telemetry.errors.get("select", 0)
    with swapped_policy(rt, Raising()):
        out = generate(llm, PROMPTS)
    assert out == reference["batch"]
    assert rt.telemetry.errors["select"] - before > 5
    assert rt.last_k == rt.fallback_k == 2


def test_worker_timings_reach_the_governor(governed):
    llm, _ = governed
    t = runtime(llm).telemetry
    assert t.timed_steps > 0
    shares = t.time_shares()
    assert shares is not None and shares["draft"] > 0 and shares["verify"] > 0


def test_telemetry_log_is_a_trace_that_banditk_fit_reads(governed):
    import json

    from banditk.io.trace import read_trace

    llm, d = governed
    log = runtime(llm).log
    log.flush()
    start = (d / "steps.jsonl").stat().st_size if (d / "steps.jsonl").exists() else 0
    generate(llm, PROMPTS)
    log.flush()
    text = (d / "steps.jsonl").read_text()
    # This test's steps under the log's header: other tests of the module swap in other policies.
    mine = d / "steps-this-test.jsonl"
    mine.write_text(text.splitlines(keepends=True)[0] + text[start:] if start else text)
    lines = [json.loads(x) for x in mine.read_text().splitlines()]
    head, rows = lines[0], [r for r in lines[1:] if "event" not in r]  # fallback events are not steps
    assert head["trace"] == "banditk/trace" and head["source"] == "vllm" and head["k_max"] == K_MAX
    assert rows and {"k", "B", "acc_s", "acc_f", "prefill", "ctx", "step_s", "draft_s", "target_s", "t"} <= set(rows[0])
    assert all(0 <= r["k"] <= K_MAX for r in rows)
    # Every decoding request holds at least its prompt and a token in the KV cache.
    assert all(r["ctx"] > r["B"] for r in rows if r["B"] > 0)
    tr = read_trace(mine)
    assert len(tr) == len(rows) and tr.skipped == 0 and tr.context.tolist() == [r["ctx"] for r in rows]
    # The log holds the credited steps (a step after a prefill-only step has no decision to
    # credit), so per position it accepts at most what the telemetry counted, and not nothing.
    t = runtime(llm).telemetry
    logged = tr.acc_s.sum(axis=0)
    assert logged[0] > 0 and all(logged <= t.accepted_per_position)


def test_async_scheduler_sizes_placeholders_with_governed_k_and_credits_in_order(governed):
    """vLLM on CPU forces sync scheduling, so drive a real GovernedAsyncScheduler by hand.

    Built from the live engine's configs; the model runner is replaced by hand-made outputs.
    Async order: schedule(N+1) runs before update_from_output(N).
    """
    from vllm import SamplingParams
    from vllm.v1.request import Request

    from banditk.adapter.scheduler import GovernedAsyncScheduler
    from banditk.core.types import Decision

    class Scripted:
        name = "scripted"

        def __init__(self, ks):
            self.ks, self.observed = list(ks), []

        def select(self, ctx):
            return Decision(k=self.ks.pop(0), bucket=0, num_decoding=ctx.num_decoding, step_id=0)

        def observe(self, d, o):
            self.observed.append((d.k, *(x.tolist() for x in o.per_request())))

    llm, _ = governed
    sch = async_scheduler(llm, GovernedAsyncScheduler)
    pol = sch.banditk.policy = Scripted([K_MAX, 2, 1, 3, 0])
    sp = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    for i in range(2):
        sch.add_request(Request(f"r{i}", [5, 6, 7, 8], sp, None))

    spec_len = lambda so: sorted({len(v) for v in so.scheduled_spec_decode_tokens.values()})  # noqa: E731
    s0 = sch.schedule()  # prefill only: the policy is asked (B = 0) and says K_max
    s1 = sch.schedule()  # decides K=2, verifies s0's K_max placeholders
    assert s0.num_spec_tokens_to_schedule == K_MAX and s1.num_spec_tokens_to_schedule == 2
    assert spec_len(s1) == [K_MAX]
    answer(sch, s0, 0)
    s2 = sch.schedule()  # decides K=1; verifies s1's drafts: two placeholders (the governed K)
    assert spec_len(s2) == [2] and s2.num_spec_tokens_to_schedule == 1
    answer(sch, s1, 3)
    s3 = sch.schedule()
    assert spec_len(s3) == [1]
    answer(sch, s2, 1)  # s2 verified s1's K=2 drafts, accepting 1 each
    answer(sch, s3, 1)  # s3 verified s2's K=1 drafts
    assert pol.observed == [(2, [2, 2], [1, 1]), (1, [1, 1], [1, 1])]


# ---- faults in a running engine (issue 7): the engine keeps serving correct output ----------


class InvalidK:
    """Returns K values vLLM cannot run: above K_max, negative, not an integer."""

    name = "invalid"

    def __init__(self):
        self.n = 0

    def select(self, ctx):
        from banditk.core.types import Decision

        self.n += 1
        k = (K_MAX + 5, -1, "2", 1.5)[self.n % 4]
        return Decision(k=k, bucket=0, num_decoding=ctx.num_decoding, step_id=self.n)

    def observe(self, decision, outcome):
        raise AssertionError("an invalid decision must not be credited")


class SlowBandit:
    """The real bandit, made slow by a sleep in every select."""

    def __init__(self, inner, delay_s):
        self.inner, self.delay_s, self.calls = inner, delay_s, 0
        self.name = "slow"

    def select(self, ctx):
        self.calls += 1
        time.sleep(self.delay_s)
        return self.inner.select(ctx)

    def observe(self, decision, outcome):
        self.inner.observe(decision, outcome)


class ErrorLog:
    """Collects vllm.banditk's records (vLLM's logger does not propagate to pytest's caplog)."""

    def __enter__(self):
        import logging

        self.records = []
        self.handler = logging.Handler(logging.ERROR)
        self.handler.emit = self.records.append
        logging.getLogger("vllm.banditk").addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        import logging

        logging.getLogger("vllm.banditk").removeHandler(self.handler)

    def count(self, kind):
        return sum(f"{kind} failed" in r.getMessage() for r in self.records)


def posterior_is_finite(bandit):
    m, k, a, b = bandit.latency_params()
    acc_a, acc_b = bandit.acceptance_params()
    return all(np.all(np.isfinite(x)) for x in (m, k, a, b, acc_a, acc_b, bandit.mean_goodput()))


def test_invalid_k_falls_back_is_counted_logged_once_and_output_is_correct(governed, reference):
    llm, _ = governed
    rt = runtime(llm)
    before = rt.telemetry.errors.get("invalid_k", 0)
    with swapped_policy(rt, InvalidK()), ErrorLog() as log:
        out = generate(llm, PROMPTS)
    assert out == reference["batch"]
    assert rt.telemetry.errors["invalid_k"] - before > 5
    assert log.count("invalid_k") == (1 if before == 0 else 0)
    assert rt.last_k == rt.fallback_k


def test_slow_governor_is_bypassed_and_output_is_correct(governed, reference):
    from banditk.adapter.breaker import SlowCallBreaker

    llm, _ = governed
    rt = runtime(llm)
    slow = SlowBandit(rt.policy, delay_s=0.05)  # 5x the 10 ms budget
    old_breaker = rt.breaker
    rt.breaker = SlowCallBreaker(old_breaker.budget_s, base_cooldown=8)
    steps0, slow0 = rt.ledger._next, rt.telemetry.errors.get("slow", 0)
    try:
        with swapped_policy(rt, slow) as old_policy, ErrorLog() as log:
            out = generate(llm, PROMPTS)
    finally:
        rt.breaker = old_breaker
    steps = rt.ledger._next - steps0
    assert out == reference["batch"]
    assert log.count("slow") == (1 if slow0 == 0 else 0)
    assert rt.telemetry.errors["slow"] - slow0 == slow.calls
    # Three strikes, then bypasses of 8, 16, 32 steps: the sleep ran on a minority of steps.
    assert slow.calls <= 3 + 4 and steps > 2 * slow.calls, (slow.calls, steps)
    assert posterior_is_finite(old_policy)


def test_clock_jumps_do_not_poison_the_posterior(governed, reference):
    llm, _ = governed
    rt = runtime(llm)
    bandit = rt.policy
    generate(llm, PROMPTS)  # some history first
    learned = bandit.latency_params()[0].copy()
    calls = [0]
    real = rt.clock

    def broken_clock():
        # Every 7th reading jumps back 1000 s, every 11th forward 50 s (an NTP step on a
        # wall clock, a suspended VM): durations of 0, negative or ~50 s reach the ledger.
        calls[0] += 1
        return real() - (1000.0 if calls[0] % 7 == 0 else 0.0) + (50.0 if calls[0] % 11 == 0 else 0.0)

    rt.clock = broken_clock
    outliers0 = bandit.outliers
    try:
        out = generate(llm, PROMPTS)
    finally:
        rt.clock = real
    assert out == reference["batch"]
    assert posterior_is_finite(bandit)
    assert bandit.outliers > outliers0  # the 50 s steps were seen and not credited
    played = bandit.data.cell_n > 1
    assert np.all(bandit.latency_params()[0][played] < 1.0)  # no cell believes in 50 s steps
    # And it recovers: with a sound clock the cells it plays stay near what they knew.
    generate(llm, PROMPTS)
    now = bandit.latency_params()[0]
    assert np.all(now[played] < 3 * learned[played] + 0.05)


def test_snapshot_at_shutdown_and_second_engine_starts_from_it(vllm_cpu, tiny_pair, reference, tmp_path):
    """An engine of its own, shut down here: in any test order the shared one stays up."""
    from banditk.testing.engines import scheduler, tiny_llm

    snap = tmp_path / "snapshot.json"
    cfg = {"snapshot_path": str(snap), "snapshot_interval_s": 0, "state_log_interval_s": 0, "seed": 0}
    with tiny_llm(tiny_pair.target, spec(tiny_pair, governor="bandit", governor_config=cfg)) as llm:
        generate(llm, PROMPTS)
        observations = runtime(llm).policy.observations
        scheduler(llm).shutdown()
        assert snap.exists() and observations > 0
    cfg = {"prior": str(snap), "state_log_interval_s": 0}
    with tiny_llm(tiny_pair.target, spec(tiny_pair, governor="bandit", governor_config=cfg)) as llm2:
        pol = runtime(llm2).policy
        assert pol.prior is not None and pol.prior.provenance.get("source") == "snapshot"
        assert generate(llm2, PROMPTS[:2]) == reference["batch"][:2]


def test_bad_governor_config_fails_before_model_load(vllm_cpu, tiny_pair):
    from vllm import LLM

    from banditk.core.errors import ConfigError
    from banditk.testing.engines import llm_kwargs

    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"`discount` must be in \[0.5, 1.0\], got 7"):
        LLM(
            model=tiny_pair.target,
            speculative_config=spec(tiny_pair, governor="bandit", governor_config={"discount": 7}),
            **llm_kwargs(),
        )
    with pytest.raises(ConfigError, match=r"governor='greedy' is not a policy"):
        LLM(model=tiny_pair.target, speculative_config=spec(tiny_pair, governor="greedy"), **llm_kwargs())
    assert time.perf_counter() - t0 < 10


# Placed before the MTP and n-gram engines: built after them in the same process, vllm-cpu
# 0.32 fails in its Triton-kernel rebinding ('_lib_fn_wrapper' object has no attribute 'get').
def test_abort_mid_generation_and_preemption_keep_the_governor_sound(vllm_cpu, tiny_pair, tmp_path):
    """A KV cache too small for the batch (vLLM preempts and recomputes) and requests
    aborted while decoding: output of the survivors is correct, the posterior finite."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from banditk.testing.engines import greedy_chain, scheduler, tiny_llm

    n_tokens = 200  # past one 128-token CPU block: every request needs a second block
    cfg = {"seed": 0, "fallback_k": 2, "telemetry_log": str(tmp_path / "steps.jsonl")}
    # Six blocks for six requests that each grow to two: running requests get preempted.
    with tiny_llm(
        tiny_pair.target,
        spec(tiny_pair, governor="bandit", governor_config=cfg),
        num_gpu_blocks_override=6,
        max_num_seqs=8,
    ) as llm:
        sch = scheduler(llm)
        rt, preempted = sch.banditk, []
        orig = sch._preempt_request
        sch._preempt_request = lambda req, *a, **kw: (preempted.append(req.request_id), orig(req, *a, **kw))[1]
        engine = llm.llm_engine
        sp = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
        for i, p in enumerate(PROMPTS):
            engine.add_request(f"r{i}", p, sp)
        done, steps = {}, 0
        while engine.has_unfinished_requests() and steps < 5000:
            for o in engine.step():
                if o.finished:
                    done[o.request_id] = list(o.outputs[0].token_ids)
            steps += 1
            if steps == 20:
                engine.abort_request(["r1", "r4"])  # mid-decode
        del sch._preempt_request
        bandit = rt.policy
        tok = AutoTokenizer.from_pretrained(tiny_pair.target)
        assert set(preempted) - {"r1", "r4"}, "the KV cache was meant to be too small for the batch"
        for i, prompt in enumerate(PROMPTS):
            if i in (1, 4):
                assert len(done.get(f"r{i}", ())) < n_tokens  # really cut short
            else:
                assert done[f"r{i}"] == greedy_chain(tiny_pair.next_token, tok(prompt)["input_ids"][-1], n_tokens)
        assert posterior_is_finite(bandit) and bandit.observations > 20
        assert set(rt.telemetry.errors) <= {"slow"}, rt.telemetry.errors  # slow: machine load, see above


def test_mtp_with_governor_and_k0_cache_sync(vllm_cpu, tiny_pair, tmp_path_factory):
    """MiMo-architecture MTP (num_nextn_predict_layers=1): exact output, and K=0 still runs the MTP forward."""
    import os

    from transformers import AutoTokenizer

    from banditk.policies import make_policy
    from banditk.testing.engines import greedy_chain, model_runner, spec_metrics, tiny_llm
    from banditk.testing.tiny_models import build_mtp_target

    path, f = build_mtp_target(os.path.dirname(tiny_pair.target))
    tok = AutoTokenizer.from_pretrained(path)
    s = {
        "method": "mtp",
        "num_speculative_tokens": 2,
        "governor": "fixed",
        "governor_config": {"state_log_interval_s": 0},
    }
    with tiny_llm(path, s) as llm:
        rt = runtime(llm)
        assert rt.drafter_class == "mtp"
        out = generate(llm, PROMPTS[:2], 24)
        m = spec_metrics(llm)
        assert m["num_draft_tokens"] > 0 and m["num_accepted_tokens"] == m["num_draft_tokens"]  # MTP agrees exactly
        rt.policy = make_policy("fixed:0", k_max=2, drafter_class="mtp")
        calls = []
        hook = model_runner(llm).drafter.model.register_forward_hook(lambda *a: calls.append(1))
        try:
            out0 = generate(llm, PROMPTS[:2], 24)
        finally:
            hook.remove()
    for prompt, o, o0 in zip(PROMPTS, out, out0):
        want = greedy_chain(f, tok(prompt)["input_ids"][-1], 24)
        assert o == want and o0 == want
    assert len(calls) >= 20  # cache-sync forwards at K = 0


def test_ngram_with_governor_generates(vllm_cpu, tiny_pair):
    # Keep this the last engine of the module: in vLLM 0.32 the ngram proposer imports numba, and
    # a later engine start then trips over llvmlite objects in the triton kernel dispatcher's
    # sys.modules scan (AttributeError: '_lib_fn_wrapper' object has no attribute 'get').
    from transformers import AutoTokenizer

    from banditk.testing.engines import greedy_chain, tiny_llm

    tok = AutoTokenizer.from_pretrained(tiny_pair.target)
    s = {
        "method": "ngram",
        "num_speculative_tokens": K_MAX,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
        "governor": "bandit",
        "governor_config": {
            "state_log_interval_s": 0,
            "slow_call_ms": 5000,
        },  # the slow-call breaker (tested in test_runtime.py) must not trip on a loaded machine
    }
    prompt = " ".join(["x = 1"] * 6)
    with tiny_llm(tiny_pair.target, s) as llm:
        out = generate(llm, [prompt], 24)[0]
        rt = runtime(llm)
        assert rt.drafter_class == "ngram" and rt.select_calls > 0 and rt.telemetry.errors == {}
    assert out == greedy_chain(tiny_pair.next_token, tok(prompt)["input_ids"][-1], 24)
