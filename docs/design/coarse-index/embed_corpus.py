"""Embeds the corpus and query texts with the project's embedder (in-process).

Run with /work/main/.venv/bin/python, PYTHONPATH=/work/main. Resumable: partial progress in
/tmp/coarse/emb_parts/.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from services.embedder.model import EmbeddingModel

PARTS = Path("/tmp/coarse/emb_parts")
BLOCK = 2000


def load(path: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in open(path)]


def main() -> None:
    PARTS.mkdir(exist_ok=True)
    corpus = load("/tmp/coarse/corpus_texts.jsonl")
    queries = load("/tmp/coarse/query_texts.jsonl")
    worker = int(os.environ.get("WORKER", "0"))
    workers = int(os.environ.get("WORKERS", "1"))
    threads = int(os.environ.get("THREADS", "2"))
    model = EmbeddingModel(Path("/work/main/models/all-MiniLM-L6-v2.gguf"), threads=threads)
    if not Path("/work/notes/real_queries.npy").exists():
        qv = model.embed([q["text"] for q in queries], truncate=True).vectors
        np.save("/work/notes/real_queries.npy", qv.astype(np.float32))
        with open("/work/notes/real_queries_texts.jsonl", "w") as out:
            for q in queries:
                out.write(json.dumps(q) + "\n")
        print("queries", qv.shape, flush=True)
    start = time.time()
    done = 0
    for first in range(0, len(corpus), BLOCK):
        part = PARTS / f"{first:06d}.npy"
        if part.exists() or (first // BLOCK) % workers != worker:
            continue
        texts = [row["text"] for row in corpus[first:first + BLOCK]]
        vectors = model.embed(texts, truncate=True).vectors
        np.save(str(part) + ".tmp.npy", vectors.astype(np.float32))
        os.replace(str(part) + ".tmp.npy", part)
        done += len(texts)
        rate = done / (time.time() - start)
        print(f"{first + len(texts)} / {len(corpus)}  {rate:.0f}/s", flush=True)
    if not all((PARTS / f"{i:06d}.npy").exists() for i in range(0, len(corpus), BLOCK)):
        print("worker done; other parts pending", flush=True)
        return
    matrix = np.concatenate([np.load(PARTS / f"{i:06d}.npy") for i in range(0, len(corpus), BLOCK)])
    norms = np.linalg.norm(matrix, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-4), (norms.min(), norms.max())
    np.save("/work/notes/real_100k.npy", matrix)
    shutil.copy("/tmp/coarse/corpus_texts.jsonl", "/work/notes/real_100k_texts.jsonl")
    print("done", matrix.shape, file=sys.stderr)


if __name__ == "__main__":
    main()
