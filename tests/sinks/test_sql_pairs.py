"""Pairing the rows of a table whose shape changed (`oracle.sinks.sql_pairs`)."""

from __future__ import annotations

from typing import Any

from oracle.sinks.sql_pairs import pair_rows
from oracle.sinks.sql_state import ColumnInfo, TableState, build_table


def table(columns: str, key: str, rows: list[tuple[Any, ...]]) -> TableState:
    cols = tuple(ColumnInfo(name=c, type="TEXT", nullable=True) for c in columns.split())
    return build_table("t", cols, tuple(key.split()), rows)


def test_a_retyped_key_pairs_by_its_value():
    b = table("id v", "id", [(1, "a"), (2, "b"), (10, "c")])
    a = table("id v", "id", [("1", "a"), ("2.0", "b"), ("10", "c")])
    p = pair_rows(b, a)
    assert p.pairs == [((1,), ("1",)), ((10,), ("10",)), ((2,), ("2.0",))]
    assert p.removed == p.added == []


def test_a_value_that_occurs_twice_pairs_nothing():
    # '1' and ' 1 ' both read loosely as 1: neither is paired by its key; the shared column
    # v then pairs what it can tell apart.
    b = table("id v", "id", [(1, "a"), (2, "b")])
    a = table("id v", "id", [("1", "x"), (" 1 ", "y"), ("2", "b")])
    p = pair_rows(b, a)
    assert p.pairs == [((2,), ("2",))]
    assert p.removed == [(1,)] and sorted(p.added) == [(" 1 ",), ("1",)]


def test_a_renamed_key_pairs_position_by_position():
    b = table("id v", "id", [(1, "a"), (2, "b")])
    a = table("uid v w", "uid", [(2, "changed", None), (1, "a", "new")])
    assert pair_rows(b, a).pairs == [((1,), (1,)), ((2,), (2,))]


def test_the_old_key_columns_pair_a_widened_key():
    b = table("id v", "id", [(1, "a"), (2, "b")])
    a = table("id v", "id v", [(1, "x"), (2, "y")])
    assert pair_rows(b, a).pairs == [((1,), (1, "x")), ((2,), (2, "y"))]


def test_tables_that_share_no_column_pair_no_row():
    b = table("id v", "", [(1, "a")])
    a = table("x y", "", [(1, "a")])
    p = pair_rows(b, a)
    assert p.pairs == [] and len(p.removed) == len(p.added) == 1


def test_a_huge_exponent_is_not_written_out():
    b = table("id v", "id", [("1e999999999", "a")])
    a = table("id v", "id", [("1E+999999999", "a"), ("2", "b")])
    p = pair_rows(b, a)
    assert p.pairs == [(("1e999999999",), ("1E+999999999",))]
