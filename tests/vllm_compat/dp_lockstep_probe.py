"""Run under a vLLM's Python (PYTHONPATH): the lockstep facts a MoE K vote relies on, read from its code.

docs/data-parallel-design.md (sections 2-4, 6) rests a per-step K agreement for MoE ranks on
these, for each supported release; this reads them from the code itself so that a release that
moves one fails a test, not a deployment:

- Model Runner V2's DP sync (``sync_cudagraph_and_dp_padding``) runs exactly one all-reduce of an
  int32 ``rows x dp`` tensor: a vote rides along as one more row, with no new round trip;
- the worker keeps the step's K in ``ExecuteModelState.num_spec_tokens_to_schedule`` and passes it
  to the drafter's ``propose`` as ``num_speculative_tokens`` (consumed after the sync);
- an idle rank's dummy run calls ``propose`` without ``num_speculative_tokens``: it drafts K_max,
  so the vote must set the dummy's K too;
- the V1 runner's own DP sync (``_run_ar``) is one all-reduce of a ``4 x dp`` tensor.

Prints one JSON line.
"""

import ast
import importlib
import inspect
import json
import textwrap


def _tree(module: str, qualname: str) -> ast.AST:
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


def _calls(tree: ast.AST, *names: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in names
    ]


def _rows(tree: ast.AST) -> list[int]:
    """The constant first dimension of every ``torch.zeros(rows, dp, ...)`` in ``tree``."""
    return [c.args[0].value for c in _calls(tree, "zeros") if c.args and isinstance(c.args[0], ast.Constant)]


def _keywords(tree: ast.AST, name: str) -> list[list[str]]:
    return [sorted(k.arg for k in c.keywords if k.arg) for c in _calls(tree, name)]


def main() -> None:
    import vllm

    mrv2 = "vllm.v1.worker.gpu"
    sync = _tree(f"{mrv2}.dp_utils", "sync_cudagraph_and_dp_padding")
    runner = importlib.import_module(f"{mrv2}.model_runner")
    out = {
        "version": vllm.__version__,
        "mrv2_sync_rows": _rows(sync),
        "mrv2_sync_reduces": len(_calls(sync, "all_reduce", "cpu_all_reduce_")),
        "execute_state_fields": list(runner.ExecuteModelState._fields),
        "sample_tokens_propose_keywords": _keywords(
            _tree(f"{mrv2}.model_runner", "GPUModelRunner.sample_tokens"), "propose"
        ),
        "dummy_run_propose_keywords": _keywords(_tree(f"{mrv2}.model_runner", "GPUModelRunner._dummy_run"), "propose"),
    }
    v1 = _tree("vllm.v1.worker.dp_utils", "_run_ar")
    out["v1_sync_rows"] = _rows(v1)
    out["v1_sync_reduces"] = len(_calls(v1, "all_reduce"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
