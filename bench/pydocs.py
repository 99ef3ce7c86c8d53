"""A retrieval-quality corpus from real text on the machine that is not man pages: the Python
standard library's docstrings. Each docstring of a module, class, function or method whose
summary line has at least four words and whose body has at least 100 characters gives a pair:
the summary is the query, the rest of the docstring is the document that answers it. Duplicates
(re-exported or inherited docstrings) are dropped, on both sides, so every query has exactly one
right document. The set depends on the Python version only; it is built in a child process
(importing the whole standard library has side effects) and cached.

Run as `python -m bench.pydocs OUT.json` to write the pairs.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import pkgutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SKIP = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
    "ensurepip", "venv", "pydoc_data", "xxsubtype", "distutils",
}  # fmt: skip
_MIN_QUERY_WORDS = 4
_MIN_DOC_CHARS = 100


@dataclass(frozen=True)
class Pair:
    key: str
    query: str
    text: str


def _quiet_import(name: str) -> Any:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(name)


def _modules() -> Iterator[str]:
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
        if not found.ispkg:
            continue
        try:
            package = _quiet_import(found.name)
        except BaseException:
            continue
        for sub in pkgutil.walk_packages(package.__path__, found.name + "."):
            parts = sub.name.split(".")[1:]
            if not any(p.startswith("_") or p in ("test", "tests") for p in parts):
                yield sub.name


def _documented(name: str, module: Any) -> Iterator[tuple[str, Any]]:
    yield name, module
    for attr, obj in vars(module).items():
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        yield f"{name}.{attr}", obj
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                function = getattr(value, "__func__", value)
                if not member.startswith("_") and (
                    inspect.isfunction(function) or isinstance(value, property)
                ):
                    yield f"{name}.{attr}.{member}", value


def collect() -> list[Pair]:
    warnings.simplefilter("ignore")
    pairs: list[Pair] = []
    queries: set[str] = set()
    texts: set[str] = set()
    for name in _modules():
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
            if len(query.split()) < _MIN_QUERY_WORDS or len(text) < _MIN_DOC_CHARS:
                continue
            if query in queries or text in texts:
                continue
            queries.add(query)
            texts.add(text)
            pairs.append(Pair(key, query, text))
    return pairs


def load(cache_dir: Path) -> list[Pair]:
    """The pairs for this Python, built once per version in a child process."""
    version = ".".join(map(str, sys.version_info[:3]))
    path = cache_dir / f"pydocs-{version}.json"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "bench.pydocs", str(path)], check=True)
    return [Pair(**item) for item in json.loads(path.read_text())]


if __name__ == "__main__":
    found = collect()
    Path(sys.argv[1]).write_text(json.dumps([vars(pair) for pair in found]))
    print(f"{len(found)} query/document pairs from the standard library's docstrings")
