"""The contracts of sinks, fixtures and the specs that tasks declare them with.

Any object with the right methods is a sink or a fixture: nothing needs to inherit from here.

A task lists *sink specs* (``sqlite("shop", seed=...)``, ``folder("root", template=...)``).
When a sandbox opens, each spec is *provisioned* in the sandbox's place: it yields the sink that
observes the resource, the fixture that seeds and resets it, and the endpoints an agent uses to
reach it (``ORACLE_DB_URL_SHOP=sqlite:///…``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from oracle.base.envnames import env_suffix as env_suffix
from oracle.evidence.diff import SinkDiff
from oracle.evidence.snapshot import Snapshot


class FixtureError(RuntimeError):
    """A fixture could not seed or reset its resource. Names the sink and the cause."""

    def __init__(self, sink: str, message: str) -> None:
        self.sink = sink
        super().__init__(f"fixture of sink {sink!r}: {message}")


def seed_sql(sink: str, sql: str | None, sql_file: str | None, base_dir: Path) -> str | None:
    """A SQL sink's seed text: `sql_file` (relative to the task file's folder), then `sql`."""
    if sql_file is None:
        return sql
    path = base_dir / sql_file
    try:
        return path.read_text(encoding="utf-8") + "\n" + (sql or "")
    except OSError as exc:
        raise FixtureError(sink, f"cannot read sql_file {path}: {exc}") from exc


def slug(text: str, limit: int = 20) -> str:
    """``'Shop DB'`` → ``'shop_db'``: a sink's name as a part of a server-side name."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:limit] or "db"


@runtime_checkable
class Sink(Protocol):
    """Observes one place where an effect can land.

    Example (a sink over a single file)::

        class OneFile:
            kind = "onefile"
            def __init__(self, name, path): self.name, self.path = name, path
            def snapshot(self): ...   # read everything, or raise SnapshotError
            def diff(self, before, after): ...

    Its module also declares the kind, beside its diff class (``ONEFILE =
    SinkKind("onefile", diff=OneFileDiff, state=OneFileState)``, see `oracle.evidence.kinds`), so
    that
    archives of it rebuild and predicates read it as ``ev.diff.of(ONEFILE, name)``.
    """

    name: str
    kind: str

    def snapshot(self) -> Snapshot:
        """The sink's complete state now, or raise `SnapshotError`."""
        ...

    def diff(self, before: Snapshot, after: Snapshot) -> SinkDiff:
        """The typed changes from `before` to `after`, in a stable order."""
        ...


@runtime_checkable
class Fixture(Protocol):
    """Seeds one sink's resource and restores it before every trial."""

    def seed(self) -> None:
        """Build whatever `reset` copies from (a template). Called once per sandbox."""
        ...

    def reset(self) -> None:
        """Restore the resource to the seed, whatever the previous trial left."""
        ...

    def teardown(self) -> None:
        """Release the resource (files, databases, connections)."""
        ...


@dataclass(frozen=True)
class Exposure:
    """What a fixture's server lets an agent do past the account the sandbox hands it (an
    administrator without a password, a ``trust`` rule…), as the fixture found when seeding.
    A fixture on a server offers it as its ``exposure`` attribute (None: nothing found)."""

    server: str
    #: ``host:port``, as the agent's URLs name it.
    endpoint: str
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Place:
    """Where a sandbox provisions its resources.

    ``agent_dir`` holds what the agent may read and write (task roots, database files), and
    is emptied before every trial; ``shared_dir`` what it may only read; ``cache_dir`` holds
    templates that survive between sandboxes and that the agent never sees.
    """

    agent_dir: Path
    cache_dir: Path
    tag: str = "t0"
    #: Files the agent may read but not write (a recorder's CA certificate); None for places
    #: made outside a sandbox, where such files go beside the agent's.
    shared_dir: Path | None = None
    #: Hosts the harness allows through every egress recorder on top of the task's own
    #: (a real agent's model API): passed through, still recorded.
    allow_hosts: tuple[str, ...] = ()
    #: Hosts that a local server answers for (host pattern → ``127.0.0.1:port``), offered by
    #: the sinks provisioned first (`Provisioned.routes`): every egress recorder routes them
    #: there, recorded as ``routed``.
    routes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Provisioned:
    """What a sink spec became in one sandbox."""

    sink: Sink
    fixture: Fixture
    endpoints: Mapping[str, str] = field(default_factory=dict)
    #: Unsuffixed names (``ORACLE_DB_URL``, ``ORACLE_TASK_ROOT``) given to the first sink
    #: that offers them.
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: Folders the sink keeps outside the place that an isolated agent must neither read nor
    #: write (an egress recorder's log, configuration and CA key).
    private: tuple[Path, ...] = ()
    #: Hosts a server of this sink answers for (``{"api.github.com": "127.0.0.1:41234"}``):
    #: the egress recorders route them to it. A spec that offers routes says so with a true
    #: ``provides_routes`` attribute, and is provisioned before the others.
    routes: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class SinkSpec(Protocol):
    """How a task declares a sink. `provision` must not touch anything outside `place` but
    the folders it lists in `Provisioned.private`, which isolated agents never see."""

    # Read-only: a frozen dataclass declares a sink as well as a plain class does.
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def provision(self, place: Place, base_dir: Path) -> Provisioned:
        """Create the sink and its fixture in `place`. Relative paths resolve against `base_dir`
        (the folder of the task file)."""
        ...

    def describe(self) -> str:
        """One line for people: ``sqlite 'shop' seeded from shop.sql``."""
        ...
