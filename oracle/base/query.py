"""Small matching helpers that make predicates read like sentences.

``where`` arguments compare a record's fields against expected values::

    matches({"to": "a@x.test", "n": 3}, {"to": "a@x.test"})            # equal
    matches({"to": "a@x.test"}, {"to": re.compile(r"@x\\.test$")})     # regex search
    matches({"n": 3}, {"n": lambda n: n > 2})                          # any callable
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oracle.base.canonical import to_jsonable


class UnknownFieldError(KeyError):
    """A query named a field the record does not have (almost always a typo in a predicate)."""

    def __str__(self) -> str:
        return str(self.args[0])


def value_matches(actual: Any, expected: Any) -> bool:
    """Whether one value matches one expectation (a value, a compiled regex or a callable)."""
    if isinstance(expected, re.Pattern):
        return isinstance(actual, str) and expected.search(actual) is not None
    if callable(expected):
        return bool(expected(actual))
    if actual == expected and type(actual) is type(expected):
        return True
    # Evidence holds canonical JSON values; let authors write native ones (bytes, Decimal…).
    return bool(to_jsonable(expected) == to_jsonable(actual))


def matches(record: Mapping[str, Any], where: Mapping[str, Any], what: str = "record") -> bool:
    """Whether `record` matches every expectation in `where`. An unknown field raises."""
    for key, expected in where.items():
        if key not in record:
            fields = ", ".join(sorted(record)) or "none"
            raise UnknownFieldError(f"{what} has no field {key!r} (fields: {fields})")
        if not value_matches(record[key], expected):
            return False
    return True


def first_or_none[T](items: Iterable[T], test: Callable[[T], bool]) -> T | None:
    """The first item that passes `test`, or None."""
    for item in items:
        if test(item):
            return item
    return None
