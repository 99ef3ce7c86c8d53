"""The chunker on its own, with a word counter standing in for the model's tokenizer."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from services.gateway.chunking import chunk_text, pack, split_pieces


def words(texts: Sequence[str]) -> list[int]:
    return [len(text.split()) for text in texts]


def words_with_specials(texts: Sequence[str]) -> list[int]:
    return [len(text.split()) + 2 for text in texts]


def test_short_text_is_one_chunk() -> None:
    chunks = chunk_text("One short paragraph.", words, max_tokens=50, overlap_tokens=0)
    assert [c.text for c in chunks] == ["One short paragraph."]
    assert chunks[0].tokens == 3


def test_paragraph_boundaries_are_preferred() -> None:
    para = " ".join(["word"] * 30)
    text = f"{para}\n\n{para}\n\n{para}"
    chunks = chunk_text(text, words, max_tokens=40, overlap_tokens=0)
    assert [c.tokens for c in chunks] == [30, 30, 30]
    assert all(c.text == para for c in chunks)


def test_sentences_split_a_long_paragraph() -> None:
    sentence = "This sentence has exactly seven words."
    text = " ".join([sentence] * 10)
    chunks = chunk_text(text, words, max_tokens=15, overlap_tokens=0)
    assert all(c.tokens <= 15 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)
    assert " ".join(c.text for c in chunks) == text


def test_a_single_long_word_run_is_cut() -> None:
    text = "x" * 1000

    def chars(texts: Sequence[str]) -> list[int]:
        return [len(t) // 10 + 1 for t in texts]

    chunks = chunk_text(text, chars, max_tokens=20, overlap_tokens=0)
    assert "".join(c.text for c in chunks) == text
    assert all(c.tokens <= 20 for c in chunks)


@pytest.mark.parametrize("overlap", [0, 5, 10])
def test_overlap_repeats_the_tail(overlap: int) -> None:
    text = " ".join(f"s{i} a b c d." for i in range(20))
    chunks = chunk_text(text, words, max_tokens=20, overlap_tokens=overlap)
    assert all(c.tokens <= 20 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        shared = set(before.text.split()) & set(after.text.split())
        markers = {w for w in shared if w.startswith("s")}
        assert bool(markers) == (overlap >= 5)


def test_special_tokens_count_once_per_chunk() -> None:
    text = "\n\n".join(" ".join(["w"] * 10) for _ in range(6))
    chunks = chunk_text(
        text, words_with_specials, max_tokens=32, overlap_tokens=0, special_tokens=2
    )
    # 30 content words + 2 specials fit; per-piece specials must not be summed.
    assert [c.tokens for c in chunks] == [32, 32]


def test_recount_splits_a_chunk_whose_seams_add_tokens() -> None:
    # A counter where joining adds tokens: each newline counts as an extra token.
    def seams(texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + t.count("\n") for t in texts]

    text = "\n\n".join(["a b c d"] * 8)
    chunks = chunk_text(text, seams, max_tokens=16, overlap_tokens=0)
    assert all(seams([c.text])[0] <= 16 for c in chunks)
    assert sum(c.text.count("a b c d") for c in chunks) == 8


def test_empty_text_gives_no_chunks() -> None:
    assert chunk_text("  \n\n ", words, max_tokens=10, overlap_tokens=0) == []


@pytest.mark.parametrize(("max_tokens", "overlap"), [(2, 0), (10, 6), (10, -1)])
def test_bad_sizes_are_rejected(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", words_with_specials, max_tokens, overlap, special_tokens=2)


def test_pack_never_exceeds_budget() -> None:
    pieces = split_pieces(" ".join(["a"] * 100), words, 7)
    chunks = pack(pieces, 7, 3)
    assert all(c.tokens <= 7 for c in chunks)
