PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config.yaml

.PHONY: run test docs bench check-config clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is required: install it or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.run-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test,bench]'
	@touch $@ $(VENV)/.run-installed

run: $(VENV)/.run-installed
	$(BIN)/botgateway run -c $(CONFIG)

check-config: $(VENV)/.run-installed
	$(BIN)/botgateway check-config -c $(CONFIG)

test: $(VENV)/.test-installed
	$(BIN)/lint-imports
	$(BIN)/mypy botgateway adapters tools
	$(BIN)/ruff check botgateway adapters tools tests bench docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The documentation site (mkdocs.yml) into build/site/; `make test` builds it strict, so broken links fail there.
docs: $(VENV)/.test-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build

bench: $(VENV)/.test-installed
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
