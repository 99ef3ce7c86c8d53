"""OpenAI attribute filters: validation, compilation to SQL, and a pure-Python reference.

A comparison tests one attribute of a file in a vector store. Types never mix: a string value
matches only string attributes, a number only numbers, a boolean only booleans. `eq` needs the
attribute present with the same type and value; `ne` is its negation, so a missing attribute
(or one of another type) matches `ne`. gt/gte/lt/lte need the attribute present with the same
type and compare numbers numerically and strings by code point; booleans are not ordered.
`in` is `eq` to any of the values and `nin` its negation. and/or combine nested filters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from services.common.vocabulary import FILTER_COMPOUNDS, MAX_FILTER_DEPTH
from services.store.errors import InvalidArgument
from services.store.records import AttributeValue
from services.store.sql import POSTGRES, SQLITE, Connection, Dialect

EQUALITY_OPS = ("eq", "ne")
ORDER_OPS = ("gt", "gte", "lt", "lte")
SET_OPS = ("in", "nin")
COMPOUND_OPS = FILTER_COMPOUNDS
MAX_DEPTH = MAX_FILTER_DEPTH
# Comparisons plus set values in one filter: bounds the SQL and its bound parameters.
MAX_TERMS = 1000

_SQL_ORDER = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_PY_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
}


@dataclass(frozen=True)
class Comparison:
    key: str
    op: str
    # For eq..lte.
    value: AttributeValue | None = None
    # For in and nin.
    values: tuple[AttributeValue, ...] = ()


@dataclass(frozen=True)
class Compound:
    op: str
    filters: tuple[Filter, ...]


Filter = Comparison | Compound


def _kind(value: object) -> str:
    """The JSON type family of an attribute or filter value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    return "number"


def _check_value(value: object, key: str) -> AttributeValue:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    raise InvalidArgument(
        f"filter value for {key!r} must be a string, a finite number or a boolean, got {value!r}"
    )


def validate(node: Filter, depth: int = 0) -> int:
    """Raises InvalidArgument for a malformed filter; returns its number of terms."""
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"filters nest deeper than {MAX_DEPTH} levels")
    if isinstance(node, Compound):
        if node.op not in COMPOUND_OPS:
            raise InvalidArgument(f"compound filter type must be 'and' or 'or', got {node.op!r}")
        if not node.filters:
            raise InvalidArgument(f"an {node.op!r} filter needs at least one nested filter")
        terms = sum(validate(child, depth + 1) for child in node.filters)
    else:
        if not node.key:
            raise InvalidArgument("filter key must be a non-empty attribute name")
        if node.op in SET_OPS:
            if not node.values:
                raise InvalidArgument(f"{node.op!r} filter on {node.key!r} needs a non-empty list")
            for value in node.values:
                _check_value(value, node.key)
            terms = len(node.values)
        elif node.op in EQUALITY_OPS or node.op in ORDER_OPS:
            if node.value is None:
                raise InvalidArgument(f"{node.op!r} filter on {node.key!r} needs a value")
            value = _check_value(node.value, node.key)
            if node.op in ORDER_OPS and isinstance(value, bool):
                raise InvalidArgument(
                    f"{node.op!r} filter on {node.key!r} needs a number or a string, not a boolean"
                )
            terms = 1
        else:
            ops = ", ".join((*EQUALITY_OPS, *ORDER_OPS, *SET_OPS, *COMPOUND_OPS))
            raise InvalidArgument(f"filter type must be one of {ops}, got {node.op!r}")
    if terms > MAX_TERMS:
        raise InvalidArgument(f"filters may hold at most {MAX_TERMS} comparisons and values")
    return terms


# SQL. `a` is one row of the attributes object's entries: key, value and JSON type, so the
# typed tests keep strings, numbers and booleans apart. SQLite's json_each reports booleans as
# the types 'true'/'false', numbers as 'integer'/'real'; PostgreSQL's jsonb_typeof says
# 'boolean', 'number', 'string', and its text comparisons are made bytewise (COLLATE "C") as
# SQLite's are.


@dataclass(frozen=True)
class _AttributeSql:
    entries: str  # the rows `a` of {column}
    boolean: str  # with ? = 'true' or 'false'
    text: str  # with {op} ?
    number: str


_ATTRIBUTE_SQL = {
    SQLITE.name: _AttributeSql(
        entries="json_each({column}) AS a",
        boolean="a.type = ?",
        text="(a.type = 'text' AND a.value {op} ?)",
        number="(a.type IN ('integer', 'real') AND a.value {op} ?)",
    ),
    POSTGRES.name: _AttributeSql(
        entries="jsonb_each({column}::jsonb) AS a",
        boolean="(jsonb_typeof(a.value) = 'boolean' AND a.value #>> '{{}}' = ?)",
        text="(jsonb_typeof(a.value) = 'string' AND (a.value #>> '{{}}') COLLATE \"C\" {op} ?)",
        number="(jsonb_typeof(a.value) = 'number' AND (a.value #>> '{{}}')::numeric {op} ?)",
    ),
}


def _typed_test(value: AttributeValue, sql_op: str, params: list[Any], forms: _AttributeSql) -> str:
    if isinstance(value, bool):
        params.append("true" if value else "false")
        return forms.boolean.format()
    params.append(value)
    if isinstance(value, str):
        return forms.text.format(op=sql_op)
    return forms.number.format(op=sql_op)


def _exists(
    column: str, key: str, tests: list[str], params: list[Any], key_index: int, forms: _AttributeSql
) -> str:
    params.insert(key_index, key)
    return (
        f"EXISTS (SELECT 1 FROM {forms.entries.format(column=column)} WHERE a.key = ?"
        f" AND ({' OR '.join(tests)}))"
    )


def _compile(node: Filter, column: str, params: list[Any], forms: _AttributeSql) -> str:
    if isinstance(node, Compound):
        joiner = " AND " if node.op == "and" else " OR "
        parts = (_compile(child, column, params, forms) for child in node.filters)
        return "(" + joiner.join(parts) + ")"
    key_index = len(params)
    if node.op in SET_OPS:
        tests = [_typed_test(value, "=", params, forms) for value in node.values]
        negate = node.op == "nin"
    else:
        assert node.value is not None
        tests = [_typed_test(node.value, _SQL_ORDER.get(node.op, "="), params, forms)]
        negate = node.op == "ne"
    sql = _exists(column, node.key, tests, params, key_index, forms)
    return f"NOT {sql}" if negate else sql


def compile_filter(
    node: Filter, column: str = "cf.attributes", dialect: Dialect = SQLITE
) -> tuple[str, list[Any]]:
    """A boolean SQL expression over the JSON attributes in `column`, and its parameters.

    Every key and value is a bound parameter; `column` is ours, never user input.
    """
    validate(node)
    params: list[Any] = []
    return _compile(node, column, params, _ATTRIBUTE_SQL[dialect.name]), params


# The reference semantics, used by tests to check the SQL.


def _equal(attributes: Mapping[str, AttributeValue], key: str, value: AttributeValue) -> bool:
    if key not in attributes:
        return False
    present = attributes[key]
    return _kind(present) == _kind(value) and present == value


def matches(node: Filter, attributes: Mapping[str, AttributeValue]) -> bool:
    """Whether a file with these attributes passes the (valid) filter."""
    if isinstance(node, Compound):
        results = (matches(child, attributes) for child in node.filters)
        return all(results) if node.op == "and" else any(results)
    if node.op in SET_OPS:
        found = any(_equal(attributes, node.key, value) for value in node.values)
        return found if node.op == "in" else not found
    assert node.value is not None
    if node.op in EQUALITY_OPS:
        equal = _equal(attributes, node.key, node.value)
        return equal if node.op == "eq" else not equal
    if node.key not in attributes:
        return False
    present = attributes[node.key]
    if _kind(present) != _kind(node.value) or isinstance(present, bool):
        return False
    return _PY_ORDER[node.op](present, node.value)


# The files of a vector store a compiled filter allows. The condition runs once per file, not per
# chunk (tested per chunk row, its json_each would run 100k times at 100k chunks: ~30 ms).
MATCHING_FILES_SQL = """
    SELECT cf.file_id FROM vector_store_files AS cf
    WHERE cf.vector_store_id = ? AND cf.status = 'completed' AND {condition}
"""


def matching_files(conn: Connection, key: int, condition: tuple[str, Sequence[Any]]) -> list[str]:
    """The completed files of vector store `key` whose attributes pass a compiled filter."""
    sql = MATCHING_FILES_SQL.format(condition=condition[0])
    return [cast(str, row[0]) for row in conn.execute(sql, [key, *condition[1]]).fetchall()]
