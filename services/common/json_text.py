"""Reading JSON that comes from outside: request bodies and form fields (gateway), uploaded
.json files (their text is indexed) and the JSON the store is asked to keep.

Python's json module reads more than JSON and fails in ways a caller cannot name: it takes
NaN and Infinity (and 1e999 as infinity), which no other JSON reader, SQLite's json_valid
included, accepts; it raises a bare ValueError for an integer of more than 4300 digits; it
recurses once per level of nesting. Here each of these is a JsonRefused that says what was
wrong and where, for the caller to name the parameter or the file.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

# Python's own bound on int() of a string (a quadratic conversion past it).
MAX_INT_DIGITS = sys.int_info.default_max_str_digits
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_WHERE_CHARS = 80

Path = tuple[str | int, ...]


class JsonRefused(ValueError):
    """The text is not JSON that ragd takes. `problem` reads after the thing's name ("the
    request body", "'attributes'"); `code` is the API error code; `path` leads to the value
    at fault (empty when unknown or the whole text)."""

    def __init__(self, problem: str, code: str, path: Path = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.code = code
        self.path = path


class _Bad:
    """Decoded in place of a number JSON has not, so that its place can be told."""

    def __init__(self, what: str, advice: str) -> None:
        self.what = what
        self.advice = advice


def loads(text: str | bytes, *, max_depth: int, non_finite: bool = False) -> Any:
    """The value of `text`, nested at most `max_depth` levels, with integers of at most
    MAX_INT_DIGITS digits, and without NaN or infinite numbers unless `non_finite` (JSON as a
    document's content may have them: it is only read)."""
    bad: list[_Bad] = []

    def integer(digits: str) -> int | _Bad:
        if len(digits) - digits.startswith("-") <= MAX_INT_DIGITS:
            return int(digits)
        bad.append(
            _Bad(
                f"an integer of {len(digits.lstrip('-'))} digits",
                f"; at most {MAX_INT_DIGITS} are allowed",
            )
        )
        return bad[-1]

    def finite(digits: str) -> float | _Bad:
        value = float(digits)
        if math.isfinite(value) or non_finite:
            return value
        bad.append(_Bad(f"the number {digits[:40]}", ", too large for a 64-bit float"))
        return bad[-1]

    def constant(name: str) -> float | _Bad:
        if non_finite:
            return float(name)
        bad.append(_Bad(name, ", which is not JSON: send a finite number, or null"))
        return bad[-1]

    try:
        value = json.loads(text, parse_int=integer, parse_float=finite, parse_constant=constant)
    except RecursionError:
        raise _too_deep(max_depth, ()) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise JsonRefused(f"is not valid JSON: {error}", "invalid_json") from None
    if bad:
        path = _path(value, lambda item, _: item is bad[0])
        problem = f"has {bad[0].what}{where(path)}{bad[0].advice}"
        raise JsonRefused(problem, "invalid_number", path)
    if depth(value, max_depth) > max_depth:
        path = _path(value, lambda item, level: level > max_depth and isinstance(item, dict | list))
        raise _too_deep(max_depth, path)
    return value


def depth(value: Any, limit: int) -> int:
    """Nesting depth of decoded JSON (counted without recursion, up to just past `limit`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > limit:
                break
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def where(path: Path) -> str:
    """ " at tools[0].parameters" (empty for the whole value), shortened past a few words."""
    if not path:
        return ""
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        elif _PLAIN_KEY.fullmatch(step):
            text += f".{step}" if text else step
        else:
            text += f"[{json.dumps(step)}]"
    return " at " + (text if len(text) <= _MAX_WHERE_CHARS else text[:_MAX_WHERE_CHARS] + "…")


def _path(value: Any, wanted: Any) -> Path:
    """The first place, in document order, where `wanted(item, level)` holds."""
    stack: list[tuple[Any, int, Path]] = [(value, 1, ())]
    while stack:
        item, level, path = stack.pop()
        if wanted(item, level):
            return path
        if isinstance(item, dict):
            stack.extend((child, level + 1, (*path, key)) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(
                (child, level + 1, (*path, index))
                for index, child in reversed(list(enumerate(item)))
            )
    return ()


def _too_deep(max_depth: int, path: Path) -> JsonRefused:
    return JsonRefused(f"nests deeper than {max_depth} levels{where(path)}", "too_deep", path)
