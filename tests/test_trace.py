import json

import numpy as np
import pytest

from banditk.core.errors import PriorFormatError
from banditk.core.types import Decision, StepOutcome
from banditk.io.trace import header, read_trace, step_record


def test_round_trip_with_rotation_and_a_torn_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    head = header("mtp", 3, "sim", hardware="cpu")
    d = Decision(k=2, bucket=3, num_decoding=4, step_id=1)
    o = StepOutcome(np.array([2, 2, 2, 2]), np.array([2, 1, 0, 2]), 0.02, draft_duration_s=0.005)
    (tmp_path / "t.jsonl.1").write_text(json.dumps(head) + "\n" + json.dumps(step_record(d, o, 3)) + "\n")
    path.write_text(json.dumps(head) + "\n" + json.dumps(step_record(d, o, 3)) + "\n" + '{"step": 3, "B"')
    tr = read_trace(path)
    assert len(tr) == 2 and tr.skipped == 1
    assert tr.acc_s[0].tolist() == [3, 2, 0] and tr.acc_f[0].tolist() == [1, 1, 0]
    assert np.isnan(tr.target_s[0]) and tr.draft_s[0] == 0.005


@pytest.mark.parametrize("step_s", [1e200, 1e308, 3601.0])
def test_a_step_line_with_an_absurd_time_is_skipped_and_counted(tmp_path, step_s):
    # One such line crashed `banditk fit` (LinAlgError, or a NaN in nnls) before it was skipped.
    path = tmp_path / "t.jsonl"
    d = Decision(k=2, bucket=3, num_decoding=4, step_id=1)
    good = step_record(d, StepOutcome(np.array([2, 2, 2, 2]), np.array([2, 1, 0, 2]), 0.02), 3)
    lines = [header("mtp", 3, "sim"), good, dict(good, step_s=step_s), dict(good, draft_s=step_s)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tr = read_trace(path)
    # The draft_s line keeps its step, without a draft time.
    assert len(tr) == 2 and tr.skipped == 1 and tr.step_s.max() == 0.02 and np.isnan(tr.draft_s[1])


def test_trace_without_header_or_steps(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"step": 1}\n')
    with pytest.raises(PriorFormatError, match="not a banditk trace"):
        read_trace(p)
    p.write_text(json.dumps(header("mtp", 3, "sim")) + "\n")
    with pytest.raises(PriorFormatError, match="no usable step lines"):
        read_trace(p)
    with pytest.raises(PriorFormatError, match="no such file"):
        read_trace(tmp_path / "missing.jsonl")


def test_recording_policy_writes_what_the_fitter_reads(tmp_path):
    from streams import run_stream

    from banditk.policies import make_policy
    from banditk.tools.synthetic import SyntheticTruth
    from lab.recording import RecordingPolicy

    truth = SyntheticTruth()
    path = tmp_path / "rec.jsonl"
    with RecordingPolicy(
        make_policy("random", k_max=4, drafter_class="mtp", seed=1),
        path,
        drafter_class="mtp",
        k_max=4,
        hardware="synthetic",
    ) as rec:
        ks = run_stream(rec, truth, [1, 8, 0, 32] * 50, seed=2)
    tr = read_trace(path)
    assert len(tr) == 150  # the 50 steps with nothing decoding are not recorded
    assert tr.header["hardware"] == "synthetic" and tr.drafter_class == "mtp"
    assert tr.k.tolist() == [k for k, b in zip(ks, [1, 8, 0, 32] * 50) if b > 0]
    # position 1 is reached by every request that drafted at all
    drafted_requests = sum(b for k, b in zip(tr.k, tr.batch) if k > 0)
    assert tr.acc_s[:, 0].sum() + tr.acc_f[:, 0].sum() == drafted_requests
    # The stream gives no context: each line records the 0 the policy was given, not "unknown".
    assert (tr.context == 0).all()


def test_context_column_round_trips_and_is_unknown_in_older_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    d = Decision(k=2, bucket=3, num_decoding=4, step_id=1)
    o = StepOutcome(np.array([2, 2, 2, 2]), np.array([2, 1, 0, 2]), 0.02)
    with_ctx, older = step_record(d, o, 3, ctx=9412), step_record(d, o, 3)
    lines = [header("mtp", 3, "sim"), with_ctx, older, dict(with_ctx, ctx=2**40)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tr = read_trace(path)
    assert tr.context.tolist() == [9412, -1, 2**40] and tr.skipped == 0


@pytest.mark.parametrize("ctx", [-2, 1.5, "9", True, None, 2**63])
def test_a_step_line_with_a_bad_context_is_skipped_and_counted(tmp_path, ctx):
    path = tmp_path / "t.jsonl"
    d = Decision(k=2, bucket=3, num_decoding=4, step_id=1)
    good = step_record(d, StepOutcome(np.array([2, 2, 2, 2]), np.array([2, 1, 0, 2]), 0.02), 3, ctx=100)
    path.write_text("".join(json.dumps(x) + "\n" for x in [header("mtp", 3, "sim"), good, dict(good, ctx=ctx)]))
    tr = read_trace(path)
    assert len(tr) == 1 and tr.skipped == 1 and tr.context.tolist() == [100]
