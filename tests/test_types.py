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
