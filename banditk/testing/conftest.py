"""Doctest collection: these helpers need torch/transformers; skip them without."""

import importlib.util

collect_ignore = (
    [] if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch") else ["tiny_models.py"]
)
collect_ignore += [] if importlib.util.find_spec("vllm") else ["engines.py"]
