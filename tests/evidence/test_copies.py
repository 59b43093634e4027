"""Each predicate's own copy: nothing a write to the copy can reach is shared."""

from __future__ import annotations

import collections
import dataclasses
import doctest
from types import MappingProxyType
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from oracle.base.frozen import FrozenDict, FrozenList, freeze
from oracle.evidence import copies
from oracle.evidence.copies import isolated


class Point(NamedTuple):
    x: int
    tags: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    path: str
    meta: dict[str, int]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    items: list[int]


class Node:
    def __init__(self) -> None:
        self.parent: Node | None = None
        self.children: list[Node] = []


def test_the_docstring_example_runs():
    result = doctest.testmod(copies)
    assert result.attempted > 0 and result.failed == 0


def test_frozen_containers_are_copied_and_stay_frozen():
    row = freeze({"a": [1, {"b": 2}]})
    mine = isolated(row)
    assert mine == row and mine is not row
    assert type(mine) is FrozenDict and type(mine["a"]) is FrozenList
    dict.__setitem__(mine["a"][1], "b", 3)
    list.append(mine["a"], 4)
    assert row == {"a": [1, {"b": 2}]}


def test_frozen_dataclasses_models_and_named_tuples_are_copied_past_their_guards():
    entry = Entry("a.txt", {"size": 1})
    model = Model(name="m", items=[1])
    point = Point(1, ["x"])
    mine_entry, mine_model, mine_point = isolated((entry, model, point))
    object.__setattr__(mine_entry, "path", "b.txt")
    mine_entry.meta["size"] = 2
    object.__setattr__(mine_model, "name", "n")
    mine_model.items.append(2)
    mine_point.tags.append("y")
    assert entry == Entry("a.txt", {"size": 1})
    assert model == Model(name="m", items=[1])
    assert point == Point(1, ["x"]) and type(mine_point) is Point


def test_read_only_mappings_are_copied_where_they_hold_what_could_change():
    rows = MappingProxyType({(1,): (1, "a"), (2,): (2, "b")})
    assert isolated(rows) is rows  # rows of plain values cannot change: shared
    holding = MappingProxyType({"e": Entry("a", {"n": 1})})
    mine = isolated(holding)
    assert mine is not holding
    mine["e"].meta["n"] = 2
    assert holding["e"].meta == {"n": 1}


def test_cycles_and_sharing_are_kept_and_subclasses_keep_their_type():
    root, leaf = Node(), Node()
    root.children.append(leaf)
    leaf.parent = root
    mine = isolated(root)
    assert mine is not root and mine.children[0].parent is mine
    counts = collections.Counter(a=1)
    both = [counts, counts]
    copied = isolated(both)
    assert type(copied[0]) is collections.Counter and copied[0] is copied[1]
    assert copied[0] is not counts


def test_a_shared_cache_skips_what_needed_no_copy_the_second_time():
    rows = MappingProxyType({(i,): (i, "x") for i in range(1000)})
    state = Entry("t", {"n": 1}), rows
    shared: dict[int, object] = {}
    first = isolated(state, shared)
    assert first[1] is rows and id(rows) in shared
    second = isolated(state, shared)
    assert second[1] is rows and second[0] is not first[0]  # the mutable part: a new copy
