"""Shared fixtures for the core tests (helpers live in banditk.testing.streams)."""

from __future__ import annotations

import pytest

from banditk.synthetic import SyntheticTruth


@pytest.fixture
def truth() -> SyntheticTruth:
    return SyntheticTruth()
