import math

import numpy as np
import pytest

from banditk.core.errors import BanditkError, InvalidContextError, InvalidOutcomeError, UnknownDrafterClassError
from banditk.core.types import StepContext, StepOutcome


def test_accepted_above_drafted_names_request_and_values():
    with pytest.raises(InvalidOutcomeError, match=r"request 1: accepted=4 > drafted=3"):
        StepOutcome(np.array([2, 3]), np.array([1, 4]), 0.01)


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", ["step_duration_s", "draft_duration_s", "target_duration_s"])
def test_bad_durations_are_refused_with_field_and_value(field, bad):
    kwargs = {"step_duration_s": 0.01, field: bad}
    with pytest.raises(InvalidOutcomeError, match=rf"`{field}` must be finite and >= 0 seconds, got {bad!r}"):
        StepOutcome(np.array([1]), np.array([1]), **kwargs)


def test_outcome_shape_and_dtype_checks():
    with pytest.raises(InvalidOutcomeError, match="one entry per request"):
        StepOutcome(np.array([1, 2]), np.array([1]), 0.01)
    with pytest.raises(InvalidOutcomeError, match="1-D array of integers"):
        StepOutcome(np.array([1.5]), np.array([1.0]), 0.01)
    with pytest.raises(InvalidOutcomeError, match="`drafted` must be >= 0"):
        StepOutcome(np.array([-1]), np.array([0]), 0.01)


def test_outcome_errors_are_valueerrors_and_banditk_errors():
    with pytest.raises(ValueError):
        StepOutcome(np.array([1]), np.array([2]), 0.01)
    with pytest.raises(BanditkError):
        StepOutcome(np.array([1]), np.array([2]), 0.01)


def test_unknown_drafter_class_lists_known_ones():
    with pytest.raises(UnknownDrafterClassError, match=r"drafter_class='medusa'.*mtp"):
        StepContext(4, 4, "medusa")


@pytest.mark.parametrize(
    "field,value,pattern",
    [
        ("num_decoding", -1, r"`num_decoding` must be >= 0, got -1"),
        ("kv_usage", 1.5, r"`kv_usage` must be a fraction in \[0, 1\], got 1.5"),
        ("kv_usage", math.nan, r"`kv_usage` must be a fraction"),
        ("k_max", 100, r"`k_max` must be in \[0, 64\], got 100"),
        ("queue_len", 2.5, r"`queue_len` must be an integer, got 2.5"),
    ],
)
def test_bad_context_fields(field, value, pattern):
    kwargs = {"num_decoding": 4, "k_max": 4, "drafter_class": "mtp", field: value}
    with pytest.raises(InvalidContextError, match=pattern):
        StepContext(**kwargs)


def test_num_scheduled_defaults_to_num_decoding():
    assert StepContext(5, 4, "mtp").num_scheduled == 5
    assert StepContext(5, 4, "mtp", num_scheduled=9).num_scheduled == 9


# ---- counted outcomes: verifications as counts per (drafted, accepted) pair ------------------


def _pairs(k_max, *requests):
    w = k_max + 1
    p = [0] * (w * w)
    for d, a in requests:
        p[d * w + a] += 1
    return tuple(p)


def test_counted_outcome_reads_as_its_requests():
    o = StepOutcome.counted(_pairs(3, (3, 3), (3, 1), (2, 0), (0, 0)), 0.01, prefill_tokens=5)
    assert o.drafted is None and o.num_requests == 4 and o.accepted_total == 4 and o.max_drafted == 3
    assert o.position_counts(3) == ([2, 1, 1], [1, 1, 0])
    drafted, accepted = o.per_request()
    assert drafted.tolist() == [0, 2, 3, 3] and accepted.tolist() == [0, 0, 1, 3]
    same = StepOutcome(drafted, accepted, 0.01)
    assert same.position_counts(3) == o.position_counts(3) and same.accepted_total == o.accepted_total


@pytest.mark.parametrize(
    "pairs, pattern",
    [
        ([0, 1, 0, 0], "must be a tuple of counts, got list"),
        ((0, 1, 0), r"\(k_max \+ 1\) \*\* 2 counts, got 3"),
        ((), r"\(k_max \+ 1\) \*\* 2 counts, got 0"),
        ((0, -1, 0, 0), "integer counts >= 0, got -1"),
        ((0, 1.0, 0, 0), "integer counts >= 0, got 1.0"),
        ((0, np.int64(1), 0, 0), r"integer counts >= 0, got np.int64\(1\)"),
        ((0, 2, 0, 0), r"accepted more than they drafted: \(drafted=0, accepted=1\)"),
        (_pairs(3)[:6] + (1,) + _pairs(3)[7:], r"\(drafted=1, accepted=2\)"),
    ],
)
def test_bad_pairs_are_refused_naming_the_count(pairs, pattern):
    with pytest.raises(InvalidOutcomeError, match=pattern):
        StepOutcome.counted(pairs, 0.01)


def test_an_outcome_is_per_request_or_counted_never_both_nor_neither():
    with pytest.raises(InvalidOutcomeError, match="not both"):
        StepOutcome(np.array([1]), np.array([1]), 0.01, pairs=(0, 0, 0, 1))
    with pytest.raises(InvalidOutcomeError, match="both be given"):
        StepOutcome(np.array([1]), None, 0.01)
    with pytest.raises(InvalidOutcomeError, match="tuple of counts, got NoneType"):
        StepOutcome(None, None, 0.01)


def test_counted_outcome_checks_its_durations_as_the_other_form():
    with pytest.raises(InvalidOutcomeError, match="`draft_duration_s` must be finite"):
        StepOutcome.counted(_pairs(2, (1, 1)), 0.01, draft_duration_s=math.nan)
    with pytest.raises(InvalidOutcomeError, match="`step_duration_s` must be finite"):
        StepOutcome.counted(_pairs(2, (1, 1)), -1.0)
