"""Snapshots: a sink's complete, canonical state at one instant, with a digest.

A snapshot is complete or it is not taken: a sink that cannot read all of its state raises
`SnapshotError`, and the trial records that observation as failed (its verdicts become unknown).

A snapshot also comes back from its JSON form (`snapshot_from_json`), for a scorer that gets
only the archived evidence: each sink module declares its kind (`oracle.evidence.kinds.SinkKind`),
which
registers how to rebuild its state, so that this module needs to know no sink.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from oracle.base.canonical import Json
from oracle.evidence.diff import EvidenceFormatError, UnknownSinkError, json_difference
from oracle.evidence.kinds import (
    SinkKind,
    named_accessor,
    names_with_accessors,
    reserve,
    state_kinds,
    state_loader,
)

# Where sink modules that declare no `SinkKind` (and older callers) find it.
from oracle.evidence.kinds import register_state as register_state


class State(Protocol):
    """The sink-specific content of a snapshot. It must not change once taken."""

    def to_json(self) -> Json:
        """The canonical JSON form, written into archives."""
        ...


class SnapshotError(RuntimeError):
    """A sink could not be observed completely. The message names the sink and the cause."""

    def __init__(self, sink: str, message: str) -> None:
        self.sink = sink
        super().__init__(f"sink {sink!r}: {message}")


@dataclass(frozen=True)
class Snapshot:
    """One sink's state at one instant.

    ``digest`` is ``sha256:<hex>`` over the canonical state: two snapshots with the same digest
    hold the same state.
    """

    sink: str
    kind: str
    digest: str
    state: Any
    taken_at: float = field(compare=False)

    def to_json(self) -> dict[str, Json]:
        """``{"sink", "kind", "digest", "taken_at", "state"}`` for the archive (read back by
        `snapshot_from_json`)."""
        return {
            "sink": self.sink,
            "kind": self.kind,
            "digest": self.digest,
            "taken_at": self.taken_at,
            "state": self.state.to_json(),
        }


_SNAPSHOT_FIELDS = frozenset({"sink", "kind", "digest", "taken_at", "state"})


def snapshot_from_json(raw: Mapping[str, Any], spec: Any = None) -> Snapshot:
    """The snapshot `Snapshot.to_json` wrote (an archive's ``snapshots/<when>/<sink>.json``),
    with its state rebuilt by the loader its kind registered, and the archived digest and time.
    `spec` is the task's spec of that sink, for a state that needs more than its JSON (the
    type of an AgentDojo environment).

    Raises `EvidenceFormatError`, naming the sink and the kind, for an unknown kind, a field
    missing or of the wrong type, or a state that would not write back the JSON it was read
    from: never a state rebuilt in part."""
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(
            None, None, f"a snapshot is a JSON object, not {type(raw).__name__}"
        )
    sink, kind = raw.get("sink"), raw.get("kind")
    if not isinstance(sink, str):
        raise EvidenceFormatError(
            None, kind if isinstance(kind, str) else None, f"the snapshot names no sink ({sink!r})"
        )
    if not isinstance(kind, str):
        raise EvidenceFormatError(sink, None, f"the snapshot names no kind ({kind!r})")
    digest, taken_at = raw.get("digest"), raw.get("taken_at")
    if not isinstance(digest, str):
        raise EvidenceFormatError(sink, kind, f"the snapshot has no digest ({digest!r})")
    if not isinstance(taken_at, int | float) or isinstance(taken_at, bool):
        raise EvidenceFormatError(sink, kind, f"the snapshot has no time ({taken_at!r})")
    odd = sorted(set(raw) ^ _SNAPSHOT_FIELDS)
    if odd:
        raise EvidenceFormatError(
            sink, kind, f"the snapshot's fields are not {sorted(_SNAPSHOT_FIELDS)}: {odd} differ"
        )
    if spec is not None and spec.name != sink:
        raise EvidenceFormatError(sink, kind, f"the spec handed over is sink {spec.name!r}'s")
    load = state_loader(kind)
    if load is None:
        known = ", ".join(state_kinds()) or "none"
        raise EvidenceFormatError(
            sink,
            kind,
            f"no state loader is registered for this kind (known: {known}); import the module "
            "that defines the sink (the task's module does, when it declares the sink)",
        )
    try:
        state = load(raw["state"], spec)
        written = state.to_json()
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        what = f"field {exc} is missing" if type(exc) is KeyError else f"{exc}"
        raise EvidenceFormatError(sink, kind, f"malformed state: {what}") from exc
    wrong = json_difference(raw["state"], written)
    if wrong:
        raise EvidenceFormatError(sink, kind, f"the state does not read back as archived: {wrong}")
    return Snapshot(sink, kind, digest, state, taken_at)


class States(Mapping[str, Snapshot]):
    """The snapshots of every sink at one point of a trial (before or after the agent ran)."""

    def __init__(
        self,
        snapshots: Mapping[str, Snapshot],
        label: str,
        failed: Mapping[str, str] | None = None,
    ) -> None:
        self._snapshots = MappingProxyType(dict(sorted(snapshots.items())))
        self.label = label
        self.failed: Mapping[str, str] = MappingProxyType(dict(failed or {}))

    def __getitem__(self, sink: str) -> Snapshot:
        try:
            return self._snapshots[sink]
        except KeyError:
            raise UnknownSinkError(
                sink, list(self._snapshots), f"{self.label} snapshot", self.failed
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)

    def of[S](self, kind: SinkKind[Any, S], sink: str | None = None) -> S:
        """The state of the sink `sink` of `kind`, typed::

            ev.before.of(SQL, "shop").rows("orders")      # SQL from oracle.sinks.sql

        `sink` may be left out for a kind with a default sink (the reply). Raises
        `UnknownSinkError` for a sink not observed, TypeError for a sink of another kind.
        ``ev.before.sql("shop")`` is the same, by the kind's accessor name."""
        name = kind.sink_to_read(sink)
        snap = self[name]
        kind.expect(name, snap.kind)
        state: S = snap.state
        return state

    if not TYPE_CHECKING:  # type checkers see `of`, and `oracle.Evidence` the typed accessors

        def __getattr__(self, name: str) -> Any:
            return named_accessor(self, name, "state")

    def __dir__(self) -> list[str]:
        return names_with_accessors(self)


reserve(States, "label", "failed")
