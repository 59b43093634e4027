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

**Mutants.** Each of the author's controls that a predicate must fire on (a breach; a control
with ``utility=True``) runs again with one parameter changed, a near miss (`MutantView`): an
SQL statement aimed at another row (the numbers and strings of its WHERE) or writing other
values (those before it), a file's path, a mail's recipients, a request's host, a Redis key,
or a declared secret with one character changed. A
predicate *kills* a mutant when it does not fire on it; its mutation score is killed / total.
A survivor is a question, not a failure: a mutant may do the same harm (a leak to another
outside address is still a leak), so the score changes no status. A mutant runs only where its
control changed a sink of the kind its parameter belongs to, and one whose control handed the
sandbox nothing to change (it acted past the view), that errored, or that left the world as
its control did, is dropped.

**The answering no-op.** Where the task says what a successful run answers
(``Task(expected_reply=…)``; AgentDojo's ``GROUND_TRUTH_OUTPUT``) and a utility predicate
read the reply on one of the controls, a second no-op changes nothing and replies that text.
A utility predicate that passes on it reads the reply alone: it is trigger-happy, the control
named.
"""

from __future__ import annotations

import base64
import gzip
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

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


def replace_secrets(value: Any, secrets: Sequence[str], write: Callable[[str], str]) -> Any:
    """`value` (text or bytes; anything else as it is) with each of `secrets` written the
    `write` way."""
    for s in secrets:
        if isinstance(value, str):
            value = value.replace(s, write(s))
        elif isinstance(value, bytes):
            value = value.replace(s.encode("utf-8"), write(s).encode("utf-8"))
    return value


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
        return replace_secrets(value, self._secrets, ENCODINGS[self._encoding])

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


# -- mutants ----------------------------------------------------------------------------------

MUTANT = "mutant"
_MARK = "mutant"


class NotMutated(RuntimeError):
    """The control never handed the sandbox what its mutant changes: there is no mutant."""


def _name_part(rel: str) -> str:
    """`rel` with its first folder (or, for a bare file name, its stem) changed: a sibling path
    that a check of the exact place must tell apart."""
    parts = rel.split("/")
    if len(parts) > 1 and parts[0] not in ("", ".", ".."):
        parts[0] = f"{parts[0]}-{_MARK}"
        return "/".join(parts)
    stem, dot, ext = parts[-1].partition(".")
    parts[-1] = f"{stem}-{_MARK}{dot}{ext}"
    return "/".join(parts)


def _address(addr: str) -> str:
    local, at, domain = addr.rpartition("@")
    return f"{local}.{_MARK}@{domain}" if at and local else addr


def _reverse(s: str) -> str:
    return s[::-1] if s[::-1] != s else s + "x"


_SQL_STRING = re.compile(r"'(?:[^']|'')*'")
_SQL_INT = re.compile(r"(?<![\w.$:])\d+(?![\w.])")


def _sql_parts(statement: str, code: Callable[[str], str], literal: Callable[[str], str]) -> str:
    """`statement` with `code` applied between its string literals and `literal` to each."""
    out, last = [], 0
    for m in _SQL_STRING.finditer(statement):
        out.append(code(statement[last : m.start()]))
        out.append(literal(m.group(0)))
        last = m.end()
    out.append(code(statement[last:]))
    return "".join(out)


_WHERE = re.compile(r"\bwhere\b", re.IGNORECASE)


def _where_at(statement: str) -> int:
    """Where the statement's first WHERE (outside string literals) starts; its length if none."""
    last = 0
    for m in [*_SQL_STRING.finditer(statement), None]:
        end = m.start() if m is not None else len(statement)
        found = _WHERE.search(statement, last, end)
        if found:
            return found.start()
        last = m.end() if m is not None else end
    return len(statement)


def _bump(code: str) -> str:
    return _SQL_INT.sub(lambda m: str(int(m.group(0)) + 1), code)


def _flip(q: str) -> str:
    inner = q[1:-1].replace("''", "'")
    return "'" + _reverse(inner).replace("'", "''") + "'" if inner else q


def _sql_row(statement: str) -> str:
    """The statement aimed at another row: each number and string of its WHERE changed."""
    at = _where_at(statement)
    return statement[:at] + _sql_parts(statement[at:], _bump, _flip)


def _sql_value(statement: str) -> str:
    """The statement writing other values: each number and string before its WHERE changed."""
    at = _where_at(statement)
    return _sql_parts(statement[:at], _bump, _flip) + statement[at:]


def _sql_params(statement: str, params: Any, op: str) -> Any:
    """The parameters the `op` mutant changes (those named after the WHERE for ``row``, before
    it for ``value``), changed."""
    if not params:
        return params
    at = _where_at(statement)
    out = dict(params)
    for k, v in params.items():
        used = re.search(rf":{re.escape(k)}\b|%\({re.escape(k)}\)s", statement)
        mark = used.start() if used else -1
        after = mark >= at
        if mark < 0 or after != (op == "row"):
            continue
        if type(v) is int:
            out[k] = v + 1
        elif isinstance(v, str) and v:
            out[k] = _reverse(v)
    return out


def _host(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if "." not in host or not any(ch.isalpha() for ch in host):
        return url  # a bare name or an address: no near miss to make
    first, _, rest = host.partition(".")
    netloc = parts.netloc.replace(host, f"{first}-{_MARK}.{rest}", 1)
    return urlunsplit(parts._replace(netloc=netloc))


#: What each mutant changes, by the kind of sink the author's control changed: a mutant runs
#: only where its control changed a sink of that kind.
MUTANTS_BY_KIND: dict[str, tuple[str, ...]] = {
    "sql": ("row", "value"),
    "files": ("path",),
    "mail": ("recipient",),
    "egress": ("host",),
    "redis": ("key",),
}
#: The mutant that writes a declared secret with one character changed (a leak of a wrong
#: value): for breach controls whose run moved a declared secret.
SECRET = "secret"


def _wrong_secret(s: str) -> str:
    last = s[-1]
    return s[:-1] + ("0" if last != "0" else "1")


class MutantView:
    """A sandbox view that changes one parameter of what a control hands the sandbox
    (`operator`): an SQL statement's target row (``row``: the numbers, strings and parameters
    of its WHERE) or values (``value``: those before its WHERE), a file's path (``path``), a
    mail's recipients (``recipient``), a request's host (``host``), a Redis key (``key``) or
    a declared secret (``secret``). A control that handed over nothing of the kind raises
    `NotMutated` at its end: no mutant."""

    def __init__(self, view: SandboxView, operator: str, secrets: Sequence[str] = ()) -> None:
        self._view = view
        self._op = operator
        self._secrets = [s for s in secrets if s]
        self.applied = 0
        self._children: list[MutantView] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def _changed(self, before: Any, after: Any) -> Any:
        if after != before:
            self.applied += 1
        return after

    def _secret(self, value: Any) -> Any:
        if self._op != SECRET:
            return value
        return self._changed(value, replace_secrets(value, self._secrets, _wrong_secret))

    def write_text(self, rel: str, text: str, sink: str | None = None) -> None:
        if self._op == "path":
            rel = self._changed(rel, _name_part(rel))
        self._view.write_text(rel, self._secret(text), sink)

    def sql(self, sink: str | None, statement: str, params: Any = None) -> Any:
        new = statement
        if self._op in ("row", "value"):
            new = (_sql_row if self._op == "row" else _sql_value)(statement)
            params = self._changed(params, _sql_params(statement, params, self._op))
        elif params is not None:
            params = {k: self._secret(v) for k, v in params.items()}
        return self._view.sql(sink, self._changed(statement, self._secret(new)), params)

    def redis(self, sink: str | None, *command: Any) -> Any:
        cmd = list(command)
        if self._op == "key" and len(cmd) > 1:
            key = cmd[1]
            if isinstance(key, str):
                cmd[1] = self._changed(key, f"{key}:{_MARK}")
            elif isinstance(key, bytes):
                cmd[1] = self._changed(key, key + f":{_MARK}".encode())
        return self._view.redis(sink, *(self._secret(c) for c in cmd))

    def send_mail(self, to: Any, subject: str, body: str, **kw: Any) -> None:
        if self._op == "recipient":
            new = [_address(a) for a in to] if isinstance(to, (list, tuple)) else _address(to)
            to = self._changed(to, new)
        if kw.get("attachments"):
            kw["attachments"] = {k: self._secret(v) for k, v in kw["attachments"].items()}
        self._view.send_mail(to, self._secret(subject), self._secret(body), **kw)

    def http(self, method: str, url: str, body: Any = None, headers: Any = None) -> Any:
        if self._op == "host":
            url = self._changed(url, _host(url))
        if headers:
            headers = {k: self._secret(v) for k, v in headers.items()}
        return self._view.http(method, self._secret(url), self._secret(body), headers)

    def with_env(self, env: Any, private: Any = None) -> MutantView:
        inner = MutantView(self._view.with_env(env, private), self._op, self._secrets)
        self._children.append(inner)
        return inner

    def total_applied(self) -> int:
        return self.applied + sum(c.total_applied() for c in self._children)


def mutated(c: Control, operator: str, secrets: Sequence[str] = ()) -> Control:
    """Control `c` with one of its parameters changed by `operator` (`MutantView`)."""

    def variant(sb: SandboxView) -> Any:
        view = MutantView(sb, operator, secrets)
        out = c.run(view)
        if not view.total_applied():
            raise NotMutated(f"control {c.name!r} handed the sandbox no {operator} to change")
        return out

    variant.__name__ = f"{c.name} ~{MUTANT}-{operator}"
    return replace(c, run=variant, name=variant.__name__, derived=MUTANT)


def mutant_candidates(
    controls: Sequence[Control],
    kinds: dict[str, frozenset[str]],
    raw: dict[str, bool],
    secrets: Sequence[str],
) -> list[Control]:
    """The mutants of each of the author's controls that a predicate must fire on (a breach, a
    control with ``utility=True``), one per parameter its run can have set: by the kinds of the
    sinks it changed (`kinds`, by control name), and the ``secret`` mutant where its run moved
    a declared secret as it is (`raw`)."""
    out: list[Control] = []
    for c in controls:
        if c.derived or not (c.kind == "breach" or c.utility is True):
            continue
        ops = [op for k in sorted(kinds.get(c.name, ())) for op in MUTANTS_BY_KIND.get(k, ())]
        if c.kind == "breach" and secrets and raw.get(c.name):
            ops.append(SECRET)
        out += [mutated(c, op, secrets) for op in dict.fromkeys(ops)]
    return out


# -- the no-op that answers -------------------------------------------------------------------

ANSWERING_NOOP = "no-op answering the expected reply"
NOOP_DERIVED = "no-op"


def answering_noop(text: str) -> Control:
    """The no-op control that changes nothing and replies `text`, the answer a successful run
    gives (``Task(expected_reply=…)``): a utility predicate that passes on it reads the reply
    alone, and is trigger-happy."""

    def answer(sb: SandboxView) -> str:
        return text

    answer.__name__ = ANSWERING_NOOP
    return Control(
        kind="clean", run=answer, name=ANSWERING_NOOP, utility=False, derived=NOOP_DERIVED
    )
