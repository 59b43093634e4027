"""Sink kinds: a kind declared outside the core (here, in this test module) is read through
``of(KIND, sink)`` and its accessor name on the diff, the snapshots and the boundary, and
rebuilds from an archive, with no change to the core; wrong-kind reads fail as the built-in
accessors always did."""

from __future__ import annotations

import copy
import inspect
from typing import Any, ClassVar, Literal

import pytest

from oracle.evidence.boundary import Boundary
from oracle.evidence.copies import isolated
from oracle.evidence.diff import Change, Diff, SinkDiff, UnknownSinkError, sink_diff_from_json
from oracle.evidence.evidence import Evidence, HarnessRecords, TaskFacts
from oracle.evidence.kinds import SinkKind, boundary_kinds, declared
from oracle.evidence.snapshot import Snapshot, States, snapshot_from_json
from oracle.sinks.egress import EGRESS
from oracle.sinks.reply import REPLY
from oracle.sinks.sql import SQL


class Bumped(Change):
    change: Literal["tally_bumped"] = "tally_bumped"
    by: int


class TallyDiff(SinkDiff):
    kind: ClassVar[str] = "tally"

    def bumps(self) -> int:
        return sum(c.by for c in self.of_type(Bumped))


class TallyState:
    def __init__(self, count: int) -> None:
        self.count = count

    def to_json(self) -> dict[str, int]:
        return {"count": self.count}

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> TallyState:
        if not isinstance(raw, dict) or type(raw.get("count")) is not int:
            raise ValueError(f"not a tally: {raw!r}")
        return cls(raw["count"])


TALLY = SinkKind("tally", diff=TallyDiff, state=TallyState)


class BeaconDiff(SinkDiff):
    kind: ClassVar[str] = "beacon"


BEACON = SinkKind("beacon", diff=BeaconDiff, state=TallyState, boundary=True, accessor="signal")


def tally_diff() -> Diff:
    return Diff(
        {
            "t": TallyDiff("t", [Bumped(by=2), Bumped(by=3)]),
            "g": SinkDiff("g", []),
            "b1": BeaconDiff("b1", []),
        }
    )


def tally_states() -> States:
    return States({"t": Snapshot("t", "tally", "sha256:0", TallyState(5), 1.0)}, "after")


def evidence() -> Evidence:
    return Evidence(
        diff=tally_diff(),
        before=States({}, "before"),
        after=tally_states(),
        harness=HarnessRecords(None),
        task=TaskFacts("t", "count"),
    )


def test_a_kind_declared_outside_the_core_is_read_typed_and_by_its_accessor():
    diff, after = tally_diff(), tally_states()
    assert diff.of(TALLY, "t") is diff["t"] and diff.of(TALLY, "t").bumps() == 5
    assert diff.tally("t") is diff["t"]
    assert diff.tally(sink="t") is diff["t"]
    assert after.of(TALLY, "t").count == 5 and after.tally("t").count == 5
    ev = evidence()
    assert ev.diff.tally("t").bumps() == 5 and ev.after.of(TALLY, "t").count == 5
    assert ev.tiers_read == {"environment"}
    assert TALLY in declared() and repr(TALLY) == "SinkKind('tally')"


def test_a_kind_declared_outside_the_core_rebuilds_from_its_archive():
    snap = tally_states()["t"]
    back = snapshot_from_json(snap.to_json())
    assert isinstance(back.state, TallyState) and back.state.count == 5
    d = sink_diff_from_json(tally_diff()["t"].to_json())
    assert isinstance(d, TallyDiff) and d.bumps() == 5
    assert Diff.from_json(tally_diff().to_json()).tally("t").bumps() == 5


def test_reading_a_sink_as_another_kind_is_the_same_type_error_as_ever():
    diff, after = tally_diff(), tally_states()
    with pytest.raises(TypeError, match=r"^sink 'g' is a generic sink, not tally$"):
        diff.of(TALLY, "g")
    with pytest.raises(TypeError, match=r"^sink 'g' is a generic sink, not tally$"):
        diff.tally("g")
    with pytest.raises(TypeError, match=r"^sink 't' is a tally sink, not sql$"):
        diff.sql("t")
    with pytest.raises(TypeError, match=r"^sink 't' is a tally sink, not files$"):
        after.files("t")
    with pytest.raises(UnknownSinkError, match="no sink named 'nope' in the diff"):
        diff.of(TALLY, "nope")
    with pytest.raises(UnknownSinkError, match="no sink named 'nope' in the after snapshot"):
        after.tally("nope")
    with pytest.raises(TypeError, match="name the tally sink"):
        diff.of(TALLY)


def test_an_unknown_accessor_is_an_attribute_error():
    diff, after = tally_diff(), tally_states()
    for owner in (diff, after, Boundary(diff)):
        with pytest.raises(AttributeError, match="object has no attribute 'tallies'"):
            owner.tallies  # noqa: B018
        assert not hasattr(owner, "tallies") and not hasattr(owner, "_private")
    assert hasattr(diff, "tally") and hasattr(after, "sql") and hasattr(Boundary(diff), "egress")
    assert {"tally", "sql", "reply", "of"} <= set(dir(diff)) and "keys" in dir(diff)
    assert {"tally", "files"} <= set(dir(after))
    assert {"egress", "signal"} <= set(dir(Boundary(diff))) and "sql" not in dir(Boundary(diff))


def test_the_named_accessors_keep_their_signatures():
    def params(method: Any) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(method).parameters.values()]

    diff, after, boundary = tally_diff(), tally_states(), Boundary(tally_diff())
    assert params(diff.sql) == params(after.tally) == [("sink", inspect.Parameter.empty)]
    assert params(diff.reply) == params(after.reply) == [("sink", "reply")]
    assert params(boundary.egress) == params(boundary.reply) == [("sink", None)]
    assert diff.sql.__name__ == "sql" and "sql sink" in (diff.sql.__doc__ or "")
    with pytest.raises(UnknownSinkError, match="no sink named 'reply'"):
        diff.reply()  # the reply sink's default name, as before


def test_the_boundary_answers_boundary_kinds_only():
    boundary = Boundary(tally_diff())
    assert {"egress", "mail", "reply", "beacon"} <= boundary_kinds()
    assert boundary.of(BEACON) is boundary.signal() and boundary.signal("b1").sink == "b1"
    assert [d.sink for d in boundary.sinks()] == ["b1"]
    with pytest.raises(TypeError, match="tally sinks are not boundary evidence"):
        boundary.of(TALLY, "t")
    with pytest.raises(AttributeError, match="'Boundary' object has no attribute 'tally'"):
        boundary.tally  # noqa: B018
    with pytest.raises(TypeError, match=r"^sink 't' is a tally sink, not beacon$"):
        boundary.signal("t")
    with pytest.raises(UnknownSinkError, match=r"no sink named '\(egress\)'"):
        boundary.of(EGRESS)
    two = Boundary(Diff({"b1": BeaconDiff("b1", []), "b2": BeaconDiff("b2", [])}))
    with pytest.raises(KeyError, match="several beacon sinks"):
        two.signal()
    assert evidence().boundary.signal().sink == "b1"


def test_copies_and_half_built_objects_answer_as_before():
    diff = tally_diff()
    for copied in (copy.copy(diff), isolated(diff)):
        assert copied.tally("t").bumps() == 5
    assert isolated(tally_states()).tally("t").count == 5
    for cls in (Diff, States, Boundary):
        bare = cls.__new__(cls)  # as copy and pickle make them, before any attribute is set
        assert getattr(bare, "__deepcopy__", None) is None
        assert not hasattr(bare, "__setstate__") or callable(bare.__setstate__)
        assert callable(bare.sql if cls is not Boundary else bare.egress)


def test_a_kind_is_declared_once():
    SinkKind("tally", diff=TallyDiff, state=TallyState)  # the same again: a module re-imported
    with pytest.raises(TypeError, match="sink kind 'tally' is declared already"):
        SinkKind("tally", diff=TallyDiff, state=Bumped, load=TallyState.from_json)
    with pytest.raises(TypeError, match="sink kind 'tally' is declared already"):
        SinkKind("tally", diff=TallyDiff, state=TallyState, boundary=True)
    with pytest.raises(TypeError, match="its diff class TallyDiff is of kind 'tally'"):
        SinkKind("sql", diff=TallyDiff, state=TallyState)
    with pytest.raises(TypeError, match="sink kind 'sql' is declared already"):
        SinkKind("sql", diff=SQL.diff, state=TallyState)
    assert TALLY.accessor == "tally" and REPLY.default_sink == "reply" and REPLY.boundary


def test_an_accessor_may_not_hide_behind_a_name_the_evidence_uses():
    class Taken(SinkDiff):
        kind: ClassVar[str] = "taken-accessor"

    with pytest.raises(TypeError, match="its accessor 'changes' is Diff's own"):
        SinkKind("taken-accessor", diff=Taken, state=TallyState, accessor="changes")
    with pytest.raises(TypeError, match="its accessor 'label' is States's own"):
        SinkKind("taken-accessor", diff=Taken, state=TallyState, accessor="label")
    with pytest.raises(TypeError, match="'taken-accessor' cannot name an accessor"):
        SinkKind("taken-accessor", diff=Taken, state=TallyState)
    with pytest.raises(TypeError, match="the accessor 'sql' is sink kind 'sql'"):
        SinkKind("taken-accessor", diff=Taken, state=TallyState, accessor="sql")
    with pytest.raises(TypeError, match="has no from_json; pass load="):
        SinkKind("taken-accessor", diff=Taken, state=object, accessor="taken")
    assert "taken-accessor" not in {k.name for k in declared()}
