# Two commands do all the set-up on a fresh clone:
#   make run    creates .venv, installs vocabtransfer with pinned dependencies, runs the workflow
#               (CONFIG=config/gemma.yaml: an overlay on params.yaml, e.g. Gemma 3 270M as the source)
#   make test   the same set-up, `make lint`, then the test suite on two pytest-xdist workers (what CI runs: .ci/run)
#   make lint   ruff's lint at the rule set of pyproject.toml, ruff format --check, mypy
#   make test-quick   the tests not marked slow (no Snakemake, DVC or real model): the inner loop
#   make crash-matrix   every stage killed at drawn points and inside a write, then rerun (tests/crash_matrix.py);
#                       then one stage of each phase through dvc repro
#   make test-cluster   the SLURM profile against a one-node SLURM started here (root, Debian; tests/cluster/README.md)
#   make remote REMOTE=<dir or URL>   the default DVC remote, for dvc push / dvc pull
#   make docs   regenerates docs/parameters.md from the params schema, the README's layout and docs/layout.md
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# offline data: data/ (the default $VOCABTRANSFER_DATA) is a link to ../shared/data beside the
# checkout when that exists, so Snakemake, DVC and the committed dvc.yaml all name data/… files
DATA_LINK := $(if $(wildcard data),,$(if $(wildcard ../shared/data),data-link))
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: run test test-quick lint bytecode crash-matrix test-cluster venv dvc-yaml docs clean data-link remote

$(BIN)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed $(DATA_LINK)

data-link:
	ln -sfn ../shared/data data

run: venv
	$(BIN)/snakemake --cores $(CORES) $(if $(CONFIG),--configfile $(CONFIG)) $(SNAKEMAKE_ARGS)

# two workers, a module (or a named xdist_group) whole on one worker, the longest groups first (tests/conftest.py)
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# the package's bytecode written once before the tests: where PYTHONDONTWRITEBYTECODE is set (CI), every job,
# Snakemake run and command the tests start would otherwise compile src/vocabtransfer again (about 0.4 s each)
bytecode:
	$(BIN)/python -m compileall -q src

test: venv lint bytecode
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# ruff's lint at the rule set of pyproject.toml [tool.ruff.lint], the formatting (ruff format at [tool.ruff]'s
# line length), then mypy on the files of [tool.mypy]; `make test` (and so CI) runs it first
lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test-quick: venv bytecode
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# the whole crash matrix on a reference run of the tests' workflow config (built first when CRASH_REF is absent),
# through Snakemake and DVC, and the lm_eval stage on a tiny Llama source (CRASH_REF-decoder)
CRASH_REF ?= crash-matrix/reference
crash-matrix: venv
	$(BIN)/python tests/crash_matrix.py --reference $(CRASH_REF) --work crash-matrix/trial $(CRASH_ARGS)
	$(BIN)/python tests/crash_matrix.py --reference $(CRASH_REF) --work crash-matrix/trial --runner dvc $(CRASH_ARGS)
	$(BIN)/python tests/crash_matrix.py --reference $(CRASH_REF)-decoder --work crash-matrix/trial --decoder $(CRASH_ARGS)

# starts the test cluster, runs tests/cluster/check_slurm.py (prints the job table), stops the cluster
test-cluster: venv
	tests/cluster/slurm.sh start
	$(BIN)/python -m pytest -s tests/cluster/check_slurm.py $(PYTEST_ARGS); status=$$?; \
	  tests/cluster/slurm.sh stop; exit $$status

# a shared DVC remote: a directory or a URL (s3://, gs://, ssh://, https:// with the matching dvc extra)
remote: venv
	$(BIN)/vocabtransfer remote "$(REMOTE)"

dvc-yaml: venv
	$(BIN)/vocabtransfer dvc-yaml --output dvc.yaml

docs: venv
	$(BIN)/vocabtransfer params-doc --output docs/parameters.md
	$(BIN)/vocabtransfer layout --write

clean:
	rm -rf results logs .snakemake
