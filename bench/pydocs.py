"""A retrieval-quality corpus from real text on the machine that is not man pages: Python
docstrings, of the standard library and of the scientific packages `make bench` installs
(numpy, scipy, sympy, scikit-learn, networkx, matplotlib; those missing are left out and the
corpus says which were used).

Each docstring of a module, class or function whose summary line has at least four words (and
is not a call signature) and whose body has at least 100 characters gives a pair: the summary
is the query, the rest of the docstring is the document that answers it. A class's document
also holds the docstrings of its public methods and properties, the way `help()` shows a
class, so documents run from a paragraph to a few thousand words (several chunks each, like
real technical documents). Duplicates (re-exported or inherited docstrings) are dropped, on
both sides, so every query has exactly one right document.

`corpus(pairs, n)` picks the n longest documents (the evaluation's store: 2,000 documents of
~3,000 characters on average); a smaller n takes an even spread of those 2,000, not the n
longest. The pairs depend on the Python and package versions only; they are built in a child
process (importing these packages has side effects) and cached under a key of those versions.

Run as `python -m bench.pydocs OUT.json` to write the pairs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import io
import json
import pkgutil
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SKIP = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
    "ensurepip", "venv", "pydoc_data", "xxsubtype", "distutils",
}  # fmt: skip
# Import name and distribution name of the third-party packages read, when installed.
PACKAGES = (
    ("numpy", "numpy"), ("scipy", "scipy"), ("sympy", "sympy"), ("sklearn", "scikit-learn"),
    ("networkx", "networkx"), ("matplotlib", "matplotlib"),
)  # fmt: skip
_MIN_QUERY_WORDS = 4
_MIN_DOC_CHARS = 100
# A class with hundreds of methods is cut here (~5,000 tokens, ~20 chunks).
_MAX_DOC_CHARS = 20_000
# "triangular(left, mode, right, size=None)": a C function's first line is its signature.
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)(\s*->.*)?$")
CORPUS_DOCS = 2_000
_CORPUS_VERSION = 2


@dataclass(frozen=True)
class Pair:
    key: str
    query: str
    text: str


def _quiet_import(name: str) -> Any:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(name)


def _public(name: str) -> bool:
    skip = ("test", "tests", "testing", "conftest")
    return not any(part.startswith("_") or part in skip for part in name.split(".")[1:])


def _stdlib_modules() -> Iterator[str]:
    stdlib = [
        m
        for m in pkgutil.iter_modules()
        if getattr(m.module_finder, "path", "").startswith(sys.base_prefix)
        and "site-packages" not in getattr(m.module_finder, "path", "")
    ]
    for found in sorted(stdlib, key=lambda m: m.name):
        if found.name.startswith("_") or found.name in _SKIP:
            continue
        yield found.name
        if found.ispkg:
            yield from _submodules(found.name)


def _submodules(name: str) -> Iterator[str]:
    try:
        package = _quiet_import(name)
    except BaseException:
        return
    for sub in pkgutil.walk_packages(
        getattr(package, "__path__", []), name + ".", onerror=lambda _: None
    ):
        if _public(sub.name):
            yield sub.name


def _members(cls: type) -> Iterator[str]:
    """The public methods and properties of a class, as help() lists them."""
    for member, value in vars(cls).items():
        function = getattr(value, "__func__", value)
        if member.startswith("_") or not (
            inspect.isfunction(function) or isinstance(value, property)
        ):
            continue
        doc = inspect.getdoc(value)
        if not doc:
            continue
        try:
            signature = str(inspect.signature(function)) if inspect.isfunction(function) else ""
        except (TypeError, ValueError):
            signature = "(...)"
        body = "\n".join("    " + line if line else "" for line in doc.splitlines())
        yield f"{member}{signature}\n{body}"


def _documented(name: str, module: Any) -> Iterator[tuple[str, Any]]:
    yield name, module
    for attr, obj in vars(module).items():
        if not attr.startswith("_") and getattr(obj, "__module__", None) == name:
            yield f"{name}.{attr}", obj


def collect(packages: Sequence[str]) -> list[Pair]:
    warnings.simplefilter("ignore")
    pairs: list[Pair] = []
    queries: set[str] = set()
    texts: set[str] = set()
    names = [*_stdlib_modules()]
    for package in packages:
        names += [package, *_submodules(package)]
    for name in names:
        try:
            module = _quiet_import(name)
        except BaseException:
            continue
        for key, obj in _documented(name, module):
            doc = inspect.getdoc(obj)
            if not doc or "\n\n" not in doc:
                continue
            summary, rest = doc.split("\n\n", 1)
            query, text = " ".join(summary.split()), rest.strip()
            if len(query.split()) < _MIN_QUERY_WORDS or _SIGNATURE.match(query):
                continue
            if len(text) < _MIN_DOC_CHARS:
                continue
            if inspect.isclass(obj):
                text = "\n\n".join([text, *_members(obj)])
            text = text[:_MAX_DOC_CHARS]
            if query in queries or text in texts:
                continue
            queries.add(query)
            texts.add(text)
            pairs.append(Pair(key, query, text))
    return pairs


def installed() -> list[tuple[str, str]]:
    """(import name, version) of the PACKAGES installed here."""
    found = []
    for module, distribution in PACKAGES:
        try:
            found.append((module, importlib.metadata.version(distribution)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def corpus(pairs: Sequence[Pair], n: int) -> list[Pair]:
    """The evaluation's documents: the CORPUS_DOCS longest, or an even spread of n of them."""
    ranked = sorted(pairs, key=lambda pair: (-len(pair.text), pair.key))[:CORPUS_DOCS]
    if n >= len(ranked):
        return ranked
    return [ranked[i * len(ranked) // n] for i in range(n)]


def load(cache_dir: Path) -> tuple[list[Pair], list[tuple[str, str]]]:
    """All pairs for this Python and these packages (built once, in a child process), and the
    packages they came from with their versions."""
    packages = installed()
    python = ".".join(map(str, sys.version_info[:3]))
    key = f"{_CORPUS_VERSION} {python} {packages}"
    path = cache_dir / f"pydocs-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "bench.pydocs", str(path), *[m for m, _ in packages]]
        subprocess.run(command, check=True)
    return [Pair(**item) for item in json.loads(path.read_text())], packages


if __name__ == "__main__":
    found = collect(sys.argv[2:])
    Path(sys.argv[1]).write_text(json.dumps([vars(pair) for pair in found]))
    print(f"{len(found)} query/document pairs from docstrings (stdlib, {', '.join(sys.argv[2:])})")
