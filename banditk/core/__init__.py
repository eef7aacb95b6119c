"""The contract every layer shares: what a step is, what the governor may be told, what goes wrong.

- ``types``: :class:`StepContext`, :class:`Decision`, :class:`StepOutcome`, the policy protocol's data;
- ``config``: :class:`GovernorConfig`, the governor's hyperparameters, validated;
- ``errors``: :class:`BanditkError` and its specific subclasses;
- ``drafters``: the drafter classes and how vLLM's methods map onto them;
- ``buckets``: batch-size buckets, hysteresis and dwell.
"""
