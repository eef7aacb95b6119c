"""Doctest collection: modules that import vLLM at top level are skipped without it."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("vllm") else ["scheduler.py"]
