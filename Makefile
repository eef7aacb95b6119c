# banditk: two commands for a fresh machine.
#   make demo   the governor learning K on an embedded synthetic stream (no GPU, no network)
#   make test   every test (creates .venv and installs what it needs)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.banditk-core

.PHONY: demo test bench fuzz soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The core and the dev tools: numpy, scipy, pytest, hypothesis, matplotlib.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(STAMP)
	$(BIN)/banditk demo

test: $(STAMP)
	@set -e; rc=0; $(BIN)/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); nothing to run"; exit 0; fi; \
	exit $$rc

bench: $(STAMP)
	$(BIN)/python experiments/bench_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

fuzz: $(STAMP)
	cd fuzz && ../$(BIN)/python fuzz_inputs.py -max_total_time=$${FUZZ_SECONDS:-3600}

soak: $(STAMP)
	$(BIN)/python experiments/soak.py
