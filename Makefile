# Set-up and checks; every target makes its own environment from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv demo test lint migrate docs bench

# The pip of $(PYTHON) brings uv into a venv made without pip (its own pip costs 4 s more; with a
# pip older than 22.3, or none, the venv gets its own), and uv installs pip, the project and its
# extra: resolved as pip resolves and linked from uv's cache (`make venv` ~3 s on two cores, ~24 s
# with pip alone). Nothing is compiled ahead: `make test` writes the bytecode of what it imports
# (a first run's workers each compile it, ~7 s of CPU; compiling all of site-packages ahead adds
# 2-6 s to `make venv`, and `make venv && make test` took no less time for it).
define install
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv 2>/dev/null || \
	    { $(BIN)/python -m ensurepip --default-pip && $(BIN)/python -m pip install --quiet uv; }
	$(BIN)/uv pip install --quiet --python $(BIN)/python pip -e '.[$(1)]'
	touch $@
endef

$(BIN)/.installed: pyproject.toml
	$(call install,test)

venv: $(BIN)/.installed

# The demo needs the package and the dev relay's server, nothing of the test toolchain: its own
# stamp, so `make demo` on a fresh clone installs only `.[devrelay]` (a `make venv` has it all).
$(BIN)/.demo-installed: pyproject.toml
	$(call install,devrelay)

demo: $(BIN)/.demo-installed
	$(BIN)/talaria-relay demo

# The suite runs in worker processes (pytest-xdist). Many tests wait (on leases, sockets, child
# processes), so more workers than cores pays: on two cores, 4 workers left the CPU idle 10% of the
# run (vmstat), 6 left it 2%. `make test TEST_WORKERS=0` runs it in one process.
# The few tests that take a minute are collected first (tests/conftest.py) and each is handed out
# alone, so they start at once; the deployed-Postgres tests are one group, run by one worker, which
# makes their clusters and PgBouncers once.
TEST_WORKERS ?= 6

# Bytecode caches are written whatever the environment says (some sandboxes set
# PYTHONDONTWRITEBYTECODE): otherwise every child interpreter the suite starts compiles the package
# from source again, and a second run rewrites every test module's asserts again.
test: venv
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict relay tests benchmarks

# The bench (benchmarks/, docs/performance.md): a checkout's tool, never in the wheel. STORE is a
# store URL to measure (a Postgres server gets scratch databases); ARGS go to the bench as they are:
#   make bench STORE=postgresql://postgres@127.0.0.1:5432/postgres ARGS='--quick --json'
bench: venv
	$(BIN)/python -m benchmarks $(if $(STORE),--store '$(STORE)') $(ARGS)

migrate: venv
	$(BIN)/talaria-relay migrate

# The manual, built as CI builds it: a broken link, anchor, nav entry or API reference fails.
# Its own stamp, as the demo's: MkDocs needs the `docs` extra, not the test toolchain
# (mkdocstrings reads the source, it imports nothing of it).
$(BIN)/.docs-installed: pyproject.toml
	$(call install,docs)

docs: $(BIN)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
