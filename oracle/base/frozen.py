"""Read-only containers for evidence.

`FrozenDict` and `FrozenList` are a `dict` and a `list` in every way that reads (equality,
iteration, JSON encoding, pydantic serialisation) and raise on every way that writes. `freeze`
turns nested JSON-like data into them.

>>> row = freeze({"to": ["a@x.test"]})
>>> row["to"].append("b@y.test")
Traceback (most recent call last):
...
TypeError: evidence is read-only: FrozenList.append

The guards stop a careless write, not a deliberate one (``dict.__setitem__(row, k, v)``):
each predicate also reads its own copy of the evidence (`oracle.evidence.copies`).
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict


def _read_only(name: str) -> Any:
    def refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"evidence is read-only: {type(self).__name__}.{name}")

    refuse.__name__ = name
    return refuse


class FrozenDict(dict[str, Any]):
    """A dict that cannot be changed after it is made."""

    for _name in (
        "__setitem__",
        "__delitem__",
        "clear",
        "pop",
        "popitem",
        "setdefault",
        "update",
        "__ior__",
    ):
        locals()[_name] = _read_only(_name)
    del _name

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self


class FrozenList(list[Any]):
    """A list that cannot be changed after it is made."""

    for _name in (
        "__setitem__",
        "__delitem__",
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "sort",
        "reverse",
        "__iadd__",
        "__imul__",
    ):
        locals()[_name] = _read_only(_name)
    del _name

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self


def freeze(value: Any) -> Any:
    """`value` with every dict and list inside it made read-only (other values as they are)."""
    if isinstance(value, FrozenDict | FrozenList):
        return value
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(v) for v in value)
    return value


class ReadOnlyModel(BaseModel):
    """A pydantic model that is read-only all the way down: frozen, and every dict and list
    in its fields frozen after validation (`freeze`), so that a predicate's careless write
    to a record of the evidence fails loudly."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_post_init(self, context: Any, /) -> None:
        for name in type(self).model_fields:
            object.__setattr__(self, name, freeze(getattr(self, name)))
