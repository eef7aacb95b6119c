"""vLLM's OpenAI server with banditk's per-request schedulers (issue 16), for experiments.

The plugin does not yet choose the per-request schedulers from the speculative config
(docs/per-request.md says why). This launcher selects them the way the plugin selects its own,
by the scheduler qualname it hands vLLM, and then runs vLLM's server module with the same
arguments:

    python experiments/per_request_server.py --model M \\
        --speculative-config '{"method": "draft_model", "model": D, "num_speculative_tokens": 3, "governor": "bandit"}'
"""

from __future__ import annotations

import runpy
import sys

SYNC = "banditk.adapter.per_request.PerRequestScheduler"
ASYNC = "banditk.adapter.per_request.PerRequestAsyncScheduler"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def main() -> None:
    from banditk.adapter import plugin

    # vLLM loads the plugin by entry point into this same module object, so it hands vLLM these.
    plugin.SCHEDULER_QUALNAME, plugin.ASYNC_SCHEDULER_QUALNAME = SYNC, ASYNC
    sys.argv[0] = SERVER_MODULE
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
