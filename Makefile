# leakexp — `make demo` runs the pipeline on the toy world, `make test` runs the tests.
# Both create the virtual environment on first use.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Python keeps compiled modules (__pycache__, git-ignored) even where the environment says otherwise: each test
# worker, grid worker and command would otherwise compile leakexp and the tests again (about 6 s a process)
export PYTHONDONTWRITEBYTECODE :=

# one grid cell: make cell CORPUS=robust04 LEAKAGE=msm SIZE=16000 MODEL=monot5 SEED=3
CORPUS ?= toy_robust
LEAKAGE ?= msm
SIZE ?= 1024
MODEL ?= knrm
SEED ?= 1
CELL_EXPERIMENT = $(if $(filter toy_%,$(CORPUS)),demo,paper)
EXPERIMENT ?= demo
ARGS ?=

# the cell variables given on make's command line or in the environment, as overrides (`make check MODEL=monot5`)
GIVEN_CELL = $(foreach v,CORPUS LEAKAGE SIZE MODEL SEED,$(if $(filter command line environment,$(origin $(v))),$(shell echo $(v) | tr A-Z a-z)=$($(v))))
CHECK_EXPERIMENT = $(if $(filter command line environment,$(origin CORPUS)),$(CELL_EXPERIMENT),paper)

.PHONY: help setup lock test test-kernels test-slurm test-slow test-all test-gpu bench-gpu demo fetch check grid cell tables status plan bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv: torch 2.13.0 (CPU build) first, then leakexp with dev extras at requirements.lock's versions, then Anserini's jar

# Anserini 0.22.1's fat jar (bm25.backend=anserini, experiment=paper) ships inside the pyserini 0.22.1 wheel from
# PyPI (a 140 MB download); --no-deps: leakexp drives the jar with java and needs none of pyserini's dependencies.
ANSERINI_WHEEL := pyserini==0.22.1

# requirements.lock: every dependency's exact version (pip constraints), so two machines set up apart run the same code
LOCK := requirements.lock
PIP_VERSION := 26.3

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q pip==$(PIP_VERSION)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c $(LOCK) -e '.[dev]' --config-settings editable_mode=compat  # compat: Hydra finds hydra_plugins/
	$(BIN)/python -m pip install -q --no-deps $(ANSERINI_WHEEL)
	$(BIN)/python -c "from leakexp.lib.bm25 import anserini_jar; print('Anserini jar:', anserini_jar())"
	touch $(STAMP)

lock: ## regenerate requirements.lock: the newest versions pyproject.toml admits, resolved in a fresh environment
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q pip==$(PIP_VERSION)
	.lock-venv/bin/python -m pip install -q torch==2.13.0
	.lock-venv/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '/^#/p' $(LOCK); .lock-venv/bin/python -m pip freeze --exclude-editable | grep -v -E '^(torch|pyserini)=='; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -rf .lock-venv
	@echo "requirements.lock regenerated: review git diff requirements.lock, then make setup installs it"

# a pytest worker per core (at most 4); tests that share an expensive fixture run in one worker (tests/conftest.py)
PARALLEL ?= -n auto --maxprocesses 4 --dist loadgroup

test: setup ## the default test suite (CPU, toy data; slow tests excluded), a worker per core
	$(BIN)/python -m pytest $(PARALLEL) -m "not slow and not gpu" -q $(ARGS)

# the numerically sensitive tests again under PyTorch's portable CPU kernels (no AVX2 / AVX-512), so a test that
# holds only for one instruction set fails here, not on a user's machine
KERNEL_TESTS := tests/test_tokens_words.py tests/test_tokens_hf.py tests/test_knrm.py tests/test_models.py tests/test_fast_path.py
test-kernels: setup ## the numerically sensitive tests under ATEN_CPU_CAPABILITY=default (CI runs them too)
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest $(PARALLEL) -m "not slow and not gpu" -q $(KERNEL_TESTS) $(ARGS)

# the grid through the SLURM launcher on a one-node SLURM 22.05 with accounting that the tests start in a temporary
# directory (tests/slurm_cluster.py; as root it apt-get installs Debian's slurmctld slurmd slurm-client munge slurmdbd
# mariadb-server where missing, and skips with the reason where it cannot)
test-slurm: setup ## the SLURM tests: failures, cancel and resume, preemption, status (CI runs them too)
	$(BIN)/python -m pytest -m slurm -q tests/test_slurm.py $(ARGS)

test-slow: setup ## the slow CPU tests only (end to end on raw corpora, kills and resumes, subprocess races; CI runs them)
	$(BIN)/python -m pytest $(PARALLEL) -m "slow and not gpu" -q $(ARGS)

test-all: setup ## every CPU test, slow ones included
	$(BIN)/python -m pytest $(PARALLEL) -m "not gpu" -q $(ARGS)

# a GPU target on a machine without CUDA says so and stops
NEEDS_CUDA = $(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" || \
	{ echo "$@: no CUDA device here (torch.cuda.is_available() is False); run it on a machine with a GPU"; exit 1; }

test-gpu: setup ## the GPU suite: every model trains and re-ranks on CUDA (bf16) at the paper's shapes
	@$(NEEDS_CUDA)
	$(BIN)/python -m pytest -m gpu -q $(ARGS)

# the one command a GPU machine runs (docs/development.md, "On a GPU machine"): the GPU tests, then the gpu bench's
# baseline and fast rows of monoT5 and monoBERT (and the word models' figures) into $LEAKEXP_STORE/bench/gpu.json, then
# the paper grid's plan from that file; the bench and the plan run even when a test fails, and make fails then
bench-gpu: setup ## on a GPU: the GPU tests, the gpu bench (baseline and fast rows), then plan experiment=paper from its file
	@$(NEEDS_CUDA)
	@status=0; $(BIN)/python -m pytest -m gpu -q $(ARGS) || status=$$?; \
	$(BIN)/python benchmarks/run.py gpu && $(BIN)/leakexp plan experiment=paper && exit $$status

demo: setup ## the whole pipeline on the embedded toy world (CPU, minutes); prints where the tables are
	$(BIN)/leakexp demo $(ARGS)

fetch: setup ## download what the paper's grid reads and is public (models, GloVe, SPIRE-22 files, ir_datasets' public files); lists the rest
	$(BIN)/leakexp fetch experiment=paper $(ARGS)

check: setup ## every input the paper's grid (or the cell CORPUS=… MODEL=… … names) still lacks, in one report
	$(BIN)/leakexp check experiment=$(CHECK_EXPERIMENT) $(GIVEN_CELL) $(ARGS)

grid: setup ## the paper's grid (experiment=paper) as a Hydra multirun; add hydra/launcher=gpu_slurm on a cluster
	$(BIN)/leakexp-run -m experiment=paper $(ARGS)

cell: setup ## one grid cell: make cell CORPUS=… LEAKAGE=… SIZE=… MODEL=… SEED=…
	$(BIN)/leakexp cell experiment=$(CELL_EXPERIMENT) corpus=$(CORPUS) leakage=$(LEAKAGE) size=$(SIZE) model=$(MODEL) seed=$(SEED) $(ARGS)

tables: setup ## regenerate the tables from the store alone (EXPERIMENT=demo|paper)
	$(BIN)/leakexp tables experiment=$(EXPERIMENT) $(ARGS)

status: setup ## what the grid has done, is running, failed or lacks (EXPERIMENT=demo|paper)
	$(BIN)/leakexp status experiment=$(EXPERIMENT) $(ARGS)

plan: setup ## job counts and estimated GPU-hours of the grid (EXPERIMENT=demo|paper)
	$(BIN)/leakexp plan experiment=$(EXPERIMENT) $(ARGS)

bench: setup ## benchmarks: one `name: value` line per measured figure
	$(BIN)/python benchmarks/run.py $(ARGS)

clean: ## remove the store, Hydra outputs and caches (keeps .venv)
	rm -rf store outputs multirun .pytest_cache
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
