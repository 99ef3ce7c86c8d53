"""A second retrieval set: the Linux man-pages project as Debian packages it (`manpages` and
`manpages-dev`, the versions bench/mansets.sh installs). Each page's NAME line gives the query
("open, openat, creat - open and possibly create a file" asks "open and possibly create a
file") and the rest of the page is the one right document; pages whose description repeats
another's are left out, so every query has exactly one answer.

`python -m bench.mansets` compares the lexical rankings in this process on the same chunks
(the gateway's chunker, 256-token windows counted as words and punctuation): FTS5's bm25, the
store's method before issue 33 (bench/fts5.py), against the store's own lexical search now
(a real store in a temporary folder, Tantivy), file-level recall@1, recall@10 and MRR@10;
and the same on scenario 9's docstring set. No embedding is involved: the chunks carry random
vectors, and only the lexical mode is asked.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.corpus import render
from bench.fts5 import Fts5
from bench.pydocs import corpus, load
from bench.quality import K, Quality
from services.gateway.chunking import pack, split_pieces
from services.store.records import ChunkInput
from services.store.repository import Repository

PACKAGES = ("manpages", "manpages-dev")
CHUNK_TOKENS = 256
_TOKENS = re.compile(r"\w+|[^\w\s]")
_NAME = re.compile(r"^NAME\n(.*?)\n(?=\S)", re.S | re.M)


def _count(texts: Sequence[str]) -> list[int]:
    return [len(_TOKENS.findall(text)) for text in texts]


def pages() -> list[Path]:
    """The packages' man pages, sorted, one per real file."""
    listed = subprocess.run(
        ["dpkg", "-L", *PACKAGES], capture_output=True, text=True, check=True
    ).stdout.split()
    found = {
        Path(line).resolve()
        for line in listed
        if re.search(r"/usr/share/man/man[1-8]/[^/]+\.gz$", line) and Path(line).is_file()
    }
    return sorted(found)


def pairs(limit: int) -> list[tuple[str, str, str]]:
    """(page, query, document) for up to `limit` pages with a description of 3+ words."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        rendered = list(zip(pages(), pool.map(render, pages()), strict=True))
    found: dict[str, tuple[str, str, str]] = {}
    repeated: set[str] = set()
    for path, text in rendered:
        if text is None:
            continue
        match = _NAME.search(text)
        if match is None:
            continue
        line = " ".join(match.group(1).split())
        if " - " not in line:
            continue
        query = line.split(" - ", 1)[1].strip()
        body = (text[: match.start()] + text[match.end() :]).strip()
        if len(query.split()) < 3 or len(body) < 200:
            continue
        if query in found:
            repeated.add(query)
        found[query] = (path.name.removesuffix(".gz"), query, body)
    kept = [pair for query, pair in sorted(found.items()) if query not in repeated]
    return kept[:limit]


def chunks(text: str) -> list[str]:
    return [chunk.text for chunk in pack(split_pieces(text, _count, CHUNK_TOKENS), CHUNK_TOKENS, 0)]


def compare(name: str, docs: Sequence[tuple[str, str]], queries: Sequence[str]) -> None:
    """Lexical quality before (FTS5) and after (the store) on documents (key, text)."""
    with tempfile.TemporaryDirectory() as folder:
        repo = Repository(Path(folder) / "ragd.db")
        repo.migrate()
        store = repo.create_vector_store(name, "random", 8).id
        rng = np.random.default_rng(0)
        for number, (key, text) in enumerate(docs):
            parts = chunks(text)
            vectors = rng.normal(size=(len(parts), 8)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            repo.add_chunks(
                store,
                f"file-{number:06d}",
                key,
                {},
                [ChunkInput(part, 0) for part in parts],
                vectors,
                "random",
            )
        conn = repo._conn()
        owner = {
            int(chunk): int(str(file_id).removeprefix("file-"))
            for chunk, file_id in conn.execute("SELECT id, file_id FROM chunks")
        }
        fts5 = Fts5(Path(folder) / "fts5.db")
        fts5.add(
            (int(chunk), str(text)) for chunk, text in conn.execute("SELECT id, text FROM chunks")
        )
        before, after = [], []
        for query in queries:
            found = [owner[chunk] for chunk, _ in fts5.ranked(query, K)]
            before.append(list(dict.fromkeys(found)))
            hits = repo.search(store, None, k=K, mode="lexical", query_text=query)
            after.append(
                list(dict.fromkeys(int(hit.file_id.removeprefix("file-")) for hit in hits))
            )
        fts5.close()
        repo.close()
    right = list(range(len(docs)))
    print(f"{name}: {len(docs)} documents, {len(owner)} chunks, {len(queries)} queries")
    for label, ranked in (("FTS5 bm25 (before)", before), ("Tantivy bm25 (after)", after)):
        quality = Quality.of(ranked, right)
        print(
            f"| {name} | {label} | {quality.recall_1:.3f} | {quality.recall_10:.3f}"
            f" | {quality.mrr_10:.3f} |"
        )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mansets")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--cache", type=Path, default=Path("bench/results/cache"))
    args = parser.parse_args(argv)
    found = pairs(args.docs)
    compare("man-pages", [(p, d) for p, _, d in found], [q for _, q, _ in found])
    every, _ = load(args.cache)
    docstrings = corpus(every, args.docs)
    compare(
        "docstrings (scenario 9)",
        [(pair.key, pair.text) for pair in docstrings],
        [pair.query for pair in docstrings],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
