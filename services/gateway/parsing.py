"""Turns uploaded bytes into text, by file type. Plain Python, no web framework."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser
from pathlib import PurePath

from pypdf import PdfReader
from pypdf.errors import PdfReadError as PdfError

from services.common import json_text


class UnsupportedFile(ValueError):
    """The file type is not one ragd can extract text from."""


class InvalidFile(ValueError):
    """The file claims a supported type but its content cannot be read as such."""


# Nesting of an uploaded .json file: deeper than a document's structure goes, well within
# what json.dumps recurses through to lay it out for indexing.
MAX_FILE_JSON_DEPTH = 200

TEXT_TYPES = {"", ".txt", ".md", ".markdown", ".rst", ".text", ".log"}
SUPPORTED = sorted(TEXT_TYPES - {""} | {".html", ".htm", ".json", ".csv", ".pdf"})


def check_supported(filename: str) -> str:
    """The file's type (its suffix), or UnsupportedFile naming the types that are."""
    suffix = PurePath(filename).suffix.lower()
    if suffix not in TEXT_TYPES and suffix not in {".html", ".htm", ".json", ".csv", ".pdf"}:
        raise UnsupportedFile(
            f"'{filename}': files of type '{suffix}' are not supported; "
            f"supported types: {', '.join(SUPPORTED)}"
        )
    return suffix


def extract_text(filename: str, data: bytes) -> str:
    suffix = check_supported(filename)
    if suffix == ".pdf":
        return _pdf_text(filename, data)
    text = _decode(filename, data)
    if suffix in {".html", ".htm"}:
        text = _html_text(text)
    elif suffix == ".json":
        text = _json_text(filename, text)
    elif suffix == ".csv":
        text = _csv_text(text)
    if not text.strip():
        raise InvalidFile(f"'{filename}' contains no text to index")
    return text


def _decode(filename: str, data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidFile(
            f"'{filename}' is not UTF-8 text (invalid byte at offset {error.start})"
        ) from None
    if "\x00" in text:
        raise InvalidFile(f"'{filename}' contains NUL bytes; it looks binary, not text")
    return text


class _TextCollector(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template"})
    _BLOCK = frozenset(
        "p div br li tr h1 h2 h3 h4 h5 h6 section article pre blockquote table ul ol title".split()
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def _html_text(markup: str) -> str:
    collector = _TextCollector()
    collector.feed(markup)
    collector.close()
    paragraphs = ["".join(block).strip() for block in "".join(collector.parts).split("\n\n")]
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _json_text(filename: str, text: str) -> str:
    try:
        value = json_text.loads(text, max_depth=MAX_FILE_JSON_DEPTH, non_finite=True)
    except json_text.JsonRefused as refused:
        raise InvalidFile(f"'{filename}' {refused.problem}") from None
    # Indented JSON keeps keys next to their values, which is what a search should match.
    return json.dumps(value, indent=1, ensure_ascii=False)


def _csv_text(text: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    header, body = rows[0], rows[1:]
    if not body:
        return ", ".join(header)
    # One line per row, "column: value" pairs, so each chunk carries its column names.
    lines = ["; ".join(f"{h}: {v}" for h, v in zip(header, row, strict=False)) for row in body]
    return "\n\n".join(lines)


def _pdf_text(filename: str, data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except PdfError as error:
        raise InvalidFile(f"'{filename}' is not a readable PDF: {error}") from None
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise InvalidFile(f"'{filename}' has no extractable text (a scanned PDF needs OCR first)")
    return text
