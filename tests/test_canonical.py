"""One canonical JSON form and exact digests for every value evidence holds."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pytest

from oracle.canonical import digest_json, dumps, row_digest, to_jsonable


def test_tagged_forms():
    assert to_jsonable(b"\x00\x01") == {"$bytes": "AAE="}
    assert to_jsonable(decimal.Decimal("1.10")) == {"$decimal": "1.10"}
    assert to_jsonable(float("nan")) == {"$float": "nan"}
    assert to_jsonable(float("-inf")) == {"$float": "-inf"}
    assert to_jsonable(dt.date(2024, 1, 2)) == "2024-01-02"
    assert to_jsonable((1, {2: "x"})) == [1, {"2": "x"}]


def test_dumps_is_canonical():
    assert dumps({"b": 1, "a": [1.5, None]}) == b'{"a":[1.5,null],"b":1}'
    assert dumps({"x": math.inf}) == b'{"x":{"$float":"inf"}}'
    assert digest_json({"a": 1, "b": 2}) == digest_json({"b": 2, "a": 1})


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((1, None), (1, float("nan"))),
        ((1, None), (1, float("inf"))),
        ((1, float("inf")), (1, float("-inf"))),
        ((1, 1), (1, 1.0)),
        ((1, 1), (1, True)),
        ((1, "1"), (1, 1)),
        ((1, b"a"), (1, "a")),
        ((1, "null"), (1, None)),
        ((1, 2**70), (1, 2**70 + 1)),
    ],
)
def test_row_digests_tell_apart_values_that_look_alike(a, b):
    assert row_digest(a) != row_digest(b)


def test_row_digest_is_stable():
    row = (1, "a", 2.5, None, b"\x00")
    assert row_digest(row) == row_digest(tuple(row))
    assert len(row_digest(row)) == 16


def test_unknown_types_are_refused_with_their_name():
    with pytest.raises(TypeError, match="object"):
        to_jsonable(object())
