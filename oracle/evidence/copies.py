"""Each predicate's own copy of the evidence.

The read-only containers of `oracle.base.frozen` stop a careless write, not a deliberate one
(``dict.__setitem__(row, k, v)``, ``object.__setattr__(change, name, v)``, ``list.append``).
So that no write reaches the next predicate or the archive, every predicate reads a copy made
by `isolated`, and the oracle keeps the originals to itself:

>>> from oracle.base.frozen import freeze
>>> row = freeze({"to": ["a@x.test"]})
>>> mine = isolated(row)
>>> list.append(mine["to"], "b@y.test")
>>> row["to"], mine["to"], type(mine["to"]).__name__
(['a@x.test'], ['a@x.test', 'b@y.test'], 'FrozenList')

A predicate runs in the oracle's process: one bent on reaching the originals themselves
(through private attributes, stack frames or the garbage collector) still can. The copy
guards against writes to what a predicate is handed, not against a hostile predicate.
"""

from __future__ import annotations

import copy
import datetime
import re
import types
import uuid
from decimal import Decimal
from enum import Enum
from fractions import Fraction
from pathlib import PurePath
from typing import Any

from oracle.base.frozen import FrozenDict, FrozenList

#: Types whose values cannot change: shared by a copy, never copied.
_ATOMS: frozenset[type] = frozenset(
    {
        str,
        bytes,
        int,
        float,
        complex,
        bool,
        type(None),
        Decimal,
        Fraction,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        uuid.UUID,
        range,
        re.Pattern,
    }
)
_SHARED = (type, Enum, PurePath, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)


def isolated[T](value: T, shared: dict[int, Any] | None = None) -> T:
    """A deep copy of `value` that shares nothing anyone could change with it.

    Unlike `copy.deepcopy` it goes through read-only mappings (`types.MappingProxyType`),
    copies `FrozenDict` and `FrozenList` (which `deepcopy` shares, as they are read-only) into
    new ones, copies frozen dataclasses and pydantic models attribute by attribute, and shares
    what cannot change: strings, numbers, bytes, classes, functions, and tuples and read-only
    mappings that hold only such values (a snapshot's rows). An object it cannot copy (a lock,
    a connection) is shared.

    `shared` remembers, from one copy of the same originals to the next, what was found to
    need no copy, so that copying a large snapshot again skips its rows. Keep it no longer than
    the originals live: it is keyed by their ids."""
    memo: dict[int, Any] = {} if shared is None else dict(shared)
    result: T = _copy(value, memo)
    if shared is not None:
        shared.update((k, v) for k, v in memo.items() if id(v) == k)
    return result


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    done = memo.get(id(value))
    if done is not None:
        return done
    copier = _COPIERS.get(kind)
    if copier is not None:
        return copier(value, memo)
    if isinstance(value, _SHARED):
        return value
    for base in (tuple, dict, list, set):  # a subclass: copied as its base, keeping its type
        if isinstance(value, base):
            return _COPIERS[base](value, memo)
    if isinstance(value, frozenset):
        return value  # members are hashable, so as good as immutable
    return _copy_object(value, memo)


def _copy_tuple(value: tuple[Any, ...], memo: dict[int, Any]) -> Any:
    if all(type(v) in _ATOMS for v in value):
        return value  # the common row: nothing in it can change
    items = [_copy(v, memo) for v in value]
    kind = type(value)
    if all(a is b for a, b in zip(items, value, strict=True)):
        out: Any = value  # nothing in it could change: the tuple itself is safe to share
    elif kind is tuple:
        out = tuple(items)
    else:
        make = getattr(kind, "_make", None)  # a named tuple
        out = make(items) if callable(make) else kind(items)
    memo[id(value)] = out
    return out


def _copy_dict(value: dict[Any, Any], memo: dict[int, Any]) -> Any:
    new: dict[Any, Any] = FrozenDict() if type(value) is FrozenDict else _empty(value, dict)
    memo[id(value)] = new
    dict.update(new, {k: v if type(v) in _ATOMS else _copy(v, memo) for k, v in value.items()})
    return new


def _copy_list(value: list[Any], memo: dict[int, Any]) -> Any:
    new: list[Any] = FrozenList() if type(value) is FrozenList else _empty(value, list)
    memo[id(value)] = new
    list.extend(new, [v if type(v) in _ATOMS else _copy(v, memo) for v in value])
    return new


def _copy_proxy(value: types.MappingProxyType[Any, Any], memo: dict[int, Any]) -> Any:
    changed: dict[Any, Any] = {}
    for k, v in value.items():
        if type(v) is tuple and all(type(x) in _ATOMS for x in v):
            continue  # a row: shared (checked here, as a call per row would double the cost)
        c = _copy(v, memo)
        if c is not v:
            changed[k] = c
    # Its mapping is out of reach (only the garbage collector would hand it out): when
    # nothing in it needed a copy, the proxy itself is shared.
    out = value
    if changed:
        out = types.MappingProxyType({k: changed.get(k, v) for k, v in value.items()})
    memo[id(value)] = out
    return out


def _copy_set(value: set[Any], memo: dict[int, Any]) -> Any:
    new = _empty(value, set)
    memo[id(value)] = new
    set.update(new, value)
    return new


def _copy_bytearray(value: bytearray, memo: dict[int, Any]) -> Any:
    return bytearray(value)


_COPIERS: dict[type, Any] = {
    tuple: _copy_tuple,
    dict: _copy_dict,
    FrozenDict: _copy_dict,
    list: _copy_list,
    FrozenList: _copy_list,
    set: _copy_set,
    types.MappingProxyType: _copy_proxy,
    bytearray: _copy_bytearray,
    frozenset: lambda value, memo: value,
}


def _empty(value: Any, base: type) -> Any:
    """An empty container of `value`'s own type (a subclass keeps its type and attributes)."""
    if type(value) is base:
        return base()
    out = copy.copy(value)
    base.clear(out)  # type: ignore[attr-defined]
    return out


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slot_names(kind: type) -> tuple[str, ...]:
    known = _SLOTS.get(kind)
    if known is None:
        known = _SLOTS[kind] = tuple(_find_slots(kind))
    return known


def _find_slots(kind: type) -> list[str]:
    names: list[str] = []
    for cls in kind.__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"  # a private slot, as Python names it
            names.append(name)
    return names


def _copy_object(value: Any, memo: dict[int, Any]) -> Any:
    """An instance (a dataclass, a pydantic model, a plain object) copied attribute by
    attribute, past ``__setattr__`` (frozen classes refuse it)."""
    kind: Any = type(value)
    try:
        state = object.__getattribute__(value, "__dict__")
    except AttributeError:
        state = None
    slots = _slot_names(kind)
    if state is None and not slots:
        try:  # a type implemented in C (a deque, an array): its own copy, if it has one
            out = copy.deepcopy(value)
        except Exception:
            out = value  # cannot be copied (a lock, a socket): shared
        memo[id(value)] = out
        return out
    try:
        new = kind.__new__(kind)
    except TypeError:
        memo[id(value)] = value
        return value
    memo[id(value)] = new
    for name in slots:
        try:
            attr = object.__getattribute__(value, name)
        except AttributeError:
            continue  # an unset slot
        object.__setattr__(new, name, attr if type(attr) in _ATOMS else _copy(attr, memo))
    if state is not None:
        copied = {k: v if type(v) in _ATOMS else _copy(v, memo) for k, v in state.items()}
        object.__setattr__(new, "__dict__", copied)
    return new
