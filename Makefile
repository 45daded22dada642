# Set-up and checks; every target makes its own environment from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv demo test lint migrate

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/talaria-relay demo

# The suite runs in worker processes (pytest-xdist). It mostly waits (on Postgres, sockets, child
# processes), so more workers than cores pays; `make test TEST_WORKERS=0` runs it in one process.
# The few tests that take a minute are collected first (tests/conftest.py) and handed out one at a
# time (xdist would otherwise give one worker a run of consecutive tests), so they start at once.
TEST_WORKERS ?= 4

test: venv
	$(BIN)/pytest -n $(TEST_WORKERS) --maxschedchunk 1

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict relay tests

migrate: venv
	$(BIN)/talaria-relay migrate
