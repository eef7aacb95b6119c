"""Fixtures for adapter tests: CPU environment and locally built tiny models (no hub)."""

import os

import pytest


@pytest.fixture(scope="session")
def vllm_cpu(tmp_path_factory):
    """Import vLLM (skip cleanly without it) after setting the CPU environment, in-process layout."""
    from banditk.testing.engines import cpu_env

    cpu_env(in_process=True, cache_root=str(tmp_path_factory.mktemp("vllm-cache")))
    return pytest.importorskip("vllm")


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """Tokenizer, cyclic target (2 x 128) and a draft agreeing on 80% of tokens."""
    pytest.importorskip("transformers")
    from banditk.testing.tiny_models import build_pair

    root = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    return build_pair(root, agreement=0.8)


@pytest.fixture(scope="session")
def split_pair(tmp_path_factory):
    """The split pair (lab/split_pair.py): requests in one half accept 90% of drafts, in the other 30%."""
    pytest.importorskip("transformers")
    from lab.split_pair import build_split_pair

    root = os.environ.get("BANDITK_TEST_MODELS") or str(tmp_path_factory.mktemp("models"))
    return build_split_pair(root, agreement=(0.9, 0.3))
