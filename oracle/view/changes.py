"""A record's diff made ready for a page, per kind of change.

Each change of a sink's diff (its JSON, as archived) becomes a `ChangeView`: a template name
(``row``, ``file``, ``mail``, ``request``, ``attempt``, ``redis``, ``message``, ``generic``)
and the values that template shows. SQL rows carry every column with a flag on the changed
ones, a file modification its unified diff as classified lines, a mail its headers and body
parts, a request its headers and body. A change this module does not know is shown whole as
JSON: unknown beats hidden. Nothing here escapes anything: the templates autoescape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Each sink module registers its change types on import; `oracle.sinks` alone imports some.
import oracle.sinks
import oracle.sinks.egress
import oracle.sinks.github.changes
import oracle.sinks.inbox
import oracle.sinks.mail
import oracle.sinks.reply  # noqa: F401
from oracle.evidence.diff import change_from_json


@dataclass
class Column:
    """One column of a row: its value (before and after for a changed row) and whether it
    changed."""

    name: str
    value: str
    old: str | None = None
    changed: bool = False


@dataclass
class ChangeView:
    """One change, as a template shows it."""

    template: str
    summary: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SinkView:
    """One sink's changes."""

    name: str
    kind: str
    changes: list[ChangeView]


def text(value: Any) -> str:
    """A value as one shows it: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """A unified diff as ``(class, line)``: ``add``, ``del``, ``hunk``, ``head`` or ``same``."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            cls = "head"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        else:
            cls = "same"
        out.append((cls, line))
    return out


def _summary(raw: dict[str, Any], kind: str | None = None) -> str | None:
    """The change's own one-line summary; None when it does not parse as a known change (a
    record from another version, or one edited and then signed again)."""
    try:
        change = change_from_json(raw, kind)
        return None if change is None else change.summary()
    except Exception:
        return None


def _row(raw: dict[str, Any]) -> dict[str, Any]:
    name = raw["change"]
    key = raw.get("key")
    cols: list[Column] = []
    if name == "row_changed":
        fields = raw.get("fields") or {}
        before = raw.get("before") or {}
        after = raw.get("row") or {}
        for col in [*after, *(c for c in before if c not in after)]:
            if col in fields:
                f = fields[col]
                cols.append(
                    Column(
                        col,
                        text(f["new"]) if "new" in f else "(column gone)",
                        text(f["old"]) if "old" in f else "(no column)",
                        True,
                    )
                )
            else:
                cols.append(Column(col, text(after.get(col, before.get(col)))))
    else:
        cols = [Column(c, text(v), changed=name == "row_added") for c, v in raw["row"].items()]
    return {
        "table": raw.get("table"),
        "key": "(no key)" if key is None else ", ".join(text(k) for k in key),
        "how": {"row_added": "added", "row_removed": "removed"}.get(name, "changed"),
        "columns": cols,
    }


def _entry_text(entry: dict[str, Any]) -> str | None:
    t = entry.get("text")
    return t if isinstance(t, str) else None


def _file(raw: dict[str, Any]) -> dict[str, Any]:
    name = raw["change"]
    out: dict[str, Any] = {"path": raw.get("path"), "how": name.removeprefix("file_")}
    if name == "file_modified":
        out["diff"] = diff_lines(raw.get("text_diff") or "")
        new, old = raw.get("new") or {}, raw.get("old") or {}
        if not out["diff"] and raw.get("content_changed"):
            out["note"] = f"binary or too large to compare as text ({new.get('size')} bytes)"
        if raw.get("mode_changed"):
            out["mode"] = f"{old.get('mode', 0):o} → {new.get('mode', 0):o}"
    elif name == "file_moved":
        out["old_path"] = raw.get("old_path")
        out["content"] = _entry_text(raw.get("entry") or {})
    else:
        entry = raw.get("entry") or {}
        out["content"] = _entry_text(entry)
        out["entry_type"] = entry.get("type")
        if entry.get("target") is not None:
            out["target"] = entry.get("target")
        if out["content"] is None and entry.get("type") == "file":
            out["note"] = f"not text ({entry.get('size')} bytes)"
    return out


def _mail(raw: dict[str, Any]) -> dict[str, Any]:
    mail = raw.get("mail") or {}
    msg = mail.get("message") or {}
    parts = [
        {
            "content_type": p.get("content_type"),
            "filename": p.get("filename"),
            "text": p.get("text"),
            "size": p.get("size"),
            "truncated": p.get("truncated"),
        }
        for p in msg.get("parts") or []
    ]
    return {
        "from": mail.get("envelope_from"),
        "to": mail.get("envelope_to") or [],
        "headers": [(h.get("name"), h.get("value")) for h in msg.get("headers") or []],
        "parts": parts,
        "raw_text": msg.get("raw_text") if not parts else None,
        "parse_error": msg.get("parse_error"),
    }


def _request(raw: dict[str, Any]) -> dict[str, Any]:
    r = raw.get("request") or {}
    body = r.get("body") or {}
    return {
        "method": r.get("method"),
        "url": r.get("url"),
        "status": r.get("status") if r.get("status") is not None else r.get("state"),
        "answer": r.get("answer"),
        "rule": r.get("rule"),
        "headers": [(h.get("name"), h.get("value")) for h in r.get("headers") or []],
        "response_headers": [
            (h.get("name"), h.get("value")) for h in r.get("response_headers") or []
        ],
        "body": body.get("text"),
        "body_base64": body.get("base64"),
        "body_size": body.get("size"),
        "body_truncated": body.get("truncated"),
        "error": r.get("error"),
    }


def _redis(raw: dict[str, Any]) -> dict[str, Any]:
    name = raw["change"]
    out: dict[str, Any] = {
        "key": raw.get("key"),
        "type": raw.get("type"),
        "how": name.removeprefix("redis_key_"),
        "value": text(raw.get("value")),
    }
    if name == "redis_key_changed":
        out["before"] = text(raw.get("before"))
        out["old_type"] = raw.get("old_type")
        fields = raw.get("fields")
        if fields:
            got = raw.get("value")
            value: dict[str, Any] = got if isinstance(got, dict) else {}
            cols = [
                Column(k, text(f.get("new")), text(f.get("old")), True) for k, f in fields.items()
            ]
            cols += [Column(k, text(v)) for k, v in value.items() if k not in fields]
            out["columns"] = cols
    return out


def _message(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "how": raw["change"].removeprefix("message_"),
        "exchange": raw.get("exchange"),
        "routing_key": raw.get("routing_key"),
        "queue": raw.get("queue"),
        "waiting": raw.get("waiting"),
        "body": text(raw.get("body")),
        "headers": [(k, text(v)) for k, v in (raw.get("headers") or {}).items()],
        "properties": [(k, text(v)) for k, v in (raw.get("properties") or {}).items()],
    }


def _attempt(raw: dict[str, Any]) -> dict[str, Any]:
    return {"attempt": raw.get("attempt") or {}}


_BUILDERS = {
    "row_added": ("row", _row),
    "row_removed": ("row", _row),
    "row_changed": ("row", _row),
    "file_added": ("file", _file),
    "file_removed": ("file", _file),
    "file_modified": ("file", _file),
    "file_moved": ("file", _file),
    "mail_sent": ("mail", _mail),
    "request_made": ("request", _request),
    "connection_attempted": ("attempt", _attempt),
    "redis_key_added": ("redis", _redis),
    "redis_key_removed": ("redis", _redis),
    "redis_key_changed": ("redis", _redis),
    "message_published": ("message", _message),
    "message_queued": ("message", _message),
    "message_taken": ("message", _message),
}


def change_view(raw: Any, kind: str | None = None) -> ChangeView:
    """One archived change, from a sink of `kind` where known, as a template shows it (a
    malformed one, whole as JSON)."""
    if not isinstance(raw, dict):
        return ChangeView("generic", "malformed change", {"json": text(raw)})
    summary = _summary(raw, kind)
    built = _BUILDERS.get(str(raw.get("change")))
    if built is not None and summary is not None:
        template, build = built
        try:
            return ChangeView(template, summary, build(raw))
        except (KeyError, TypeError, AttributeError, ValueError):
            pass  # not the shape this version writes: shown whole below
    pretty = json.dumps(raw, ensure_ascii=False, indent=2, sort_keys=True, default=str)
    name = str(raw.get("change", "change"))
    return ChangeView("generic", summary or f"{name} (shown as archived)", {"json": pretty})


def sink_views(diff: dict[str, Any]) -> list[SinkView]:
    """Every sink of a record's diff with its changes, in the record's order."""
    out = []
    for name, d in diff.items():
        d = d if isinstance(d, dict) else {}
        got = d.get("changes")
        changes: list[Any] = got if isinstance(got, list) else []
        kind = d.get("kind")
        known = kind if isinstance(kind, str) else None
        views = [change_view(c, known) for c in changes]
        out.append(SinkView(name, str(d.get("kind", "?")), views))
    return out
