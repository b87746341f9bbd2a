# Two commands do all the set-up on a fresh clone:
#   make run    creates .venv, installs vocabtransfer with pinned dependencies, runs the workflow
#   make test   the same set-up, then the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# offline data: ../shared/data beside the checkout unless VOCABTRANSFER_DATA is set
VOCABTRANSFER_DATA ?= $(abspath $(firstword $(wildcard ../shared/data) data))
export VOCABTRANSFER_DATA
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: run test venv dvc-yaml clean

$(BIN)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

run: venv
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

dvc-yaml: venv
	$(BIN)/vocabtransfer dvc-yaml --output dvc.yaml

clean:
	rm -rf results logs .snakemake
