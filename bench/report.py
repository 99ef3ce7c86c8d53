"""The outputs: a Markdown table (stdout and BENCHMARKS.md), results.json and a PNG chart."""

from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.stats import Row

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
_UNIT_DIGITS = {"ms": 1, "s": 2, "MiB": 0, "B/vector": 0, "": 3}


def fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    digits = _UNIT_DIGITS.get(unit, 1)
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def _target(row: Row) -> str:
    if row.target is None:
        return ""
    sign = ">=" if row.direction == "higher" else "<="
    if row.baseline_name and not row.target_on_value:
        return f"{sign} {row.target:g}x"
    return f"{sign} {fmt(row.target, row.unit)}"


def _met(row: Row) -> str:
    return {True: "yes", False: "**no**", None: ""}[row.met]


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| Scenario | Measurement | Value | Baseline | Ratio | Target | Met | Note |",
        "| --- | --- | ---: | --- | ---: | --- | --- | --- |",
    ]
    for row in rows:
        baseline = (
            f"{row.baseline_name}: {fmt(row.baseline, row.unit)}" if row.baseline_name else ""
        )
        ratio = f"{row.ratio:.2f}x" if math.isfinite(row.ratio) else ""
        cells = [row.scenario, row.name, fmt(row.value, row.unit), baseline, ratio]
        cells += [_target(row), _met(row), row.note]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any], rows: Sequence[Row]) -> None:
    path.write_text(json.dumps({**payload, "rows": [r.as_json() for r in rows]}, indent=2))


def _score(row: Row) -> float:
    """How far a row is from its target: 1 is exactly on it, above 1 better."""
    judged = row.judged
    assert row.target is not None
    if row.direction == "higher":
        return judged / row.target
    return row.target / judged if judged > 0 else math.inf


def chart(path: Path, rows: Sequence[Row], details: dict[str, Any], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 6), dpi=80)
    judged = [r for r in rows if r.target is not None and r.met is not None]
    ax = axes[0]
    names = [_short(r) for r in judged]
    scores = [_score(r) for r in judged]
    colours = ["#3a923a" if r.met else "#c43c35" for r in judged]
    ax.barh(range(len(judged)), scores, color=colours)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(judged)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of target (1 = on target, right is better)")
    ax.set_xlim(0, max([1.0, *[s for s in scores if math.isfinite(s)]]) * 1.8)
    ax.set_title("Targets")
    for index, row in enumerate(judged):
        shown = (
            f"{row.ratio:.2f}x"
            if row.baseline_name and not row.target_on_value
            else fmt(row.value, row.unit)
        )
        ax.text(scores[index], index, f" {shown} (target {_target(row)})", va="center", fontsize=7)

    ax = axes[1]
    rates = details.get("1 embedding", {}).get("texts_per_s", {})
    if rates:
        labels = list(rates)
        medians = [sorted(v)[len(v) // 2] for v in rates.values()]
        ax.bar(range(len(labels)), medians, color="#4c72b0")
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("texts/s (median)")
    else:
        ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
    ax.set_title("Embedding throughput")

    ax = axes[2]
    sizes = details.get("3 search", {}).get("sizes", {})
    if sizes:
        paths = list(next(iter(sizes.values()))["latency_ms"])
        width = 0.8 / max(1, len(sizes))
        for offset, (size, figures) in enumerate(sizes.items()):
            lat = figures["latency_ms"]
            xs = [i + offset * width for i in range(len(paths))]
            ax.bar(xs, [lat[p]["p50"] for p in paths], width, label=f"{int(size):,} p50")
            ax.scatter(xs, [lat[p]["p95"] for p in paths], marker="_", color="black", s=60)
        ax.set_xticks([i + width * (len(sizes) - 1) / 2 for i in range(len(paths))], paths)
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms per query (bars p50, ticks p95)")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
    ax.set_title("Search latency")
    figure.suptitle(textwrap.fill(title, 180), fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _short(row: Row) -> str:
    name = re.sub(r"\s*\(.*?\)", "", row.name)
    return f"{row.scenario.split()[0]} {name}"[:60]


def publish_section(markdown: Path, name: str, section: str) -> None:
    """Replaces (or appends) the section between <!-- NAME:begin --> and <!-- NAME:end -->."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = markdown.read_text() if markdown.exists() else "# Benchmarks\n"
    if begin not in text or end not in text:
        text = text.rstrip() + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    markdown.write_text(f"{head}{begin}\n{section.strip()}\n{end}{tail}")


def publish(markdown: Path, chart_src: Path, chart_dst: Path, section: str) -> None:
    """Replaces the generated section of BENCHMARKS.md and copies the chart beside it."""
    shutil.copyfile(chart_src, chart_dst)
    text = markdown.read_text() if markdown.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    markdown.write_text(f"{head}{BEGIN}\n{section.strip()}\n{END}{tail}")
