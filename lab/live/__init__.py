"""Live evaluation against a real ``vllm serve`` with vLLM's own benchmark client.

- :mod:`.server`: start a vLLM OpenAI server on 127.0.0.1, wait until it answers, stop it by pid.
- :mod:`.bench`: drive load with vLLM's ``bench serve`` client code and read its results.
- :mod:`.policies`: the protocol's policies as ``--speculative-config`` values.
- :mod:`.models`: random-weight models of realistic shape, built locally.

The pass/fail checks are :mod:`banditk.evaluation`, shared with the simulator.

Needs the ``cpu`` (or ``vllm``) extra; nothing here is imported by the core.
"""
