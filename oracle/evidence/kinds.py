"""Sink kinds: how the core knows which kinds of sink exist without naming any of them.

A sink module declares its kind once, beside its diff class::

    SQL = SinkKind("sql", diff=SqlDiff, state=SqlState)

That registers how the kind's states are rebuilt from an archive (``SqlState.from_json``, or
the `load` given) and gives the kind typed accessors on the evidence, the same for every kind,
built in or not::

    ev.diff.of(SQL, "shop")       # a SqlDiff
    ev.before.of(SQL, "shop")     # a SqlState
    ev.boundary.of(EGRESS)        # an EgressDiff (boundary kinds only)

and the same by the kind's accessor name (its name unless it says otherwise):
``ev.diff.sql("shop")``, ``ev.after.sql("shop")``, ``ev.boundary.egress()``.

This module imports nothing else of oracle's, so that `diff`, `snapshot` and `boundary` can all
read it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


class DiffClass(Protocol):
    """What a kind needs of its diff class (`oracle.evidence.diff.SinkDiff` subclasses are such):
    the
    kind it names. Kept as a protocol so that this module imports nothing of oracle's."""

    kind: ClassVar[str]


class StateValue(Protocol):
    """A sink's state (`oracle.evidence.snapshot.State`): it has a canonical JSON form."""

    def to_json(self) -> Any: ...


#: Rebuilds a sink kind's state from its ``to_json`` form; the second argument is the task's
#: spec of that sink, or None. Raises ValueError, TypeError or KeyError when the JSON is not a
#: state of that kind.
type StateLoader = Callable[[Any, Any], StateValue]

_STATE_LOADERS: dict[str, StateLoader] = {}
_KINDS: dict[str, SinkKind[Any, Any]] = {}
_ACCESSORS: dict[str, SinkKind[Any, Any]] = {}
# Names the evidence's own objects answer (Diff.changes, States.label…): no accessor may hide
# behind one, or it would never be reached.
_RESERVED: dict[str, str] = {}
# Functions that import the modules declaring the built-in kinds, run once before the first
# lookup: ``import oracle`` is lazy and imports no sink, yet an archive read, a boundary
# query or a typed accessor must see every built-in kind whatever was imported before.
_PENDING: list[Callable[[], object]] = []


# Kinds whose module is known but not imported yet: name → (module, accessor, boundary). A
# lookup of one kind imports its module alone; a listing of every kind imports them all.
_LATER: dict[str, tuple[str, str, bool]] = {}


def declare_later(load: Callable[[], object]) -> None:
    """Run `load` (which imports modules that declare kinds) before the registry is next
    read."""
    _PENDING.append(load)


def declare_builtin(name: str, module: str, *, accessor: str = "", boundary: bool = False) -> None:
    """Kind `name` is declared by `module`, imported the first time the kind (or its
    `accessor`, by default its name) is looked up, or every kind listed. The package root
    registers the built-in sinks this way, so that a process that reads one kind of sink does
    not import the clients of every other."""
    if name not in _KINDS:
        _LATER[name] = (module, accessor or name, boundary)


def _load(name: str | None = None, accessor: str | None = None) -> None:
    """Import the module of the kind `name` (or of the one with `accessor`), if it is one
    declared for later."""
    import importlib

    for kind, (module, acc, _) in list(_LATER.items()):
        if kind == name or (accessor is not None and acc == accessor):
            _LATER.pop(kind, None)
            importlib.import_module(module)


def declare_pending() -> None:
    """Run what `declare_later` registered, and import every kind declared for later
    (once): before listing the registries of kinds and change types."""
    import importlib

    while _PENDING:
        _PENDING.pop(0)()
    while _LATER:
        module, _, _ = _LATER.pop(next(iter(_LATER)))
        importlib.import_module(module)


def declare_kind(name: str) -> None:
    """Make sure kind `name` is declared if anything declares it: its own module where it is
    a kind declared for later, else everything registered."""
    if name in _KINDS:
        return
    _load(name)
    if name not in _KINDS:
        declare_pending()


def register_state(kind: str, load: StateLoader) -> None:
    """Make `oracle.evidence.snapshot.snapshot_from_json` rebuild states of sink kind `kind` with
    `load`. Declaring a `SinkKind` does this; call it directly only for a kind that has no
    diff class of its own.

    A second loader for a kind that another module registered is refused: an archive could
    not tell which one its states were written for."""
    known = _STATE_LOADERS.get(kind)
    if known is not None and _origin(known) != _origin(load):
        raise TypeError(
            f"sink kind {kind!r}: states are already rebuilt by {'.'.join(_origin(known))}, "
            f"not {'.'.join(_origin(load))}"
        )
    _STATE_LOADERS[kind] = load


def state_loader(kind: str) -> StateLoader | None:
    """The loader registered for `kind`'s states, or None."""
    if kind not in _STATE_LOADERS:
        declare_kind(kind)
    return _STATE_LOADERS.get(kind)


def state_kinds() -> list[str]:
    """Every kind whose states can be rebuilt, sorted."""
    declare_pending()
    return sorted(_STATE_LOADERS)


def _origin(thing: object) -> tuple[str, str]:
    return (getattr(thing, "__module__", "?"), getattr(thing, "__qualname__", repr(thing)))


@dataclass(frozen=True, eq=False)
class SinkKind[D: DiffClass, S]:
    """One kind of sink: its name (``"sql"``), its diff class and its state class.

    - `load` rebuilds a state from its JSON form and the task's spec of the sink (by default
      ``state.from_json``);
    - `accessor` is the name of the kind's accessor on ``ev.diff``, ``ev.before`` and
      ``ev.after`` (by default the kind's name);
    - `boundary` says its changes are boundary evidence, so that ``ev.boundary`` answers it;
    - `default_sink` is the sink name its accessors use when none is given (``"reply"``).

    Two modules cannot declare one kind with different classes (TypeError): an archive could
    not tell them apart. Declaring the same one again (a module imported twice) is harmless.
    """

    name: str
    diff: type[D]
    state: type[S]
    load: StateLoader | None = field(default=None, repr=False)
    accessor: str = ""
    boundary: bool = False
    default_sink: str | None = None

    def __post_init__(self) -> None:
        if self.diff.kind != self.name:
            raise TypeError(
                f"sink kind {self.name!r}: its diff class {self.diff.__qualname__} is of kind "
                f"{self.diff.kind!r}"
            )
        load = self.load if self.load is not None else getattr(self.state, "from_json", None)
        if load is None:
            raise TypeError(
                f"sink kind {self.name!r}: {self.state.__qualname__} has no from_json; pass "
                "load=, which rebuilds a state from its JSON form and the sink's spec"
            )
        object.__setattr__(self, "load", load)
        object.__setattr__(self, "accessor", self.accessor or self.name)
        _register_kind(self, load)

    def __repr__(self) -> str:
        return f"SinkKind({self.name!r})"

    def sink_to_read(self, sink: str | None) -> str:
        """`sink`, or this kind's default sink when it is None (TypeError when it has none)."""
        name = sink if sink is not None else self.default_sink
        if name is None:
            raise TypeError(f"name the {self.name} sink to read ({self.name} has no default)")
        return name

    def expect(self, sink: str, kind: str) -> None:
        """Raise TypeError unless `kind`, the kind sink `sink` really is, is this one."""
        if kind != self.name:
            raise TypeError(f"sink {sink!r} is a {kind} sink, not {self.name}")


def _register_kind(kind: SinkKind[Any, Any], load: StateLoader) -> None:
    known = _KINDS.get(kind.name)
    if known is not None and _identity(known) != _identity(kind):
        raise TypeError(
            f"sink kind {kind.name!r} is declared already, as {_describe(known)}, not "
            f"{_describe(kind)}; archives could not tell them apart (give the kind a name of "
            "its own)"
        )
    name = kind.accessor
    if not name.isidentifier() or name.startswith("_"):
        raise TypeError(f"sink kind {kind.name!r}: {name!r} cannot name an accessor")
    if name in _RESERVED:
        raise TypeError(
            f"sink kind {kind.name!r}: its accessor {name!r} is {_RESERVED[name]}'s own; give "
            "the kind an accessor of its own (SinkKind(..., accessor=...))"
        )
    taken = _ACCESSORS.get(name)
    if taken is not None and taken.name != kind.name:
        raise TypeError(
            f"sink kind {kind.name!r}: the accessor {name!r} is sink kind {taken.name!r}'s"
        )
    register_state(kind.name, load)
    _KINDS[kind.name] = _ACCESSORS[name] = kind


def _identity(kind: SinkKind[Any, Any]) -> tuple[object, ...]:
    classes = (_origin(kind.diff), _origin(kind.state), _origin(kind.load))
    return (*classes, kind.accessor, kind.boundary, kind.default_sink)


def _describe(kind: SinkKind[Any, Any]) -> str:
    diff, state, load = (".".join(_origin(x)) for x in (kind.diff, kind.state, kind.load))
    return f"diff {diff}, state {state} (loaded by {load}), accessor {kind.accessor!r}"


def reserve(owner: type, *attributes: str) -> None:
    """Keep `owner`'s public names (``changes``, ``failed``…: those of its class and the
    instance `attributes`) from ever naming a sink kind's accessor, which they would hide.
    Called by the classes that answer accessors, on import."""
    for name in [*dir(owner), *attributes]:
        if name.startswith("_"):
            continue
        kind = _ACCESSORS.get(name)
        if kind is not None:
            raise TypeError(
                f"{owner.__name__}.{name} hides the accessor of sink kind {kind.name!r}"
            )
        _RESERVED.setdefault(name, owner.__name__)


def declared() -> list[SinkKind[Any, Any]]:
    """Every kind declared so far (by the modules imported), by name."""
    declare_pending()
    return [_KINDS[name] for name in sorted(_KINDS)]


def boundary_kinds() -> frozenset[str]:
    """The names of the kinds whose changes are boundary evidence (those declared for later
    say so without being imported)."""
    while _PENDING:
        _PENDING.pop(0)()
    later = {name for name, (_, _, boundary) in _LATER.items() if boundary}
    return frozenset({*later, *(k.name for k in _KINDS.values() if k.boundary)})


def accessor_names(boundary: bool = False) -> list[str]:
    """The accessor names of every kind (of the boundary kinds only, with `boundary`)."""
    declare_pending()
    return sorted(n for n, k in _ACCESSORS.items() if k.boundary or not boundary)


def named_accessor(owner: Any, name: str, what: str, boundary: bool = False) -> Any:
    """`owner`'s accessor `name` (what its ``__getattr__`` answers), bound to it:
    ``owner.sql("shop")`` is ``owner.of(SQL, "shop")``. The sink argument is required, or
    defaults to the kind's `default_sink`; on the boundary (`boundary`, which answers only
    boundary kinds) it defaults to None. Raises AttributeError when no kind answers to
    `name`."""
    if name not in _ACCESSORS:
        _load(accessor=name)
        if name not in _ACCESSORS:
            declare_pending()
    kind = _ACCESSORS.get(name)
    if kind is None or (boundary and not kind.boundary):
        raise AttributeError(
            f"{type(owner).__name__!r} object has no attribute {name!r}", name=name, obj=owner
        )
    default = None if boundary else kind.default_sink

    def required(self: Any, sink: str) -> Any:
        return self.of(kind, sink)

    def optional(self: Any, sink: str | None = default) -> Any:
        return self.of(kind, sink)

    access: Callable[..., Any] = required if default is None and not boundary else optional
    access.__name__ = name
    access.__qualname__ = f"{type(owner).__name__}.{name}"
    access.__doc__ = f"The {what} of the {kind.name} sink `sink`: the same as ``of(kind, sink)``."
    return types.MethodType(access, owner)


def names_with_accessors(owner: object, boundary: bool = False) -> list[str]:
    """``dir(owner)`` with the accessors it answers through ``__getattr__``."""
    return sorted({*object.__dir__(owner), *accessor_names(boundary)})
