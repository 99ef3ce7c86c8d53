"""Small statistics: medians, percentiles, recall, and the result rows every scenario emits."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# "higher": the figure should be at least the target; "lower": at most.
Direction = Literal["higher", "lower"]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def recall_at_k(found: Sequence[Sequence[int]], exact: Sequence[Sequence[int]], k: int) -> float:
    """Mean over queries of |found[:k] & exact[:k]| / k."""
    if len(found) != len(exact):
        raise ValueError(f"{len(found)} result lists for {len(exact)} queries")
    if not exact:
        return math.nan
    hits = sum(len(set(f[:k]) & set(e[:k])) for f, e in zip(found, exact, strict=True))
    return hits / (k * len(exact))


def share_kept(found: Sequence[Sequence[int]], reference: Sequence[Sequence[int]], k: int) -> float:
    """The share of the reference lists' top k that `found` holds in its top k, over every
    query (a reference may hold fewer than k: a query few chunks match)."""
    shared = sum(len(set(f[:k]) & set(r[:k])) for f, r in zip(found, reference, strict=True))
    return shared / max(1, sum(len(r[:k]) for r in reference))


def ratio(value: float, baseline: float) -> float:
    if not (math.isfinite(value) and math.isfinite(baseline)) or baseline == 0:
        return math.nan
    return value / baseline


@dataclass
class Row:
    """One line of the results table.

    `value` is in `unit`; `ratio` is value / baseline (same unit) when there is a baseline.
    `target` applies to `ratio` when the row has a baseline, else (or when target_on_value)
    to `value`.
    """

    scenario: str
    name: str
    value: float
    unit: str
    baseline_name: str = ""
    baseline: float = math.nan
    target: float | None = None
    direction: Direction = "higher"
    target_on_value: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return ratio(self.value, self.baseline) if self.baseline_name else math.nan

    @property
    def judged(self) -> float:
        return self.ratio if self.baseline_name and not self.target_on_value else self.value

    @property
    def met(self) -> bool | None:
        if self.target is None or not math.isfinite(self.judged):
            return None
        if self.direction == "higher":
            return self.judged >= self.target
        return self.judged <= self.target

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = None if math.isnan(self.ratio) else self.ratio
        data["met"] = self.met
        for key in ("value", "baseline"):
            if isinstance(data[key], float) and math.isnan(data[key]):
                data[key] = None
        return data


def not_available(scenario: str, name: str, why: str, target: float | None = None) -> Row:
    """A row for a variant this build cannot measure yet: shown as n/a with the reason."""
    return Row(scenario, name, math.nan, "", target=target, note=f"n/a ({why})")
