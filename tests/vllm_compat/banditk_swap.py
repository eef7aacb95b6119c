"""pytest plugin for vLLM's own tests: swap in banditk's governed scheduler, record outcomes.

Loaded with ``-p banditk_swap`` into a pytest run over the sdist's tests (see run_compat.py).
``BANDITK_COMPAT_SCHEDULER`` picks the scheduler:

- ``vllm``: vLLM's own (the reference run);
- ``governed``: every ``Scheduler`` / ``AsyncScheduler`` the tests build (through
  ``tests/v1/core/utils.create_scheduler`` or by name) is banditk's governed twin, pinned to the
  policy that mirrors vLLM's choice: ``table:<the test's table>`` when the speculative config
  sets ``num_speculative_tokens_per_batch_size``, else ``fixed:K``. The test's vLLM config is
  not otherwise changed, and the runtime writes K on every step (``dynamic_k`` on, as the plugin
  arranges in a server), so that the only difference between the two runs is banditk's K and
  hooks. Without data parallelism only: there vLLM ignores K and so does the plugin.
  A config without speculative decoding gets vLLM's scheduler: the plugin never governs one.

``BANDITK_COMPAT_DYNAMIC=1`` runs either scheduler in vLLM's dynamic-K mode, as the plugin
arranges in a server: a test config that speculates without a table gets ``[[1, max_num_seqs,
K]]`` (K unchanged at every batch size, so only the mode differs).

``BANDITK_COMPAT_REPORT`` names a JSON file that receives, per test node id, the outcome, the
first line of the failure, how many governed schedulers the test built and how many times their
policies chose K.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest

MODE = os.environ.get("BANDITK_COMPAT_SCHEDULER", "vllm")
DYNAMIC = os.environ.get("BANDITK_COMPAT_DYNAMIC") == "1"
REPORT = os.environ.get("BANDITK_COMPAT_REPORT")

_runtimes: list = []  # the governed schedulers' runtimes built by the running test
_results: dict[str, dict] = {}


def mirror_governor(vllm_config) -> str | None:
    """The banditk policy spec that mirrors vLLM's K for this config (None: no speculation)."""
    spec = getattr(vllm_config, "speculative_config", None)
    k = getattr(spec, "num_speculative_tokens", None) if spec is not None else None
    if not k:
        return None
    table = spec.num_speculative_tokens_per_batch_size
    if table:
        try:
            return "table:" + json.dumps([[int(v) for v in entry] for entry in table])
        except (TypeError, ValueError):
            return "table:" + json.dumps(table, default=str)  # banditk's validator words the refusal
    return f"fixed:{int(k)}"


def _pin(vllm_config) -> None:
    """Put the settings the plugin would carry to the engine core into the test's config."""
    from banditk.adapter import vllm_compat
    from banditk.adapter.settings import ADDITIONAL_CONFIG_KEY, parse_settings

    spec = vllm_config.speculative_config
    # No state lines or snapshots: the tests run hundreds of schedulers in one process.
    settings = parse_settings(mirror_governor(vllm_config), {"state_log_interval_s": 0})
    resolved = settings.resolve(method=spec.method, k_max=int(spec.num_speculative_tokens))
    vllm_compat.additional_config(vllm_config)[ADDITIONAL_CONFIG_KEY] = resolved.to_dict()


def _dynamic(vllm_config) -> None:
    """Under ``BANDITK_COMPAT_DYNAMIC``: switch dynamic K on with the test's own K everywhere."""
    from banditk.adapter import vllm_compat

    spec = getattr(vllm_config, "speculative_config", None)
    if DYNAMIC and spec is not None and spec.num_speculative_tokens and not spec.num_speculative_tokens_per_batch_size:
        vllm_compat.enable_dynamic_k(vllm_config, [int(spec.num_speculative_tokens)])


@functools.cache
def _dynamic_classes():
    """vLLM's own classes, in dynamic-K mode."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    def make(plain: type) -> type:
        class Dynamic(plain):
            def __init__(self, *args, **kwargs):
                _dynamic(kwargs.get("vllm_config", args[0] if args else None))
                super().__init__(*args, **kwargs)

        Dynamic.__name__ = Dynamic.__qualname__ = f"Dynamic{plain.__name__}"
        return Dynamic

    return {Scheduler: make(Scheduler), AsyncScheduler: make(AsyncScheduler)}


@functools.cache
def _governed_classes():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from banditk.adapter import vllm_compat
    from banditk.adapter.scheduler import GovernedAsyncScheduler, GovernedScheduler

    def make(governed: type, plain: type) -> type:
        class Compat(governed):
            """``governed`` when the config speculates, else vLLM's ``plain`` class."""

            def __new__(cls, *args, **kwargs):
                cfg = kwargs.get("vllm_config", args[0] if args else None)
                if mirror_governor(cfg) is None:
                    obj = plain.__new__(plain)
                    obj.__init__(*args, **kwargs)
                    return obj  # not a Compat: Python does not call __init__ again
                return super().__new__(cls)

            def __init__(self, *args, **kwargs):
                cfg = kwargs.get("vllm_config", args[0] if args else None)
                _pin(cfg)
                _dynamic(cfg)  # after the pin: it mirrors the test's static K
                super().__init__(*args, **kwargs)
                _runtimes.append(self.banditk)
                # The plugin runs vLLM in dynamic-K mode so that K can change per step; here
                # vLLM's config stays the test's, and only the runtime is told to write K.
                if vllm_compat.data_parallel_size(cfg) == 1:
                    self.banditk.dynamic_k = True

        Compat.__name__ = Compat.__qualname__ = f"Compat{governed.__name__}"
        return Compat

    return {
        Scheduler: make(GovernedScheduler, Scheduler),
        AsyncScheduler: make(GovernedAsyncScheduler, AsyncScheduler),
    }


def pytest_collection_modifyitems(config, items):
    # vLLM's root conftest frees the distributed env and device memory after every test unless
    # marked; these tests use neither, and the cleanup is most of their run time on CPU.
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


@pytest.fixture(autouse=True)
def _banditk_swap(monkeypatch):
    """Rebind the names ``Scheduler`` / ``AsyncScheduler`` in the sdist's test modules."""
    _runtimes.clear()
    if MODE == "governed" or DYNAMIC:
        swaps = _governed_classes() if MODE == "governed" else _dynamic_classes()
        for name, module in list(sys.modules.items()):
            if not name.startswith("tests.") or module is None:
                continue
            for attr in ("Scheduler", "AsyncScheduler"):
                cls = getattr(module, attr, None)
                if cls in swaps:
                    monkeypatch.setattr(module, attr, swaps[cls])
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    entry = _results.setdefault(rep.nodeid, {"outcome": "passed", "message": "", "governed": 0, "select_calls": 0})
    if rep.when == "call":
        entry["governed"] = len(_runtimes)
        entry["select_calls"] = sum(rt.select_calls for rt in _runtimes)
    if rep.failed:
        entry["outcome"] = "failed" if rep.when == "call" else "error"
        entry["message"] = entry["message"] or _first_line(rep)
    elif rep.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "xfailed" if hasattr(rep, "wasxfail") else "skipped"


def _first_line(rep) -> str:
    crash = getattr(rep.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(rep.longrepr)
    return " ".join(text.split())[:400]


def pytest_sessionfinish(session, exitstatus):
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump({"mode": MODE, "results": _results}, f, indent=1, sort_keys=True)
