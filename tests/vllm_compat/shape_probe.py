"""Run under another vLLM's Python (PYTHONPATH): every adapter assumption, Model Runner V2's
included, checked against it. Prints one JSON line; exits non-zero on a failed assumption."""

import json

from banditk.adapter import vllm_compat


def main() -> None:
    vllm_compat.check_vllm_shape()
    vllm_compat.check_mrv2_shape()  # check_vllm_shape runs it only where the platform has graphs
    vllm_compat.check_adaptive_verification_shape()  # the admitted drafts (.admitted_drafts)
    vllm_compat.check_data_parallel_shape()  # independent dense ranks (.data_parallel)
    print(
        json.dumps(
            {
                "version": vllm_compat.vllm_version(),
                "v1_removed": vllm_compat.model_runner_v1_removed(),
                "plans_per_query_len": vllm_compat.plans_graphs_per_query_len(),
                "ladder_shadowing": vllm_compat.ladder_shadowing_present(),
            }
        )
    )


if __name__ == "__main__":
    main()
