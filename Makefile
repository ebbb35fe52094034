# graphrag-pipeline: every command a newcomer needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export GRAPHRAG_HOME ?= $(CURDIR)/.graphrag

.PHONY: install demo test lint dev clean help es-start es-stop browser

help:
	@echo "make demo   - create the environment, build the bundled corpus offline, run sample queries"
	@echo "make test   - create the environment if needed, lint (ruff check + format --check), run the full test suite"
	@echo "              (the suite starts its own PostgreSQL from Debian's binaries in /usr/lib/postgresql/*/bin)"
	@echo "make dev    - open the Dagster UI (lineage, sensors, backfills) on GRAPHRAG_HOME"
	@echo "make es-start / es-stop - a local single-node Elasticsearch on 127.0.0.1:9200 (tests use it)"
	@echo "make browser - install Debian's chromium if missing (the web page tests drive it headless)"
	@echo "make clean  - remove GRAPHRAG_HOME state (keeps the environment)"

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e '.[dev]'
	$(BIN)/python -m compileall -q graphrag_pipeline
	touch $(STAMP)

demo: install
	$(BIN)/graphrag-pipeline build --corpus data/corpus --method fast
	$(BIN)/graphrag-pipeline stats --json
	$(BIN)/graphrag-pipeline query "Who sailed with Charles Darwin on HMS Beagle?" --mode local
	$(BIN)/graphrag-pipeline query "What were the main themes of science in Cambridge and London?" --mode global

test: install es-start browser lint
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

es-start:
	scripts/es.sh start

es-stop:
	scripts/es.sh stop

# the headless Chromium of the web page tests (Debian's package; skipped when one is installed)
browser:
	scripts/browser.sh

dev: install
	$(BIN)/graphrag-pipeline dev

clean:
	rm -rf "$(GRAPHRAG_HOME)"

# -- benchmarks (see benchmarks/README.md; not tests, never collected by pytest) -----------------
BENCH_STAMP := $(VENV)/.bench-installed-stamp
BENCH_RUN := $(BIN)/python benchmarks/run.py
BENCH_SMOKE := $(BENCH_RUN) --results-dir benchmarks/results/smoke --work-dir benchmarks/.work/smoke

.PHONY: bench bench-smoke

$(BENCH_STAMP): $(STAMP) benchmarks/requirements.txt
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -r benchmarks/requirements.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_RUN) overhead --method light --chat-latency-ms 300 --repeat 3 --profile
	$(BENCH_RUN) overhead --method general --chat-latency-ms 300 --repeat 3 --profile
	$(BENCH_RUN) nano --chat-latency-ms 300 --concurrency 16
	$(BENCH_RUN) nano --novel --chat-latency-ms 300 --concurrency 16
	$(BENCH_RUN) real --edits 3
	$(BENCH_RUN) real --corpus db-docs --edits 3
	$(BENCH_RUN) scale --docs 1000 10000 50000 --max-minutes 60
	$(BENCH_RUN) query --entities 100000 --questions 200
	$(BENCH_RUN) serve --entities 100000 --questions 200
	$(BENCH_RUN) daemon --repeat 3 --compare-multiprocess
	$(BENCH_RUN) plots

# downloads (linux-doc-6.1, brotli's alice29.txt) are shared with `make bench` through --cache-dir
bench-smoke: $(BENCH_STAMP)
	$(BENCH_SMOKE) overhead --method light --docs 2 --chat-latency-ms 20
	$(BENCH_SMOKE) overhead --method general --docs 2 --chat-latency-ms 20
	$(BENCH_SMOKE) --cache-dir benchmarks/.work/cache real --limit 150 --edits 1
	$(BENCH_SMOKE) scale --docs 20 50 --max-minutes 3 --resolution-names 2000 --resolution-sample 300
	$(BENCH_SMOKE) query --entities 2000 --questions 20
	$(BENCH_SMOKE) serve --entities 2000 --questions 20
	$(BENCH_SMOKE) daemon --repeat 1
	$(BENCH_SMOKE) plots
