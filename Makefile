# Two entry points for a fresh Debian machine: `make demo` and `make test`. Both install what they
# need (apt packages, a .venv) and are safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
APT_PACKAGES := python3 python3-venv python3-pip
SHARED_FIXTURES := ../shared/fixtures

.PHONY: demo test lint typecheck unit deps apt clean

# Debian packages (only what is missing; needs root or sudo).
.stamp-apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && ! $(PYTHON) -m venv --help >/dev/null 2>&1; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q $$missing; \
	fi
	@touch $@

$(BIN)/python: | .stamp-apt
	$(PYTHON) -m venv $(VENV)

# Re-installs when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

deps: $(VENV)/.installed

lint: deps
	$(BIN)/ruff check .

typecheck: deps
	$(BIN)/mypy

unit: deps
	$(BIN)/pytest -q

test: lint typecheck unit

demo: deps
	@bash demo/run-fixture-node.sh

clean:
	rm -rf $(VENV) .stamp-* .mypy_cache .ruff_cache .pytest_cache
