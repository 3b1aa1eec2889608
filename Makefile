VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run embedded test lint typecheck bench soak demo-crash clean

PACKAGE_SOURCES := $(shell find leaseward runtime actors storage -name '*.py' -o -name '*.sql')

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# A regular (not editable) install, redone whenever a source file changes: the
# console script and every subprocess run exactly what the wheel would hold.
$(STAMP): $(BIN)/python pyproject.toml $(PACKAGE_SOURCES)
	$(BIN)/python -m pip install --quiet '.[test]'
	touch $(STAMP)

DEMO_STORE ?= sqlite:///leaseward.db

# The main job: the daemon on ./leaseward.db serving the example app, with a few
# demo runs queued first. Its logs show their progress; Ctrl-C drains and exits.
run: $(STAMP)
	$(BIN)/leaseward migrate --store $(DEMO_STORE)
	$(BIN)/leaseward submit cashier --input '"A-1"' --store $(DEMO_STORE)
	$(BIN)/leaseward submit greeter --input '"hello"' --store $(DEMO_STORE)
	$(BIN)/leaseward submit confused --input '"clean up"' --store $(DEMO_STORE)
	$(BIN)/leaseward daemon --app examples.quickstart:build_app --store $(DEMO_STORE) \
		--log-format console --poll-interval-seconds 0.2

embedded: $(STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check leaseward runtime actors storage tests bench examples
	$(BIN)/ruff format --check leaseward runtime actors storage tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict -p leaseward

test: lint typecheck
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/steps.py

# A daemon SIGKILLed in the middle of charging a card, another taking over, and an
# operator's resolve: narrated in plain sentences (examples/demo_crash.py).
demo-crash: $(STAMP)
	$(BIN)/python examples/demo_crash.py

SOAK_FLAGS ?= --kills 1000 --faults 10000 --minutes 20

# Thousands of kills, pauses and store faults on SQLite and PostgreSQL, then the
# invariants counted from the tools' ledger and the journal (tests/proof/soak.py).
# The workers run the source tree, crash points included.
soak: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python tests/proof/soak.py $(SOAK_FLAGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
