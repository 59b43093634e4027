"""Which row after is which row before, in a table whose shape changed during the run.

A table whose columns or key changed (a column added, renamed, retyped or dropped; a key column
renamed or retyped; the table dropped and re-created under the same name with other columns) is
still diffed row by row: `pair_rows` pairs its rows, and the diff compares each pair column by
column, a column that one side lacks reading as absent there.

Rows pair by each of these ways that applies, in this order, each tried on the rows still
unpaired, first with exact values and then with loose ones (``1`` pairs with ``'1'`` and
``1.0``, so a key retyped from integer to text keeps its rows):

1. the key, when both sides have one with the same column names;
2. the old key's columns, when the new table still has them (the key was widened or moved);
3. the new key's columns, when the old table had them;
4. the keys position by position, when both have one of the same length (a key column renamed);
5. the columns both sides share, when there are any (tables without a key: a multiset, so equal
   rows pair in order).

A value pairs two rows only when it occurs once on each side (the fifth way excepted); a row
that pairs with nothing is a row removed or added. However the rows pair, every value the table
holds after the run that its row did not hold before is in the diff (as a field that changed, a
column that appeared, or a row added): pairing decides how a change is described, never
whether it is seen.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oracle.base.canonical import row_digest, to_jsonable
from oracle.sinks.sql_state import TableState

type Key = tuple[Any, ...]
type Row = tuple[Any, ...]
type Way = tuple[Callable[[Key, Row], Key], Callable[[Key, Row], Key]]

#: Numbers whose exponent is past this are compared in exponent form, not written out.
_LONGEST = 64
#: Normalises any decimal the database can hold without rounding or overflow.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def key_order(key: Key) -> tuple[Any, ...]:
    """A total order over keys that may mix types (NULL, numbers, text, bytes)."""
    return tuple((v is None, type(v).__name__, 0 if v is None else v) for v in key)


@dataclass(frozen=True)
class Pairing:
    """Rows of one table before and after: ``pairs`` of (before key, after key) in the after
    table's key order, and the keys of rows ``removed`` (before) and ``added`` (after)."""

    pairs: list[tuple[Key, Key]]
    removed: list[Key]
    added: list[Key]


def pair_rows(b: TableState, a: TableState) -> Pairing:
    """Pair the rows of `b` (before) and `a` (after) as the module docstring says."""
    left_b: dict[Key, Row] = dict(b.rows.items())
    left_a: dict[Key, Row] = dict(a.rows.items())
    pairs: list[tuple[Key, Key]] = []
    for way in _ways(b, a):
        for loose in (False, True):
            if left_b and left_a:
                pairs.extend(_pair_unique(left_b, left_a, way, loose))
    common = [c for c in a.column_names if c in set(b.column_names)]
    if common and left_b and left_a:
        pairs.extend(_pair_equal(left_b, left_a, _project(b, common), _project(a, common)))
    return Pairing(
        pairs=sorted(pairs, key=lambda p: key_order(p[1])),
        removed=sorted(left_b, key=key_order),
        added=sorted(left_a, key=key_order),
    )


def _project(t: TableState, columns: Iterable[str]) -> Callable[[Key, Row], Key]:
    idx = [t.column_names.index(c) for c in columns]
    return lambda _key, row: tuple(row[i] for i in idx)


def _key(key: Key, _row: Row) -> Key:
    return key


def _ways(b: TableState, a: TableState) -> list[Way]:
    ways: list[Way] = []
    if b.keyed and a.keyed and b.primary_key == a.primary_key:
        return [(_key, _key)]
    if b.keyed and all(c in a.column_names for c in b.primary_key):
        ways.append((_key, _project(a, b.primary_key)))
    if a.keyed and all(c in b.column_names for c in a.primary_key):
        ways.append((_project(b, a.primary_key), _key))
    if b.keyed and a.keyed and len(b.primary_key) == len(a.primary_key):
        ways.append((_key, _key))
    return ways


def _pair_unique(
    left_b: dict[Key, Row], left_a: dict[Key, Row], way: Way, loose: bool
) -> list[tuple[Key, Key]]:
    """Pairs of rows whose values under `way` occur once on each side; taken out of the
    `left_*` maps."""
    value_b, value_a = way
    ib = _index(left_b, value_b, loose)
    ia = _index(left_a, value_a, loose)
    out = []
    for d, bks in ib.items():
        aks = ia.get(d)
        if aks is not None and len(aks) == 1 and len(bks) == 1:
            out.append((bks[0], aks[0]))
    for bk, ak in out:
        del left_b[bk], left_a[ak]
    return out


def _pair_equal(
    left_b: dict[Key, Row],
    left_a: dict[Key, Row],
    value_b: Callable[[Key, Row], Key],
    value_a: Callable[[Key, Row], Key],
) -> list[tuple[Key, Key]]:
    """Pairs of rows with equal values, in key order on each side (equal rows of a multiset
    are interchangeable); taken out of the `left_*` maps."""
    ib = _index(left_b, value_b, False)
    ia = _index(left_a, value_a, False)
    out: list[tuple[Key, Key]] = []
    for d, bks in ib.items():
        aks = ia.get(d, [])
        out.extend(
            zip(sorted(bks, key=key_order)[: len(aks)], sorted(aks, key=key_order), strict=False)
        )
    for bk, ak in out:
        del left_b[bk], left_a[ak]
    return out


def _index(
    rows: Mapping[Key, Row], value: Callable[[Key, Row], Key], loose: bool
) -> dict[bytes, list[Key]]:
    out: dict[bytes, list[Key]] = {}
    for k, r in rows.items():
        v = value(k, r)
        out.setdefault(row_digest(tuple(map(_loose, v)) if loose else v), []).append(k)
    return out


def _loose(value: Any) -> Any:
    """A value as text that other types of the same value share: a number as its shortest
    decimal (``1``, ``'1'``, ``1.0`` and ``Decimal('1.00')`` alike), text without the blanks
    around it, anything else as its canonical JSON text."""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, bool):
        return str(int(value))
    elif isinstance(value, int | float | decimal.Decimal):
        text = str(value)
    elif value is None:
        return None
    else:
        return str(to_jsonable(value))
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return text
    if not number.is_finite() or (isinstance(value, float) and not math.isfinite(value)):
        return text.lower()
    number = number.normalize(_EXACT)
    if abs(number.adjusted()) > _LONGEST:  # written out in full it would be huge
        return str(number)
    return format(number, "f")
