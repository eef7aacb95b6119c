"""Run under another vLLM's Python (PYTHONPATH): the adapter's shape checks and the ladder
mend against it. Prints one JSON line; exits non-zero on a failed assumption."""

import json

from banditk.adapter import graph_mode, vllm_compat
from lab.mrv2 import decode_query_lens, missed_full_graphs, probe_manager


def main() -> None:
    vllm_compat.check_vllm_shape()
    vllm_compat.check_mrv2_shape()
    ks = [0, 1, 2, 3, 4]
    manager = probe_manager(vllm_compat.dynamic_k_table(ks, 64), 4, 64)
    missed = missed_full_graphs(manager, ks, 64)
    graph_mode.mend_shadowed_ladders(manager._candidates, vllm_compat.full_graph_descs(manager))
    print(
        json.dumps(
            {
                "version": vllm_compat.vllm_version(),
                "query_lens": sorted(decode_query_lens(manager)),
                "shadowed": bool(missed),
                "shadowing_listed": vllm_compat.ladder_shadowing_present(),
                "missed_after_mend": missed_full_graphs(manager, ks, 64),
            }
        )
    )


if __name__ == "__main__":
    main()
