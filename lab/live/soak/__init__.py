"""A long live soak of the governed ``vllm serve``: open-loop traffic, greedy probes, RSS, faults.

The pieces of ``experiments/live_soak.py``, one module each:

- :mod:`.traffic`: seeded open-loop arrivals (exponential gaps), each a short or a long
  prompt, streamed or not, some streamed ones hung up after a few chunks (an abort), played
  from a thread pool that counts sent / completed / aborted / HTTP errors;
- :mod:`.probes`: a fixed set of greedy requests whose outputs are compared with the same
  requests answered by an ungoverned server (vLLM's static K);
- :mod:`.memory`: the resident memory of the engine-core process (and its worker), sampled
  on a timer, and the slope of its second half;
- :mod:`.faults`: every rewrite of the governor's snapshot loaded with banditk's own loader,
  orphaned temp files, and the governor's fallbacks and faults from its telemetry log, the
  server log and ``/metrics``;
- :mod:`.run`: the whole run (reference server, then the governed one) and its report.

Prompts are token ids (the tiny models' tokenizer has no natural text), so their lengths are
exact: a short prompt is ``short_len`` tokens, a long one ``long_len``.
"""
