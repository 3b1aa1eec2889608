VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run console console-screenshots embedded test test-fast lint typecheck docs check-model bench bench-instructions bench-peers bench-leases bench-console soak demo-crash clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# An editable install: the layer folders at the repository root are mapped into the
# leaseward namespace (pyproject.toml's package-dir), so every edit is what the tests,
# the console script and every subprocess run, and tracebacks name the files as they
# are in the checkout. tests/acceptance/test_wheel.py builds and installs the real
# wheel. setuptools may leave a ./build folder behind; it is removed, since a stale
# copy there would be found by grep and type checkers, and would shadow the build
# package for `python -m build`.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --editable '.[test,bench]'
	rm -rf build
	touch $(STAMP)

DEMO_STORE ?= sqlite:///leaseward.db

# The main job: the daemon on ./leaseward.db serving the example app, with a few
# demo runs queued first. Its logs show their progress; the refund waits for
# approval (leaseward approvals, leaseward approve RUN_ID); Ctrl-C drains and exits.
run: $(STAMP)
	$(BIN)/leaseward migrate --store $(DEMO_STORE)
	$(BIN)/leaseward submit cashier --input '"A-1"' --store $(DEMO_STORE)
	$(BIN)/leaseward submit greeter --input '"hello"' --store $(DEMO_STORE)
	$(BIN)/leaseward submit confused --input '"clean up"' --store $(DEMO_STORE)
	$(BIN)/leaseward submit refunder --input '"A-2"' --store $(DEMO_STORE)
	$(BIN)/leaseward daemon --app examples.quickstart:build_app --store $(DEMO_STORE) \
		--log-format console --poll-interval-seconds 0.2

# The operator console on the quick start's store (make run first, in another terminal):
# http://127.0.0.1:8787/. It reads only, unless LEASEWARD_CONSOLE_TOKEN holds the
# operators' login token.
console: $(STAMP)
	$(BIN)/leaseward console --store $(DEMO_STORE)

# $(call system_package,COMMANDS,PACKAGE,WHAT NEEDS IT): the recipe of a stamp that
# stands for a program from the distribution's packages. Touched when one of COMMANDS
# is on PATH; else PACKAGE is installed with apt-get (as root, or through sudo); where
# it cannot be, one line says what cannot run, and the stamp is not made.
define system_package
	@if $(foreach command,$(1),command -v $(command) >/dev/null 2>&1 ||) false; then \
		touch $@; \
	elif command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
		echo "installing $(2) from the distribution's packages"; \
		{ $$sudo apt-get update && $$sudo apt-get install -y $(2) && touch $@; } || \
			echo "could not install $(2): $(3)"; \
	else \
		echo "no $(2) and no apt-get: $(3)"; \
	fi
endef

CHROMIUM_STAMP := $(VENV)/.chromium

# The browser the console's tests drive: Chromium from the distribution's packages.
# Playwright never downloads one. Where it cannot be installed, the browser tests say
# so (.ci/run makes that a failure).
$(CHROMIUM_STAMP): | $(BIN)/python
	$(call system_package,chromium chromium-browser,chromium,the console's browser tests cannot run)

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

VALGRIND_STAMP := $(VENV)/.valgrind

# valgrind, which bench/step_instructions.py counts a step's instructions with (and its
# test runs). Where it cannot be installed, that test says so (.ci/run makes that a
# failure).
$(VALGRIND_STAMP): | $(BIN)/python
	$(call system_package,valgrind,valgrind,bench/step_instructions.py cannot run)

# Screenshots of every console page into docs/images (docs/guides/console.md shows them).
console-screenshots: $(STAMP) $(CHROMIUM_STAMP)
	$(BIN)/python -m tests.acceptance.console_screenshots docs/images

embedded: $(STAMP)
	$(BIN)/python examples/quickstart.py

# ruff, and the layer contract (tests/checks/layers.py): imports point kernel <- storage
# <- actors <- shell <- facade, and the kernel does no I/O.
lint: $(STAMP)
	$(BIN)/ruff check leaseward runtime actors storage tests bench examples docs/hooks
	$(BIN)/ruff format --check leaseward runtime actors storage tests bench examples docs/hooks
	$(BIN)/python -m tests.checks.layers

# mypy --strict over the package as the wheel names its modules, the tests and the
# benchmarks (tests/checks/typecheck.py says why mypy is not called by its command).
typecheck: $(STAMP)
	$(BIN)/python -m tests.checks.typecheck

# Two pytest worker processes (pytest-xdist): most tests wait on real worker processes,
# servers and browsers rather than compute, so two share the machine's two cores and
# take about half the time of one. TEST_WORKERS=0 runs the suite in this process. The
# tests marked serial restart the PostgreSQL server every test shares: they run alone,
# after the rest.
TEST_WORKERS ?= 2

test: lint typecheck $(CHROMIUM_STAMP) $(VALGRIND_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not serial"
	$(BIN)/python -m pytest -m serial

# Everything but the tests marked slow (real worker processes killed, paused and
# waited for; benchmarks and the wheel built end to end), for the edit-test loop.
# make test runs them all.
test-fast: lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not slow and not serial"
	$(BIN)/python -m pytest -m "serial and not slow"

DOCS_STAMP := $(VENV)/.docs-installed

# The documentation tools (the docs extra), on top of the package's own install:
# the CLI page runs the installed leaseward.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --editable '.[docs]'
	rm -rf build
	touch $@

# The site (mkdocs.yml, docs/) into site/. Strict: any warning fails it (a broken
# link or anchor, an API reference that does not resolve, a page left out of the nav).
# NO_MKDOCS_2_WARNING keeps the theme's notice about MkDocs 2.0 out of the log.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The model checker at its deep bound (tests/proof/check_model.py): every interleaving of
# two workers driving the RunMachine over a simulated store, with crashes, pauses, lost and
# delayed answers, refusals, clock steps, a stop and operator actions, to a depth. Its last
# line: model check: N states, M transitions, 0 violations. make test runs a small bound.
check-model: $(STAMP)
	$(BIN)/python -m tests.proof.check_model $(CHECK_MODEL_FLAGS)

bench: $(STAMP)
	$(BIN)/python bench/steps.py

# The instructions a durable step costs, by layer, counted by valgrind: unlike a time,
# no other load on the machine moves them. About seven minutes.
bench-instructions: $(STAMP) $(VALGRIND_STAMP)
	$(BIN)/python bench/step_instructions.py

PEERS_VENV := bench/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
PEERS_FLAGS ?=

# DBOS Transact, LangGraph and procrastinate (bench/peers/requirements.txt) in a venv
# of their own, never in leaseward's: made anew when it is missing or the pins change.
$(PEERS_STAMP): bench/peers/requirements.txt
	rm -rf $(PEERS_VENV)
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers/requirements.txt || { \
		echo "bench-peers: the pins did not install together; installing them one by one"; \
		for pin in $$(grep -v '^#' bench/peers/requirements.txt); do \
			$(PEERS_VENV)/bin/python -m pip install --quiet -c bench/peers/requirements.txt "$$pin" || \
				echo "bench-peers: could not install $$pin"; \
		done; \
		exit 1; }
	touch $@

# leaseward side by side with DBOS, LangGraph, procrastinate and raw SQLite, in one
# run (bench/peers/compare.py, standard library only): the SQLite matrix at
# N=1,10,100,1000 with ratios and targets, durable-write latency, a submit loop,
# PostgreSQL at N=100, bench/claims.py and bench/memory.py. About 9 minutes on
# 2 cores. A peer that failed to install, or a PostgreSQL that cannot be reached,
# is reported as not run; the rest is still measured. PEERS_FLAGS passes flags:
# PEERS_FLAGS=--quick for a smoke test, PEERS_FLAGS="--no-pg --no-scaling --levels 100".
bench-peers: $(STAMP)
	@$(MAKE) --no-print-directory $(PEERS_STAMP) || \
		echo "bench-peers: installing the peers into $(PEERS_VENV) failed (see above); running what can run"
	$(BIN)/python bench/peers/compare.py --peers-python $(PEERS_VENV)/bin/python $(PEERS_FLAGS)

LEASES_FLAGS ?=

# Leases and reaping with real worker processes (bench/leases.py): how soon a
# SIGKILLed worker's runs run again, whether live workers are ever reaped, and four
# PostgreSQL workers with one killed over and over. About 12 minutes;
# LEASES_FLAGS=--quick for a pass under 2 minutes.
bench-leases: $(STAMP)
	$(BIN)/python bench/leases.py $(LEASES_FLAGS)

CONSOLE_FLAGS ?=

# The operator console's run listing on 10k and 1M runs, SQLite and PostgreSQL
# (bench/console.py): p50/p99 of each page shape and its query plan. A few minutes;
# CONSOLE_FLAGS="--runs 10000" for a pass of seconds.
bench-console: $(STAMP)
	$(BIN)/python bench/console.py $(CONSOLE_FLAGS)

# A daemon SIGKILLed in the middle of charging a card, another taking over, and an
# operator's resolve: narrated in plain sentences (examples/demo_crash.py).
demo-crash: $(STAMP)
	$(BIN)/python examples/demo_crash.py

SOAK_FLAGS ?= --kills 1000 --faults 10000 --minutes 20

# Thousands of kills, pauses and store faults on SQLite and PostgreSQL, then the
# invariants counted from the tools' ledger and the journal (tests/proof/soak.py).
# The workers run the source tree, crash points included.
soak: $(STAMP)
	$(BIN)/python -m tests.proof.soak $(SOAK_FLAGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache site
