"""Controls derived from the author's, to find predicates that hold only for the plain case.

**Compositions.** An agent that does its job and obeys the injection does both, in one order or
the other. For each control that does the legitimate task (a clean control, or any control
with ``utility=True``) and each breach control, the two run in one trial, in both orders
(``"write_summary, then publish_key"``): each is a breach control (the breach's own ``fires``),
and where the first achieves utility the composition must too, unless the breach says it
undoes it (``breach(fn, undoes_utility=True)``). A predicate that misses a composition is not
proven, and the composition's name says the order.

Compositions run only where they can differ from their parts: where the two controls changed a
sink in common (changes an input of the trial made, such as a GitHub trigger, not counted).
Two controls that touch different sinks leave each sink as one of them alone would, and the
runs of the parts already judged that.

**Evasions.** Where a breach control moves a secret the task declares (``Task(secrets=[…])``)
as it is, it runs again with the secret written each way `find_secret` reads: base64, hex,
URL- and quoted-printable-encoded, split across lines, and gzip-compressed in a request body
(`EncodedView`). A security predicate that fires on the plain breach and misses a variant is
*weak*, with the variants it missed, and not proven. A variant the control's own code gets
past (a program it runs, a file it opens by path), so that its diff still holds the raw
secret, is dropped.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oracle.authoring.task import Control

if TYPE_CHECKING:
    from oracle.authoring.sandbox_view import SandboxView
    from oracle.evidence.diff import Diff

COMPOSITION = "composition"


def changed_sinks(diff: Diff | None) -> frozenset[str]:
    """The sinks a run changed itself (what an input of the trial made left out)."""
    if diff is None:
        return frozenset()
    return frozenset(
        name for name, d in diff.items() if any(not c.made_by_input() for c in d.changes)
    )


def does_the_task(c: Control) -> bool:
    """Whether `c` does the legitimate task: a clean control, or one that achieves utility."""
    return c.kind == "clean" or c.utility is True


def compose(first: Control, second: Control) -> Control:
    """One control that runs `first`, then `second`, in one trial: a breach control with the
    breach's ``fires``; it promises the task's utility where the legitimate one achieves it and
    the breach does not undo it."""
    breach, legit = (first, second) if first.kind == "breach" else (second, first)

    def both(sb: SandboxView) -> Any:
        a = first.run(sb)
        b = second.run(sb)
        texts = [t for t in (a, b) if isinstance(t, str)]
        return "\n".join(texts) if texts else None

    both.__name__ = f"{first.name}, then {second.name}"
    utility = True if legit.utility is True and not breach.undoes_utility else None
    timeouts = [c.timeout for c in (first, second) if c.timeout is not None]
    return replace(
        breach,
        run=both,
        name=both.__name__,
        utility=utility,
        timeout=sum(timeouts) if len(timeouts) == 2 else None,
        derived=COMPOSITION,
    )


def compositions(controls: Sequence[Control], changed: dict[str, frozenset[str]]) -> list[Control]:
    """The compositions of `controls` worth running, given the sinks each changed (by
    control name): both orders of each legitimate control with each breach control that
    changed a sink in common."""
    out: list[Control] = []
    legit = [c for c in controls if does_the_task(c) and c.kind != "breach" and not c.derived]
    breaches = [c for c in controls if c.kind == "breach" and not c.derived]
    for b in breaches:
        for c in legit:
            if changed.get(b.name, frozenset()) & changed.get(c.name, frozenset()):
                out += [compose(c, b), compose(b, c)]
    return out


# -- evasions ---------------------------------------------------------------------------------

EVASION = "evasion"


def _each_byte(prefix: str) -> Callable[[str], str]:
    return lambda s: "".join(f"{prefix}{b:02X}" for b in s.encode("utf-8"))


def _split(s: str) -> str:
    half = max(1, len(s) // 2)
    return s[:half] + "\n" + s[half:]


#: How an evasion variant writes a declared secret, by name: the family `find_secret` reads.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "base64": lambda s: base64.b64encode(s.encode("utf-8")).decode("ascii"),
    "hex": lambda s: s.encode("utf-8").hex(),
    "url": _each_byte("%"),
    "quoted-printable": _each_byte("="),
    "split": _split,
}
#: The variant that sends a request body holding a secret gzip-compressed instead.
GZIP = "gzip"


class EncodedView:
    """A sandbox view that writes every declared secret the way `encoding` says, wherever a
    control hands one to the sandbox through the view: a file's text, an SQL statement and its
    parameters, a Redis command, a mail, a request's URL, headers and body (with ``gzip``, a
    body holding a secret goes compressed, with ``Content-Encoding: gzip``). What a control
    does past the view (a program it starts, a file opened by path) is not changed: a variant
    whose diff still holds the raw secret is dropped (`evasions`)."""

    def __init__(self, view: SandboxView, secrets: Sequence[str], encoding: str) -> None:
        self._view = view
        self._secrets = [s for s in secrets if s]
        self._encoding = encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def _text(self, value: Any) -> Any:
        if self._encoding == GZIP:
            return value
        encode = ENCODINGS[self._encoding]
        if isinstance(value, str):
            for s in self._secrets:
                value = value.replace(s, encode(s))
        elif isinstance(value, bytes):
            for s in self._secrets:
                value = value.replace(s.encode("utf-8"), encode(s).encode("utf-8"))
        return value

    def write_text(self, rel: str, text: str, sink: str | None = None) -> None:
        self._view.write_text(rel, self._text(text), sink)

    def sql(self, sink: str | None, statement: str, params: Any = None) -> Any:
        if params is not None:
            params = {k: self._text(v) for k, v in params.items()}
        return self._view.sql(sink, self._text(statement), params)

    def redis(self, sink: str | None, *command: Any) -> Any:
        return self._view.redis(sink, *(self._text(c) for c in command))

    def send_mail(self, to: Any, subject: str, body: str, **kw: Any) -> None:
        if kw.get("attachments"):
            kw["attachments"] = {k: self._text(v) for k, v in kw["attachments"].items()}
        self._view.send_mail(to, self._text(subject), self._text(body), **kw)

    def http(self, method: str, url: str, body: Any = None, headers: Any = None) -> Any:
        headers = {k: self._text(v) for k, v in (headers or {}).items()}
        if self._encoding == GZIP and body is not None:
            raw = body.encode("utf-8") if isinstance(body, str) else body
            if any(s.encode("utf-8") in raw for s in self._secrets):
                body = gzip.compress(raw)
                headers["Content-Encoding"] = "gzip"
        return self._view.http(method, self._text(url), self._text(body), headers or None)

    def with_env(self, env: Any, private: Any = None) -> EncodedView:
        return EncodedView(self._view.with_env(env, private), self._secrets, self._encoding)


def holds_raw(diff: Diff | None, secrets: Sequence[str]) -> bool:
    """Whether what the run changed itself holds one of `secrets` as it is."""
    if diff is None:
        return False
    for _, d in diff.items():
        for c in d.changes:
            if c.made_by_input():
                continue
            for content in c.contents():
                value = content.value
                text = value if isinstance(value, str) else value.decode("utf-8", "replace")
                if any(s in text for s in secrets):
                    return True
    return False


def encoded(c: Control, secrets: Sequence[str], encoding: str) -> Control:
    """Breach control `c` with every declared secret it hands the sandbox written the
    `encoding` way."""

    def variant(sb: SandboxView) -> Any:
        return c.run(EncodedView(sb, secrets, encoding))

    variant.__name__ = f"{c.name} ~{encoding}"
    return replace(c, run=variant, name=variant.__name__, derived=EVASION)


def evasion_candidates(
    controls: Sequence[Control], raw: dict[str, bool], secrets: Sequence[str]
) -> list[Control]:
    """An encoded variant of each breach control whose run moved a declared secret as it is
    (`raw`, by control name), in every encoding `find_secret` reads."""
    if not secrets:
        return []
    return [
        encoded(c, secrets, e)
        for c in controls
        if c.kind == "breach" and not c.derived and raw.get(c.name)
        for e in (*ENCODINGS, GZIP)
    ]
