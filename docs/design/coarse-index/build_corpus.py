"""Collects real text snippets from this machine (man pages, /usr/share/doc, licenses, Python
docstrings), deduplicates them, and writes corpus + held-out query texts.

Output: /tmp/coarse/corpus_texts.jsonl ({"text", "source"}), /tmp/coarse/query_texts.jsonl.
"""

from __future__ import annotations

import ast
import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

random.seed(1234)
TARGET = 100_000
N_QUERIES = 500
MIN_CHARS, MAX_CHARS = 40, 700

_ESC = re.compile(r"\\f(\[[^\]]*\]|\(..|.)|\\\(..|\\\*(\(..|\[[^\]]*\]|.)|\\[&|^%~:]|\\s[-+]?\d")


def clean_troff(line: str) -> str:
    line = _ESC.sub("", line)
    line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\ ", " ").replace('\\"', "")
    return line


def man_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """(paragraph, is_name_section) pairs from a troff man page, crudely stripped."""
    try:
        raw = gzip.open(path, "rt", errors="replace").read()
    except (OSError, EOFError):
        return
    if raw.startswith(".so "):
        return
    section = ""
    buf: list[str] = []

    def flush() -> Iterator[tuple[str, bool]]:
        if buf:
            yield " ".join(buf), section == "NAME"
            buf.clear()

    for line in raw.splitlines():
        if line.startswith((".", "'")):
            macro = line[1:3].strip()
            if macro == "SH":
                yield from flush()
                section = clean_troff(line[3:]).strip().strip('"').upper()
            elif macro in ("PP", "P", "LP", "TP", "IP", "HP", "SS", "RS", "RE", "sp", "br", "TH"):
                yield from flush()
            elif macro in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"):
                text = clean_troff(line[3:]).replace('"', "").strip()
                if text:
                    buf.append(text)
            continue
        text = clean_troff(line).strip()
        if not text:
            yield from flush()
        else:
            buf.append(text)
    yield from flush()


def text_paragraphs(text: str) -> Iterator[str]:
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if para:
            yield para


def doc_files() -> Iterator[Path]:
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        name = path.name.lower()
        if name.endswith((".html", ".htm", ".png", ".svg", ".jpg", ".js", ".css", ".pdf")):
            continue
        yield path


def read_doc(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            data = gzip.open(path, "rb").read(400_000)
        else:
            data = path.read_bytes()[:400_000]
    except (OSError, EOFError):
        return ""
    if b"\0" in data[:4096]:
        return ""
    return data.decode("utf-8", errors="replace")


def docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, OSError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield from text_paragraphs(doc)


_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def split_long(para: str) -> Iterator[str]:
    if len(para) <= MAX_CHARS:
        yield para
        return
    current = ""
    for sentence in _SENT.split(para):
        if current and len(current) + len(sentence) + 1 > 450:
            yield current
            current = ""
        current = f"{current} {sentence}".strip()
    if current:
        yield current[:MAX_CHARS * 2]


def good(text: str) -> bool:
    if not MIN_CHARS <= len(text) <= MAX_CHARS * 2:
        return False
    letters = sum(ch.isalpha() for ch in text)
    return letters / len(text) > 0.6 and len(text.split()) >= 6


def main() -> None:
    pool: dict[str, str] = {}  # normalized -> source
    texts: dict[str, str] = {}
    names: list[str] = []

    def add(text: str, source: str, cap_state: list[int]) -> None:
        for piece in split_long(text):
            if not good(piece) or cap_state[0] <= 0:
                continue
            key = " ".join(piece.lower().split())
            if key in pool:
                continue
            pool[key] = source
            texts[key] = piece
            cap_state[0] -= 1

    # Man pages (English sections only), NAME lines kept aside as query material.
    man_files = sorted(Path("/usr/share/man").glob("man*/*.gz"))
    for path in man_files:
        cap = [60]
        for para, is_name in man_paragraphs(path):
            if is_name:
                if " - " in para:
                    desc = para.split(" - ", 1)[1].strip()
                    if len(desc.split()) >= 3:
                        names.append(desc)
                continue
            add(para, f"man:{path.name}", cap)
    print("man", len(texts))
    for path in doc_files():
        cap = [80]
        for para in text_paragraphs(read_doc(path)):
            add(para, f"doc:{path}", cap)
    print("+doc", len(texts))
    for path in sorted(Path("/usr/share/common-licenses").glob("*")):
        if path.is_file():
            cap = [200]
            for para in text_paragraphs(read_doc(path)):
                add(para, f"license:{path.name}", cap)
    print("+licenses", len(texts))
    roots = [Path("/usr/lib/python3.11"), Path("/usr/lib/python3/dist-packages"),
             Path("/work/main/.venv/lib/python3.11/site-packages")]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "/test" in str(path):
                continue
            cap = [40]
            for para in docstrings(path):
                add(para, f"py:{path}", cap)
    print("+docstrings", len(texts))

    keys = list(texts)
    random.shuffle(keys)
    # gcloud's ~7k generated man pages would be a third of the corpus: keep them to ~12%.
    gcloud = [k for k in keys if "gcloud" in pool[k]]
    drop = set(gcloud[12_000:])
    keys = [k for k in keys if k not in drop]
    names = [n for n in names if "gcloud" not in n.lower() and "Google" not in n][:5000] + [
        n for n in names if "gcloud" in n.lower() or "Google" in n][:60]
    # Held-out snippet queries: removed from the corpus; half used whole, half as their
    # first sentence (short, query-like).
    held = keys[:250]
    corpus_keys = keys[250:250 + TARGET]
    queries: list[dict[str, str]] = []
    for i, key in enumerate(held):
        text = texts[key]
        if i % 2:
            first = _SENT.split(text)[0]
            text = first if len(first.split()) >= 4 else text
        queries.append({"text": text, "kind": "heldout_snippet", "source": pool[key]})
    random.shuffle(names)
    seen = set()
    for desc in names:
        if len(queries) >= N_QUERIES:
            break
        if desc.lower() in seen:
            continue
        seen.add(desc.lower())
        queries.append({"text": desc, "kind": "man_name_description", "source": "man NAME"})
    import os
    if os.environ.get("DUMP_EXTRA"):
        with open("/tmp/coarse/extra_texts.jsonl", "w") as out:
            for key in keys[250 + TARGET:]:
                out.write(json.dumps({"text": texts[key], "source": pool[key]}) + "\n")
        return
    corpus_keys.sort(key=lambda k: pool[k])  # group by source file, like ingestion order
    with open("/tmp/coarse/corpus_texts.jsonl", "w") as out:
        for key in corpus_keys:
            out.write(json.dumps({"text": texts[key], "source": pool[key]}) + "\n")
    with open("/tmp/coarse/query_texts.jsonl", "w") as out:
        for q in queries:
            out.write(json.dumps(q) + "\n")
    print("corpus", len(corpus_keys), "queries", len(queries), "pool", len(keys))


if __name__ == "__main__":
    main()
