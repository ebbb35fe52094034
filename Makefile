# graphrag-pipeline: every command a newcomer needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export GRAPHRAG_HOME ?= $(CURDIR)/.graphrag

.PHONY: install demo test dev clean help

help:
	@echo "make demo   - create the environment, build the bundled corpus offline, run sample queries"
	@echo "make test   - create the environment if needed and run the full test suite"
	@echo "make dev    - open the Dagster UI (lineage, sensors, backfills) on GRAPHRAG_HOME"
	@echo "make clean  - remove GRAPHRAG_HOME state (keeps the environment)"

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/graphrag-pipeline build --corpus data/corpus --method fast
	$(BIN)/graphrag-pipeline stats --json
	$(BIN)/graphrag-pipeline query "Who sailed with Charles Darwin on HMS Beagle?" --mode local
	$(BIN)/graphrag-pipeline query "What were the main themes of science in Cambridge and London?" --mode global

test: install
	$(BIN)/python -m pytest

dev: install
	$(BIN)/graphrag-pipeline dev

clean:
	rm -rf "$(GRAPHRAG_HOME)"
