"""One canonical JSON form and exact digests for every value evidence holds."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pytest

from oracle.base.canonical import digest_json, dumps, row_digest, to_jsonable


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


def test_instants_have_one_form_and_json_null_is_not_sql_null():
    from oracle.base.canonical import JSON_NULL

    cet = dt.timezone(dt.timedelta(hours=1))
    assert to_jsonable(dt.datetime(2024, 1, 1, 10, tzinfo=cet)) == "2024-01-01T09:00:00+00:00"
    assert to_jsonable(dt.datetime(2024, 1, 1, 10)) == "2024-01-01T10:00:00"
    assert to_jsonable(JSON_NULL) == {"$json": None}
    assert row_digest((1, JSON_NULL)) != row_digest((1, None))


def test_native_reverses_the_tagged_forms():
    from oracle.base.canonical import JSON_NULL, native

    values = [decimal.Decimal("1.50"), b"\x00", float("inf"), 2**70, dt.timedelta(seconds=3)]
    assert native(to_jsonable(values)) == values
    assert native({"$json": None}) is JSON_NULL
    assert native({"a": [{"$decimal": "2"}]}) == {"a": [decimal.Decimal("2")]}
