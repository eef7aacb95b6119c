"""banditk's evaluation lab: what measures the governor, beside the package that serves it.

- :mod:`lab.live`: live sweeps and soaks against a real ``vllm serve`` (experiments/live_*.py);
- :mod:`lab.mrv2`: vLLM's Model Runner V2 graph manager probed without a GPU (graph ladders);
- :mod:`lab.split_pair`: a tiny draft pair whose requests accept 90% and 30% (per-request runs).

Not installed with ``pip install banditk``: experiments/ and tests/ import it from the
repository root (pyproject's pytest ``pythonpath``; regenerate.py's ``PYTHONPATH``). Reports made
with it are stamped with its sources too (experiments/source_closure.py).
"""
