"""Builds llama-cpp-python for this CPU without ggml's AMX kernels, once per CPU, and installs
it (`make setup` calls this before installing the rest).

Why: a native build (-march=native) on a CPU that advertises AMX compiles the AMX kernels,
and on VMs that do not grant AMX tiles every quantized model (the chat model's Q4_1
included) dies with SIGILL in ggml_backend_amx_mul_mat. -mno-amx-* keeps everything else
native (AVX-512 and VNNI where there are: a portable -DGGML_NATIVE=OFF build embeds ~30%
slower there). The f16 embedding model never used AMX.

pip's own wheel cache is keyed by the source, not by the CPU or the flags: a wheel built on
another machine would be reused and could hold instructions this one lacks. This cache is
keyed by the version, the flags and this CPU's feature flags.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

X86_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS = "-DGGML_NATIVE=ON"


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pip", required=True, help="the virtualenv's pip")
    parser.add_argument("--version", default="0.3.36")
    parser.add_argument("--extras", default="server")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "ragd" / "llama-cpp-python"
    )
    args = parser.parse_args()
    cflags = X86_FLAGS if platform.machine() in ("x86_64", "AMD64") else ""
    cmake = f"{CMAKE_ARGS} {os.environ.get('LLAMA_CMAKE_ARGS', '')}".strip()
    key = hashlib.sha256(f"{args.version}|{cflags}|{cmake}|{cpu_flags()}".encode()).hexdigest()
    wheels = args.cache / key[:16]
    if not list(wheels.glob("llama_cpp_python-*.whl")):
        print(f"building llama-cpp-python {args.version} for this CPU (a few minutes, once)")
        env = {**os.environ, "CFLAGS": cflags, "CXXFLAGS": cflags, "CMAKE_ARGS": cmake}
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                args.pip,
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-cache-dir",
                "--wheel-dir",
                str(wheels),
                f"llama-cpp-python=={args.version}",
            ],
            env=env,
            check=True,
        )
    [wheel] = sorted(wheels.glob("llama_cpp_python-*.whl"))
    # This wheel over whatever was there, then the extra's dependencies from the index.
    pip = [args.pip, "install", "--quiet"]
    subprocess.run([*pip, "--force-reinstall", "--no-deps", str(wheel)], check=True)
    extra = f"llama-cpp-python[{args.extras}]=={args.version}" if args.extras else None
    if extra:
        subprocess.run([*pip, extra], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
