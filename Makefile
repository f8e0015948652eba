# Two commands for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment on first use and installs raylog into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench install

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# The Spark connector (format("raylog")) is compiled from its Java sources with javac
# against the jars of the installed packages; a no-op when its sources did not change.
install: $(BIN)/.installed
	$(BIN)/python -m raylog.spark_build > /dev/null

demo: install
	$(BIN)/raylog demo

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python benchmarks/storage.py --quick
