"""AgentDojo's pydantic task environments as a sink.

An AgentDojo environment (``WorkspaceEnvironment``, ``BankingEnvironment`` …) is a pydantic
model held in memory. Here it lives in a JSON file in the sandbox, in a *canonical* form that
leaves out what AgentDojo computes or aliases, so that an untouched environment diffs as empty:

- ``initial_<x>`` beside ``<x>`` (``Inbox.initial_emails`` and ``Inbox.emails`` hold the same
  objects): only ``<x>`` is kept; `restore` rebuilds ``initial_<x>`` from it;
- computed fields (``Inbox.received``, ``sent``, ``drafts``) are never fields, so never kept;
- ``CloudDriveFile.size``, which a validator recomputes from the content.

`canonical` and `restore` are inverse: ``canonical(restore(T, canonical(env))) ==
canonical(env)``. The sink reads the file (a snapshot is the parsed JSON and a digest of its
canonical bytes) and diffs two snapshots into typed changes addressed by path
(``inbox/emails/32``, ``bank_account/transactions/7/amount``); lists of records with an
``id``/``id_`` are keyed by it, other lists by position.

Example predicate over the diff::

    def mail_to_attacker(ev):
        return bool(ev.diff["env"].added("inbox/emails/*", recipients=["mark@evil.test"]))
"""

from __future__ import annotations

import datetime as _dt
import enum
import functools
import hashlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, TypeAdapter

from oracle.base.canonical import Json
from oracle.base.globs import compile_glob
from oracle.base.query import matches
from oracle.evidence.diff import Change, SinkDiff
from oracle.evidence.snapshot import Snapshot, SnapshotError

KIND = "agentdojo"
#: Fields AgentDojo recomputes from others on validation: (model class name, field).
RECOMPUTED = frozenset({("CloudDriveFile", "size")})


@functools.cache
def _alias_pairs(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    fields = cls.model_fields
    return tuple(
        (name, name[len("initial_") :])
        for name in fields
        if name.startswith("initial_") and name[len("initial_") :] in fields
    )


@functools.cache
def _kept_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    initial = {a for a, _ in _alias_pairs(cls)}
    return tuple(
        n for n in cls.model_fields if n not in initial and (cls.__name__, n) not in RECOMPUTED
    )


def _encode(value: Any) -> Json:
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, enum.Enum):
            return _encode(value.value)
        return value
    if isinstance(value, BaseModel):
        return canonical(value)
    if isinstance(value, Mapping):
        return {str(_encode(k)): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_encode(v) for v in value), key=repr)
    if isinstance(value, enum.Enum):
        return _encode(value.value)
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    raise TypeError(f"cannot put a {type(value).__name__} of an AgentDojo environment into JSON")


def canonical(model: BaseModel) -> dict[str, Json]:
    """The canonical JSON of an environment (or any part of one): see the module docstring."""
    cls = type(model)
    return {name: _encode(getattr(model, name)) for name in _kept_fields(cls)}


def _fill(cls: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(data)
    for initial, alias in _alias_pairs(cls):
        value = out.get(alias)
        out[initial] = list(value.values()) if isinstance(value, Mapping) else value or []
    for name, info in cls.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(out.get(name), dict):
            out[name] = _fill(ann, out[name])
    return out


def _pin(model: BaseModel, data: Mapping[str, Any]) -> None:
    """Set back fields that a validator recomputed (a contact list grown from the mail)."""
    cls = type(model)
    for name in _kept_fields(cls):
        if name not in data:
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel) and isinstance(data[name], Mapping):
            _pin(value, data[name])
        elif _alias_pairs(cls) and _encode(value) != data[name]:
            adapter: TypeAdapter[Any] = TypeAdapter(cls.model_fields[name].annotation or Any)
            object.__setattr__(model, name, adapter.validate_python(data[name]))


def restore[M: BaseModel](cls: type[M], data: Mapping[str, Any]) -> M:
    """The environment whose canonical form is `data` (what a tool or a check works on)."""
    model = cls.model_validate(_fill(cls, data))
    _pin(model, data)
    return model


def dumps(model: BaseModel) -> bytes:
    """The file form of an environment: its canonical JSON, in the model's field order."""
    return orjson.dumps(canonical(model))


# --- state -------------------------------------------------------------------------------------


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}/{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}/{i}" if path else str(i))


class EnvState:
    """One environment at one instant: its canonical JSON (``data``), in predicates::

    ev.after["env"].state.get("bank_account/balance")
    ev.after["env"].state.environment()      # the AgentDojo model, rebuilt
    """

    def __init__(self, data: dict[str, Any], env_type: type[BaseModel] | None) -> None:
        self.data = data
        self.env_type = env_type
        self._env: BaseModel | None = None

    def to_json(self) -> Json:
        return self.data

    @classmethod
    def from_json(cls, raw: Any, env_type: type[BaseModel] | None = None) -> EnvState:
        """The state `to_json` wrote; `env_type` is the AgentDojo environment class that
        `environment` rebuilds (the suite's, which the sink's spec names). Raises TypeError
        when `raw` is not a JSON object."""
        if not isinstance(raw, dict):
            raise TypeError(f"an environment is a JSON object, not {type(raw).__name__}")
        return cls(raw, env_type)

    def get(self, path: str) -> Any:
        """The value at a ``/``-separated path (list items by position). Raises KeyError."""
        value: Any = self.data
        for part in path.split("/") if path else ():
            value = value[int(part)] if isinstance(value, list) else value[part]
        return value

    def environment(self) -> BaseModel:
        """The AgentDojo environment this state holds (rebuilt once, then shared)."""
        if self.env_type is None:
            raise TypeError("this environment state does not know its AgentDojo type")
        if self._env is None:
            self._env = restore(self.env_type, self.data)
        return self._env

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` occurs in a string under a path matching the glob `where`."""
        rx = compile_glob(where)
        return any(
            isinstance(v, str) and text in v and rx.match(p) for p, v in _walk(self.data, "")
        )

    def names(self) -> list[str]:
        return []


# --- changes and the diff ---------------------------------------------------------------------


def _texts(value: Any) -> Iterator[str]:
    for _, v in _walk(value, ""):
        if isinstance(v, str):
            yield v


def _short(value: Any, limit: int = 60) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class EnvItemAdded(Change):
    """A value at a path that did not exist before (a new email, a new transaction)."""

    change: Literal["env_added"] = "env_added"
    path: str
    value: Any

    def summary(self) -> str:
        return f"added     {self.path} = {_short(self.value)}"

    def texts(self) -> Iterator[str]:
        return _texts(self.value)

    def target(self) -> str:
        return self.path


class EnvItemRemoved(Change):
    """A value at a path that no longer exists."""

    change: Literal["env_removed"] = "env_removed"
    path: str
    value: Any

    def summary(self) -> str:
        return f"removed   {self.path} (was {_short(self.value)})"

    def target(self) -> str:
        return self.path


class EnvValueChanged(Change):
    """A value that changed in place."""

    change: Literal["env_changed"] = "env_changed"
    path: str
    old: Any
    new: Any

    def summary(self) -> str:
        return f"changed   {self.path}: {_short(self.old, 40)} → {_short(self.new, 40)}"

    def texts(self) -> Iterator[str]:
        return _texts(self.new)

    def target(self) -> str:
        return self.path


class EnvDiff(SinkDiff):
    """The changes of one environment. Queries take a path glob and ``where`` expectations on
    the value (for records)::

        d = ev.diff["env"]
        d.added("inbox/emails/*", subject="Hi")            # new emails with that subject
        d.changed("bank_account/balance")                 # the balance changed
        d.removed("cloud_drive/files/*")                  # files deleted
    """

    kind: ClassVar[str] = KIND

    def _select(self, cls: type[Change], glob: str, where: Mapping[str, Any]) -> list[Any]:
        rx = compile_glob(glob)
        out = []
        for c in self.of_type(cls):
            if not rx.match(c.target()):
                continue
            value = getattr(c, "new", None) if isinstance(c, EnvValueChanged) else c.value  # type: ignore[attr-defined]
            if where and not (isinstance(value, Mapping) and matches(value, where, c.target())):
                continue
            out.append(c)
        return out

    def added(self, glob: str = "**", **where: Any) -> list[EnvItemAdded]:
        return self._select(EnvItemAdded, glob, where)

    def removed(self, glob: str = "**", **where: Any) -> list[EnvItemRemoved]:
        return self._select(EnvItemRemoved, glob, where)

    def changed(self, glob: str = "**", **where: Any) -> list[EnvValueChanged]:
        return self._select(EnvValueChanged, glob, where)


def _keyed(items: list[Any]) -> dict[str, Any] | None:
    """A list of records keyed by their ``id``/``id_`` (None if they have no unique one)."""
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for key in ("id_", "id"):
        if all(key in x for x in items):
            ids = [str(x[key]) for x in items]
            if len(set(ids)) == len(ids):
                return dict(zip(ids, items, strict=True))
    return None


def diff_values(old: Any, new: Any, path: str, out: list[Change]) -> None:
    """Append the changes from `old` to `new` at `path` (recursing where both are alike)."""
    if old == new:
        return
    if isinstance(old, list) and isinstance(new, list):
        ko, kn = _keyed(old), _keyed(new)
        if ko is not None and kn is not None:
            old, new = ko, kn
        else:
            for i in range(max(len(old), len(new))):
                sub = f"{path}/{i}"
                if i >= len(new):
                    out.append(EnvItemRemoved(path=sub, value=old[i]))
                elif i >= len(old):
                    out.append(EnvItemAdded(path=sub, value=new[i]))
                else:
                    diff_values(old[i], new[i], sub, out)
            return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in old.keys() | new.keys():
            sub = f"{path}/{k}" if path else str(k)
            if k not in new:
                out.append(EnvItemRemoved(path=sub, value=old[k]))
            elif k not in old:
                out.append(EnvItemAdded(path=sub, value=new[k]))
            else:
                diff_values(old[k], new[k], sub, out)
        return
    out.append(EnvValueChanged(path=path, old=old, new=new))


class EnvSink:
    """Observes the JSON file that holds one AgentDojo environment."""

    kind = KIND

    def __init__(self, name: str, path: Path, env_type: type[BaseModel] | None = None) -> None:
        self.name = name
        self.path = path
        self.env_type = env_type

    def snapshot(self) -> Snapshot:
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise SnapshotError(
                self.name, f"cannot read the environment {self.path}: {exc}"
            ) from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise SnapshotError(self.name, f"the environment is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise SnapshotError(self.name, "the environment is not a JSON object")
        digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
        return Snapshot(
            self.name, KIND, "sha256:" + digest, EnvState(data, self.env_type), time.time()
        )

    def diff(self, before: Snapshot, after: Snapshot) -> EnvDiff:
        changes: list[Change] = []
        if before.digest != after.digest:
            diff_values(before.state.data, after.state.data, "", changes)
        changes.sort(key=lambda c: (c.target(), c.change))
        return EnvDiff(self.name, changes)
