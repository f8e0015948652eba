# Two commands for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment on first use and installs raylog into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench install kcat

# setup.py builds raylog/kafka/_records.c and raylog/records/_append.c: installing again
# recompiles them.
$(BIN)/.installed: pyproject.toml setup.py raylog/kafka/_records.c raylog/records/_append.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# The Spark connector (format("raylog")) is compiled from its Java sources with javac
# against the jars of the installed packages; a no-op when its sources did not change.
install: $(BIN)/.installed
	$(BIN)/python -m raylog.integrations.spark.build > /dev/null

demo: install
	$(BIN)/raylog demo

# Debian's kcat (an older librdkafka) is one of the Kafka clients tests/integration/
# test_kafka_gateway.py runs against the Kafka listener: installed when it is missing and this
# can (root, apt); otherwise that test is skipped and says why.
kcat:
	@command -v kcat > /dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null && \
	    { apt-get install -y kcat > /dev/null 2>&1 || \
	      { apt-get update > /dev/null && apt-get install -y kcat > /dev/null; }; }; } || \
	  echo "kcat is missing and cannot be installed here: its test is skipped"

test: install kcat
	$(BIN)/python -m pytest -q --durations=30

lint: install
	$(BIN)/ruff check .

# The benchmark suite (benchmarks/suite.py) next to its peers. Redis Streams is one: Debian's
# redis-server is installed when it is missing and this can (root, apt); otherwise the suite
# runs without it and says so. Apache Kafka is another: its jars (and Spark's Kafka source)
# are fetched with Maven into a cache by benchmarks/kafka_peer.py; without java or mvn the
# suite runs without Kafka and says so. BENCH_ARGS="--out DIR --publish" for other runs.
BENCH_ARGS ?= --quick

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

bench: install $(BIN)/.bench-installed
	@command -v redis-server > /dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null && \
	    { apt-get install -y redis-server > /dev/null 2>&1 || \
	      { apt-get update > /dev/null && apt-get install -y redis-server > /dev/null; }; }; } || \
	  echo "redis-server is missing and cannot be installed here: the suite runs without Redis"
	$(BIN)/python benchmarks/kafka_peer.py fetch
	$(BIN)/python benchmarks/suite.py $(BENCH_ARGS)
