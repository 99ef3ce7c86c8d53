"""A real corpus from this machine: man pages rendered to plain text, cached once.

Documents (scenario 2) are whole rendered pages; snippets (scenarios 1 and 3) are their
paragraphs. Pages are taken in sorted path order, so every run on a machine sees the same texts.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAN_GLOB = "man[1-8]/*.gz"
MAN_ROOT = Path("/usr/share/man")
# groff: tbl preprocessing, man macros, UTF-8, no SGR colours, no bold/underline overstrikes.
_GROFF = ["groff", "-t", "-man", "-Tutf8", "-P-cbou"]
_RENDER_TIMEOUT = 20.0
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def man_pages(root: Path = MAN_ROOT) -> list[Path]:
    """English man pages, one per real file (links to the same page are skipped), sorted."""
    seen: set[Path] = set()
    pages = []
    for path in sorted(root.glob(MAN_GLOB)):
        real = path.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        pages.append(path)
    return pages


def render(path: Path) -> str | None:
    """The page as plain text, or None when it is only a `.so` include or groff fails."""
    try:
        source = gzip.decompress(path.read_bytes())
    except (OSError, EOFError):
        return None
    if source.lstrip().startswith(b".so "):
        return None
    try:
        done = subprocess.run(
            _GROFF,
            input=source,
            capture_output=True,
            timeout=_RENDER_TIMEOUT,
            check=False,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.decode("utf-8", errors="replace").strip()
    return text if done.returncode == 0 and text else None


class Corpus:
    """Rendered pages, cached as JSON lines under `cache_dir` and extended on demand."""

    def __init__(self, cache_dir: Path, root: Path = MAN_ROOT) -> None:
        self._file = cache_dir / "manpages.jsonl"
        self._root = root
        self._pages: list[Document] | None = None
        self._rendered = 0

    def _load(self) -> list[Document]:
        if self._pages is None:
            self._pages = []
            if self._file.exists():
                with self._file.open(encoding="utf-8") as lines:
                    for line in lines:
                        record = json.loads(line)
                        self._rendered = max(self._rendered, record["position"] + 1)
                        if record["text"] is not None:
                            self._pages.append(Document(record["name"], record["text"]))
        return self._pages

    def _extend(self, batch: int = 200) -> bool:
        """Renders the next `batch` pages (two groff processes at a time); False when none
        are left."""
        pages = self._load()
        todo = man_pages(self._root)[self._rendered : self._rendered + batch]
        if not todo:
            return False
        with ThreadPoolExecutor(max_workers=2) as pool:
            texts = list(pool.map(render, todo))
        self._file.parent.mkdir(parents=True, exist_ok=True)
        with self._file.open("a", encoding="utf-8") as out:
            for offset, (path, text) in enumerate(zip(todo, texts, strict=True)):
                name = path.name.removesuffix(".gz") + ".txt"
                record = {"position": self._rendered + offset, "name": name, "text": text}
                out.write(json.dumps(record) + "\n")
                if text is not None:
                    pages.append(Document(name, text))
        self._rendered += len(todo)
        return True

    def pages(self) -> Iterator[Document]:
        """Every page in order, rendering more as the caller asks for them."""
        index = 0
        while True:
            pages = self._load()
            while index < len(pages):
                yield pages[index]
                index += 1
            if not self._extend():
                return

    def documents(self, count: int, min_chars: int, max_chars: int) -> list[Document]:
        """The first `count` pages whose text length is within [min_chars, max_chars]."""
        chosen: list[Document] = []
        for page in self.pages():
            if len(chosen) >= count:
                break
            if min_chars <= len(page.text) <= max_chars:
                chosen.append(page)
        if len(chosen) < count:
            raise RuntimeError(
                f"only {len(chosen)} man pages of {min_chars}-{max_chars} characters on this "
                f"machine; ask for fewer documents"
            )
        return chosen

    def snippets(self, count: int, min_chars: int = 40, max_chars: int = 300) -> list[str]:
        """The first `count` distinct paragraphs of [min_chars, max_chars] characters."""
        found: list[str] = []
        seen: set[str] = set()
        for page in self.pages():
            for snippet in paragraphs(page.text, min_chars, max_chars):
                if snippet not in seen:
                    seen.add(snippet)
                    found.append(snippet)
                    if len(found) >= count:
                        return found
        raise RuntimeError(f"only {len(found)} distinct paragraphs in this machine's man pages")


def paragraphs(text: str, min_chars: int, max_chars: int) -> list[str]:
    """Blank-line separated blocks with whitespace collapsed, kept when their length fits."""
    blocks = (_SPACES.sub(" ", block).strip() for block in re.split(r"\n\s*\n", text))
    return [block for block in blocks if min_chars <= len(block) <= max_chars]
