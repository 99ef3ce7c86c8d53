"""The benchmark suite's own arithmetic: statistics, targets, derived vectors, caches, reports.

The scenarios themselves run with `make bench-quick`; these keep the numbers they print honest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.corpus import paragraphs
from bench.profile import summarize
from bench.report import BEGIN, END, fmt, publish, table
from bench.stats import Row, not_available, percentile, recall_at_k
from bench.vectors import chunk_texts, data_set, derive, long_text, real_vectors
from services.common.vectors import FloatMatrix


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([5.0], 95, 5.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5), ([4.0, 1.0, 3.0, 2.0], 100, 4.0)],
)
def test_percentile_interpolates_between_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))


def test_recall_counts_overlap_of_the_first_k() -> None:
    exact = [[1, 2, 3], [4, 5, 6]]
    found = [[3, 2, 1], [4, 9, 8]]
    assert recall_at_k(found, exact, 3) == pytest.approx((3 + 1) / 6)
    with pytest.raises(ValueError):
        recall_at_k(found[:1], exact, 3)


@pytest.mark.parametrize(
    ("row", "met"),
    [
        (Row("s", "ratio ok", 96.0, "texts/s", "base", 100.0, 0.95), True),
        (Row("s", "ratio short", 94.0, "texts/s", "base", 100.0, 0.95), False),
        (Row("s", "latency", 30.0, "ms", "raw", 10.0, 25.0, "lower", True), False),
        (Row("s", "latency ok", 20.0, "ms", "raw", 10.0, 25.0, "lower", True), True),
        (Row("s", "recall", 0.99, "", target=0.98), True),
        (Row("s", "no target", 1.0, "s"), None),
    ],
)
def test_rows_judge_their_target(row: Row, met: bool | None) -> None:
    assert row.met is met


def test_unavailable_rows_are_never_judged() -> None:
    row = not_available("2 ingest", "warm", "not built yet", target=1.0)
    assert row.met is None
    assert row.as_json()["value"] is None
    assert "n/a (not built yet)" in table([row])


def test_table_shows_ratio_target_and_verdict() -> None:
    row = Row("1 embedding", "REST", 90.0, "texts/s", "in-process", 100.0, 0.95)
    line = table([row]).splitlines()[-1]
    assert "90.0 texts/s" in line
    assert "0.90x" in line
    assert ">= 0.95x" in line
    assert "**no**" in line
    assert fmt(math.nan, "ms") == "n/a"


def test_publish_replaces_only_the_generated_section(tmp_path: Path) -> None:
    markdown = tmp_path / "BENCHMARKS.md"
    markdown.write_text(f"# Benchmarks\n\nmethod\n\n{BEGIN}\nold\n{END}\n\n## Notes\nkept\n")
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"png")
    publish(markdown, chart, tmp_path / "latest.png", "new table")
    text = markdown.read_text()
    assert "old" not in text
    assert f"{BEGIN}\nnew table\n{END}" in text
    assert text.startswith("# Benchmarks\n\nmethod")
    assert text.endswith("## Notes\nkept\n")
    assert (tmp_path / "latest.png").read_bytes() == b"png"


def _unit_rows(count: int, seed: int = 1) -> FloatMatrix:
    rows = np.random.default_rng(seed).standard_normal((count, 8)).astype(np.float32)
    result: FloatMatrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return result


def test_derived_vectors_are_unit_length_deterministic_and_not_copies() -> None:
    real = _unit_rows(50)
    derived = derive(real, 200, seed=3)
    assert derived.shape == (200, 8)
    assert derived.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(derived, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(derived, derive(real, 200, seed=3))
    # Mixing weights stay within [0.3, 0.7], so no derived row is (nearly) a real one.
    assert float((derived @ real.T).max()) < 0.999


def test_data_set_keeps_real_rows_first() -> None:
    real = _unit_rows(10)
    data = data_set(real, [f"t{i}" for i in range(10)], 25)
    assert (data.size, data.real, len(data.texts)) == (25, 10, 10)
    np.testing.assert_array_equal(data.vectors[:10], real)
    small = data_set(real, [f"t{i}" for i in range(10)], 4)
    assert (small.size, small.real) == (4, 4)


def test_chunk_texts_run_on_to_the_next_snippets_and_derived_rows_mix_their_parents() -> None:
    snippets = [f"s{i} " + " ".join(f"w{i}" for _ in range(3)) for i in range(6)]
    texts = chunk_texts(snippets, words=10)
    # Each starts at its own snippet and runs on into the next ones, wrapping at the end.
    assert texts[0].split() == ["s0", *["w0"] * 3, "s1", *["w1"] * 3, "s2", "w2"]
    assert texts[5].split()[:5] == ["s5", *["w5"] * 3, "s0"]
    real = _unit_rows(6)
    data = data_set(real, texts, 9)
    assert long_text(2, data) == f"#2 {texts[2]}"
    for row in range(6, 9):
        a = texts[int(data.first[row - 6])].split()
        b = texts[int(data.second[row - 6])].split()
        assert long_text(row, data).split()[1:] == a[:5] + b[:5]
    # The parents are the rows the derived vector mixes: it lies between them.
    mixed = data.vectors[6]
    parents = real[[int(data.first[0]), int(data.second[0])]]
    assert float((parents @ mixed).min()) > float(np.sort(real @ mixed)[0])


def test_real_vectors_embed_only_what_the_cache_lacks(tmp_path: Path) -> None:
    embedded: list[str] = []

    def embed(texts: Sequence[str]) -> FloatMatrix:
        embedded.extend(texts)
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    texts = [f"snippet {i}" * (i % 3 + 1) for i in range(10)]
    first = real_vectors(texts[:6], embed, tmp_path, "d" * 64, log=lambda _: None)
    assert embedded == texts[:6]
    again = real_vectors(texts, embed, tmp_path, "d" * 64, log=lambda _: None)
    assert embedded == texts
    np.testing.assert_array_equal(again[:6], first)
    assert real_vectors(texts[:3], embed, tmp_path, "d" * 64, log=lambda _: None).shape == (3, 2)
    assert embedded == texts
    # Another model digest is another cache.
    real_vectors(texts[:2], embed, tmp_path, "e" * 64, log=lambda _: None)
    assert embedded == [*texts, *texts[:2]]


def test_paragraphs_are_blank_line_blocks_within_bounds() -> None:
    text = "NAME\n   ls - list\n\n   a  paragraph that\n   wraps   lines\n\n\nx\n"
    assert paragraphs(text, 5, 100) == ["NAME ls - list", "a paragraph that wraps lines"]
    assert paragraphs(text, 20, 100) == ["a paragraph that wraps lines"]


def test_profile_summary_ranks_running_frames_and_sets_blocked_ones_apart() -> None:
    raw = "\n".join(
        [
            "main (app.py:1);embed (model.py:10);llama_decode 30",
            "main (app.py:1);to_json (app.py:5) 10",
            "loop (events.py:3);select (selectors.py:9);epoll_wait (libc.so.6) 50",
            "garbage-line",
        ]
    )
    summary = summarize(raw)
    assert "40 running samples" in summary
    assert "50 more in blocking waits" in summary
    assert " 75.0%  llama_decode" in summary
    assert "100.0%  main (app.py)" in summary
    assert "epoll_wait" not in summary
    assert summarize("") == "no running samples (0 blocked)\n"
