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

test: venv
	$(BIN)/pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict relay tests

migrate: venv
	$(BIN)/talaria-relay migrate
