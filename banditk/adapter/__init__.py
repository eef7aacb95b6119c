"""vLLM adapter (optional extra): a governor that steers K inside an unmodified vLLM.

Modules, one idea each:

- :mod:`.plugin`: the ``vllm.general_plugins`` entry point; accepts ``"governor"``
  in the speculative config, switches on dynamic K, selects the governed scheduler.
- :mod:`.settings`: the ``governor`` / ``governor_config`` keys, validated (no vLLM import).
- :mod:`.policy_factory`: builds the policy (and loads the prior) from the settings.
- :mod:`.scheduler`: ``GovernedScheduler`` / ``GovernedAsyncScheduler`` (vLLM subclasses).
- :mod:`.runtime`: what those schedulers do each step: decide, credit, record.
- :mod:`.ledger`: which decision an outcome belongs to (a step later, also async).
- :mod:`.telemetry`: bounded acceptance/timing telemetry and the rotated JSONL log.
- :mod:`.worker_timing`: draft/target forward timers in the worker process (CPU clocks).
- :mod:`.event_timing`: the same on Model Runner V2, from CUDA events read without a sync.
- :mod:`.timed_credits`: on MRv2, credits that wait for their steps' CUDA-event times.
- :mod:`.draft_times`: the drafter's time per K, for credits whose times never come.
- :mod:`.graph_mode`: the server's runner and graph mode, MRv2's ladders per K, their capture.
- :mod:`.snapshots`: periodic and shutdown snapshots, atomic.
- :mod:`.metrics`: ``banditk:*`` on vLLM's ``/metrics`` (carried in the scheduler stats, a stat-logger plugin).
- :mod:`.vllm_compat`: every vLLM-version-dependent assumption, checked at start-up.

Nothing here is imported by the core; importing this package does not import vLLM.
"""
