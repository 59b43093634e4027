"""The Redis sink: every key of one logical database, read atomically, diffed key by key.

A snapshot runs one Lua script, which Redis executes without interleaving any other command,
so the keys, their types, values and whether each has an expiry are read from one instant.
Values are canonical: text where the bytes are UTF-8 (else tagged bytes), hashes as objects,
lists in order, sets sorted, sorted sets as ``{member: score}``, streams as their entries. The
expiry is recorded as present or not (``expires``), never as the remaining time, which moves.

Example::

    d = ev.diff.redis("cache")
    d.added("session:*")                        # keys created
    d.changed("flags", "require_2fa")           # a hash whose field require_2fa changed
    d.changed("flags", require_2fa="off")       # … and is now "off"
    d.removed("*")                              # keys deleted (or expired)
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypedDict
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, TypeAdapter

from oracle.base.canonical import Json, digest_json, to_jsonable
from oracle.base.query import matches
from oracle.evidence.diff import Change, Content, SinkDiff, deep_detail
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError

KIND = "redis"

_READ_ALL = """
local keys = redis.call('KEYS', ARGV[1])
local out = {}
for _, k in ipairs(keys) do
  local t = redis.call('TYPE', k)['ok']
  local v
  if t == 'string' then v = redis.call('GET', k)
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'set' then v = redis.call('SMEMBERS', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'stream' then v = redis.call('XRANGE', k, '-', '+')
  else v = false end
  out[#out + 1] = {k, t, redis.call('PTTL', k), v}
end
return out
"""


def _text(raw: Any) -> Any:
    """Bytes from Redis as text when they are UTF-8, else as bytes (tagged in evidence)."""
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    return raw


def _pairs(items: Sequence[Any]) -> list[tuple[Any, Any]]:
    return [(items[i], items[i + 1]) for i in range(0, len(items), 2)]


def _value(kind: str, raw: Any) -> Json:
    if kind == "string":
        return to_jsonable(_text(raw))
    if kind == "hash":
        return {str(to_jsonable(_text(f))): to_jsonable(_text(v)) for f, v in sorted(_pairs(raw))}
    if kind == "list":
        return [to_jsonable(_text(v)) for v in raw]
    if kind == "set":
        return [to_jsonable(_text(v)) for v in sorted(raw)]
    if kind == "zset":
        return {str(to_jsonable(_text(m))): float(s) for m, s in _pairs(raw)}
    if kind == "stream":
        return [
            {
                "id": _text(entry[0]),
                "fields": {str(_text(f)): _text(v) for f, v in _pairs(entry[1])},
            }
            for entry in raw
        ]
    raise ValueError(f"type {kind!r} is not read")


def _key_name(raw: Any) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "backslashreplace")
    return str(raw)


@dataclass(frozen=True)
class KeyState:
    """One key: its type, canonical value, and whether it has an expiry."""

    type: str
    value: Json
    expires: bool

    def to_json(self) -> dict[str, Json]:
        return {"type": self.type, "value": self.value, "expires": self.expires}

    @property
    def digest(self) -> str:
        return digest_json(self.to_json())

    def record(self) -> dict[str, Any]:
        """What ``where`` expectations match: a hash's fields, else ``{"value": …}``."""
        if self.type == "hash" and isinstance(self.value, dict):
            return dict(self.value)
        return {"value": self.value}


def _strings(value: Json) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _blob(value: Json) -> bytes:
    """Every piece of text or bytes in a canonical value (dict keys too, bytes from their
    tagged form), one per line: what the canary search reads of a whole key."""
    parts: list[bytes] = []

    def walk(v: Json) -> None:
        if isinstance(v, str):
            parts.append(v.encode("utf-8", "surrogatepass"))
        elif isinstance(v, dict) and set(v) == {"$bytes"}:
            parts.append(base64.b64decode(str(v["$bytes"])))
        elif isinstance(v, dict):
            for k, item in v.items():
                parts.append(k.encode("utf-8", "surrogatepass"))
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    walk(value)
    return b"\n".join(parts)


def _contents(type_: str, value: Json, before: tuple[str, Json] | None = None) -> Iterator[Content]:
    """A key's content for the canary search, with what it held before (``(type, value)``)
    when it changed, so that only what the change brought in counts: field by field for a
    hash that stayed a hash (as SQL rows go column by column), the whole value otherwise."""
    if type_ == "hash" and isinstance(value, dict) and (before is None or before[0] == "hash"):
        old = before[1] if before is not None and isinstance(before[1], dict) else {}
        names_before = "\n".join(old) if before is not None else None
        yield Content("field names", "\n".join(value), names_before)
        for name, v in value.items():
            if before is None:
                yield Content(f"field {name}", _blob(v))
            elif old.get(name) != v:
                was = _blob(old[name]) if name in old else None
                yield Content(f"field {name}", _blob(v), was)
        return
    yield Content("value", _blob(value), None if before is None else _blob(before[1]))


@dataclass(frozen=True)
class RedisState:
    """A logical database's keys. In predicates::

    ev.before.redis("cache").value("flags")          # {"dark_mode": "off", ...}
    ev.after.redis("cache").keys("session:*")
    """

    keys_: Mapping[str, KeyState]

    def to_json(self) -> dict[str, Json]:
        return {"keys": {k: v.to_json() for k, v in self.keys_.items()}}

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> RedisState:
        """The state `to_json` wrote (its values are canonical already); `spec` is not
        needed. Raises ValueError when `raw` is not such a state."""
        s = _STATE.validate_python(raw, strict=True)
        return cls(
            MappingProxyType(
                {k: KeyState(v["type"], v["value"], v["expires"]) for k, v in s["keys"].items()}
            )
        )

    def keys(self, pattern: str = "*") -> list[str]:
        """Key names matching a glob, sorted."""
        return [k for k in self.keys_ if fnmatchcase(k, pattern)]

    def get(self, key: str) -> KeyState | None:
        return self.keys_.get(key)

    def value(self, key: str) -> Json:
        """The canonical value of `key`; a key that does not exist raises `KeyError`."""
        try:
            return self.keys_[key].value
        except KeyError:
            raise KeyError(f"no key {key!r} in this snapshot") from None

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` occurs in a text value of a key matching `where` (a glob)."""
        return any(text in s for k in self.keys(where) for s in _strings(self.keys_[k].value))


class _KeyJson(TypedDict):
    type: str
    value: Any
    expires: bool


class _StateJson(TypedDict):
    keys: dict[str, _KeyJson]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)

# -- changes --------------------------------------------------------------------------------


class KeyAdded(Change):
    change: Literal["redis_key_added"] = "redis_key_added"
    key: str
    type: str
    value: Any
    expires: bool

    def target(self) -> str:
        return self.key

    def summary(self) -> str:
        return f"key added    {self.key} ({self.type}) {json.dumps(self.value)[:80]}"

    def texts(self) -> Iterator[str]:
        return _strings(self.value)

    def contents(self) -> Iterator[Content]:
        return _contents(self.type, self.value)

    def record(self) -> dict[str, Any]:
        return KeyState(self.type, self.value, self.expires).record()


class KeyRemoved(Change):
    change: Literal["redis_key_removed"] = "redis_key_removed"
    key: str
    type: str
    value: Any
    expires: bool

    def target(self) -> str:
        return self.key

    def summary(self) -> str:
        return f"key removed  {self.key} ({self.type})"

    def record(self) -> dict[str, Any]:
        return KeyState(self.type, self.value, self.expires).record()


class HashFieldChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    old: Any
    new: Any


class KeyChanged(Change):
    """A key present before and after whose type, value or expiry changed. ``fields`` lists
    the hash fields that changed (``None`` for other types: see ``detail``)."""

    change: Literal["redis_key_changed"] = "redis_key_changed"
    key: str
    type: str
    old_type: str
    before: Any
    value: Any
    expires: bool
    old_expires: bool
    fields: dict[str, HashFieldChange] | None = None
    detail: dict[str, Any] | None = None

    def target(self) -> str:
        return self.key

    def summary(self) -> str:
        if self.fields:
            parts = ", ".join(f"{f}: {c.old!r} → {c.new!r}" for f, c in self.fields.items())
        elif self.old_type != self.type:
            parts = f"type {self.old_type} → {self.type}"
        elif self.before != self.value:
            parts = f"{json.dumps(self.before)[:40]} → {json.dumps(self.value)[:40]}"
        else:
            parts = "expiry " + ("set" if self.expires else "removed")
        return f"key changed  {self.key} {parts}"

    def texts(self) -> Iterator[str]:
        if self.fields:
            return _strings([c.new for c in self.fields.values()])
        return _strings(self.value)

    def contents(self) -> Iterator[Content]:
        return _contents(self.type, self.value, (self.old_type, self.before))

    def record(self) -> dict[str, Any]:
        return KeyState(self.type, self.value, self.expires).record()

    def before_record(self) -> dict[str, Any]:
        return KeyState(self.old_type, self.before, self.old_expires).record()


def _detail(old: Json, new: Json) -> dict[str, Any] | None:
    if not isinstance(old, dict | list) or not isinstance(new, dict | list):
        return None
    return deep_detail(old, new)


class RedisDiff(SinkDiff):
    """The changes in one Redis database. Key arguments are globs (``session:*``)::

    d = ev.diff.redis("cache")
    d.added("session:*", value="admin")         # keys created whose value matches
    d.changed("flags", "require_2fa", require_2fa="off")
    d.changed("motd", value=re.compile("buy now"), was={"value": "welcome"})
    """

    kind: ClassVar[str] = KIND

    def added(self, pattern: str = "*", **where: Any) -> list[KeyAdded]:
        """Keys created, matching `pattern`, whose value (or hash fields) match `where`."""
        return [
            c
            for c in self.of_type(KeyAdded)
            if fnmatchcase(c.key, pattern) and matches(c.record(), where, f"key {c.key!r}")
        ]

    def removed(self, pattern: str = "*", **where: Any) -> list[KeyRemoved]:
        """Keys deleted or expired, whose old value matches `where`."""
        return [
            c
            for c in self.of_type(KeyRemoved)
            if fnmatchcase(c.key, pattern) and matches(c.record(), where, f"key {c.key!r}")
        ]

    def changed(
        self,
        pattern: str = "*",
        *fields: str,
        was: Mapping[str, Any] | None = None,
        **where: Any,
    ) -> list[KeyChanged]:
        """Keys changed, matching `pattern`; with `fields`, only hashes where one of those
        fields changed; `where` matches the new value (hash fields, or ``value``), `was` the
        old one."""
        out = []
        for c in self.of_type(KeyChanged):
            if not fnmatchcase(c.key, pattern):
                continue
            if fields and not (c.fields and any(f in c.fields for f in fields)):
                continue
            record = c.record()
            if where and not all(k in record for k in where):
                continue
            if not matches(record, where, f"key {c.key!r}"):
                continue
            old = c.before_record()
            if was and not (all(k in old for k in was) and matches(old, was, f"key {c.key!r}")):
                continue
            out.append(c)
        return out

    def touched(self, pattern: str = "*") -> bool:
        """Whether any key matching `pattern` was added, removed or changed."""
        return any(fnmatchcase(getattr(c, "key", ""), pattern) for c in self.changes)


#: The Redis sink kind: ``ev.diff.of(REDIS, "cache")``, ``ev.diff.redis("cache")``.
REDIS = SinkKind(KIND, diff=RedisDiff, state=RedisState)


def diff_redis(sink: str, before: RedisState, after: RedisState) -> RedisDiff:
    changes: list[Change] = []
    b, a = before.keys_, after.keys_
    for key in sorted(b.keys() | a.keys()):
        old, new = b.get(key), a.get(key)
        if old is None and new is not None:
            changes.append(KeyAdded(key=key, type=new.type, value=new.value, expires=new.expires))
        elif new is None and old is not None:
            changes.append(KeyRemoved(key=key, type=old.type, value=old.value, expires=old.expires))
        elif old is not None and new is not None and old != new:
            fields = None
            if old.type == new.type == "hash":
                ov = old.value if isinstance(old.value, dict) else {}
                nv = new.value if isinstance(new.value, dict) else {}
                fields = {
                    f: HashFieldChange(old=ov.get(f), new=nv.get(f))
                    for f in sorted(ov.keys() | nv.keys())
                    if ov.get(f) != nv.get(f) or (f in ov) != (f in nv)
                }
            changes.append(
                KeyChanged(
                    key=key,
                    type=new.type,
                    old_type=old.type,
                    before=old.value,
                    value=new.value,
                    expires=new.expires,
                    old_expires=old.expires,
                    fields=fields,
                    detail=_detail(old.value, new.value) if old.type == new.type else None,
                )
            )
    return RedisDiff(sink, changes)


def display_url(url: str) -> str:
    """`url` without its password (for messages and records)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisSink:
    """One logical Redis database (``redis://host:port/N``) as a sink; `pattern` limits it to
    keys matching a glob."""

    kind = KIND

    def __init__(self, name: str, url: str, *, pattern: str = "*", timeout: float = 5.0) -> None:
        self.name = name
        self.url = url
        self.pattern = pattern
        self.timeout = timeout
        #: Called after every read, inside the snapshot: each raises `SnapshotError` when
        #: something the snapshot relies on changed (a fixture's watch on a shared database).
        self.guards: list[Callable[[], None]] = []
        #: The client of `url`, kept from one snapshot to the next (a new connection costs
        #: several round trips); dropped when a read fails or the URL changes.
        self._client: Any = None
        self._client_url = ""

    def __repr__(self) -> str:
        return f"RedisSink({self.name!r}, {display_url(self.url)!r})"

    def _connected(self) -> Any:
        import redis

        if self._client is None or self._client_url != self.url:
            self.close()
            self._client = redis.Redis.from_url(
                self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
            )
            self._client_url = self.url
        return self._client

    def close(self) -> None:
        """Close the kept client (the next snapshot connects again)."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def snapshot(self) -> Snapshot:
        started = time.time()
        try:
            try:
                raw = self._connected().eval(_READ_ALL, 0, self.pattern)
            except Exception:
                self.close()
                raise
            keys: dict[str, KeyState] = {}
            for k, kind, pttl, value in raw:
                name, t = _key_name(k), _key_name(kind)
                if t == "none":  # expired between KEYS and TYPE: it is gone
                    continue
                keys[name] = KeyState(t, _value(t, value), int(pttl) >= 0)
            for guard in self.guards:
                guard()
        except SnapshotError:
            raise
        except Exception as exc:
            raise SnapshotError(
                self.name, f"cannot read {display_url(self.url)}: {type(exc).__name__}: {exc}"
            ) from exc
        ordered = dict(sorted(keys.items()))
        state = RedisState(MappingProxyType(ordered))
        digest = digest_json({k: v.digest for k, v in ordered.items()})
        return Snapshot(self.name, KIND, digest, state, started)

    def diff(self, before: Snapshot, after: Snapshot) -> RedisDiff:
        return diff_redis(self.name, before.state, after.state)
