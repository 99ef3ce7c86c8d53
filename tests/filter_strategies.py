"""Hypothesis strategies for attribute filters and the attributes they are matched against."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from services.store.records import AttributeValue
from services.store.search.filters import ORDER_OPS, Comparison, Compound, Filter

Attributes = dict[str, AttributeValue]

KEYS = ("a", "b", "c")
POOL_STRINGS = ("", "x", "y", "xy", "é", "Z", "\U0001f600")
POOL_NUMBERS = (-2, -1.5, 0, 0.0, 0.5, 1, 1.0, 2, 2.5, 10**15)

strings = st.one_of(
    st.sampled_from(POOL_STRINGS), st.text(st.characters(exclude_categories=["Cs"]), max_size=3)
)
numbers = st.one_of(
    st.sampled_from(POOL_NUMBERS),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
)
filter_keys = st.sampled_from((*KEYS, "d"))


def filter_strategy(orderable: st.SearchStrategy[Any]) -> st.SearchStrategy[Filter]:
    values = st.one_of(orderable, st.booleans())
    comparisons = st.one_of(
        st.builds(Comparison, filter_keys, st.sampled_from(("eq", "ne")), value=values),
        st.builds(Comparison, filter_keys, st.sampled_from(ORDER_OPS), value=orderable),
        st.builds(
            Comparison,
            filter_keys,
            st.sampled_from(("in", "nin")),
            values=st.lists(values, min_size=1, max_size=3).map(tuple),
        ),
    )
    return st.recursive(
        comparisons,
        lambda children: st.builds(
            Compound,
            st.sampled_from(("and", "or")),
            st.lists(children, min_size=1, max_size=3).map(tuple),
        ),
        max_leaves=8,
    )


def attributes_strategy(orderable: st.SearchStrategy[Any]) -> st.SearchStrategy[Attributes]:
    values = st.one_of(orderable, st.booleans())
    return st.dictionaries(st.sampled_from(KEYS), values, max_size=len(KEYS))


# Any values, for the semantics; values from a small pool, so that filters often match some
# files but not all, for search.
any_orderable = st.one_of(strings, numbers)
pool_orderable = st.sampled_from(("", "x", "é", 0, 1, 2.5))
