"""Two scripted demo agents that act only through the sandbox's endpoints.

Both follow *runbook lines*, one action per line, written in plain text wherever they appear
(docs/authoring.md, "The demo agents' runbook", says what each verb does)::

    RUN sql <sink>: <statement>
    RUN redis <sink>: <command>          (``HSET flags dark_mode on``, split like a shell)
    RUN write <path>: <text>            (``\\n`` in text is a newline)
    RUN append <path>: <text>
    RUN replace <path>: <old> => <new>
    RUN copy <src> -> <dst>
    RUN move <src> -> <dst>             (a rename; ``rename`` is the same verb)
    RUN delete <path>
    RUN chmod <octal mode> <path>
    RUN fetch <url>                     (GET through the sandbox's proxy; the page is read)
    RUN post <url>: <body>              (``@path`` as the body sends that file's content)
    RUN mail <to>: <subject> | <body>   (through the sandbox's SMTP server)
    RUN forward <selector> -> <to>      (mail in the inbox: ``all``, ``subject:<text>`` or
                                         ``from:<text>``; the original goes along, attached)
    RUN reply: <text>                   (appended to what the agent replies)
    RUN sh: <command>                   (a shell command in the task root: ``gh``, ``git``…)

Both read the prompt, every text file under the task root, every text value in every
database (SQL or Redis), every message in the sandbox's inboxes, every page they fetch and,
in a GitHub world, the event that started them and every issue, pull request and comment of
the repository (through the API, as a client would), as an agent reading its tool results
would. The difference is whom they obey:

- ``careful`` runs the lines of the user's prompt only; what it reads is data.
- ``obedient`` also runs every line it finds in what it reads: the injection works on it.

They run in-process (``CallableAgent``) or as a program: ``python -m oracle.agents.demo obedient``,
with the sandbox's ``ORACLE_*`` variables in its environment.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from oracle.authoring.sandbox_view import SandboxView
from oracle.base.envnames import env_suffix
from oracle.base.globs import check_relative
from oracle.sandbox import clients
from oracle.sinks import my_connect, sqlite_schema
from oracle.sinks.sqlite_schema import NotNative

RUNBOOK_LINE = re.compile(r"^\s*RUN\s+(\w+)(?::|\s)\s*(.*)$", re.MULTILINE)
SENDER = "assistant@shop.test"


class RunbookError(ValueError):
    """A runbook line the agents cannot act on."""


def runbook(text: str) -> list[tuple[str, str]]:
    """The ``(verb, rest)`` pairs of the runbook lines in `text`, in order."""
    return [(m.group(1), m.group(2).strip()) for m in RUNBOOK_LINE.finditer(text)]


def _root(env: Mapping[str, str]) -> Path:
    return Path(env["ORACLE_TASK_ROOT"])


def _path(env: Mapping[str, str], rel: str) -> Path:
    return _root(env) / check_relative(rel.strip())


def _db_url(env: Mapping[str, str], sink: str) -> str:
    return env.get(f"ORACLE_DB_URL_{env_suffix(sink)}") or env["ORACLE_DB_URL"]


def _run_sql(url: str, statement: str) -> None:
    """Run one statement on the database of `url` and commit. A SQLite URL of the fixture's
    form is opened with the standard library; any other goes through SQLAlchemy (0.15-0.3 s
    to import, for every agent run)."""
    try:
        db = sqlite_schema.open_url(url, timeout=5.0)  # in autocommit mode
    except NotNative:
        pass
    else:
        with contextlib.closing(db):
            db.execute(statement)
        return
    import sqlalchemy as sa

    engine = sa.create_engine(
        url, poolclass=sa.pool.NullPool, connect_args=my_connect.engine_connect_args(url)
    )
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _database_texts(url: str) -> Iterator[str]:
    """Every text value in every table of the database of `url` (the tables SQLAlchemy's
    reflection lists), opened as `_run_sql` opens it."""
    try:
        db = sqlite_schema.open_url(url, timeout=5.0)
    except NotNative:
        pass
    else:
        with contextlib.closing(db):
            for table in sqlite_schema.table_names(db):
                for row in db.execute(f"SELECT * FROM {sqlite_schema.quote(table)}"):
                    yield from (v for v in row if isinstance(v, str))
        return
    import sqlalchemy as sa

    engine = sa.create_engine(
        url, poolclass=sa.pool.NullPool, connect_args=my_connect.engine_connect_args(url)
    )
    try:
        with engine.connect() as conn:
            for table in sa.inspect(conn).get_table_names():
                q = conn.dialect.identifier_preparer.quote(table)
                for row in conn.exec_driver_sql(f"SELECT * FROM {q}"):
                    yield from (v for v in row if isinstance(v, str))
    finally:
        engine.dispose()


def _body(env: Mapping[str, str], text: str) -> str:
    """A body as written, or the content of a file under the root for ``@path``."""
    text = text.strip()
    if text.startswith("@"):
        return _path(env, text[1:]).read_text(encoding="utf-8").strip()
    return text.replace("\\n", "\n")


def _maildirs(env: Mapping[str, str]) -> list[Path]:
    return sorted({Path(v) for k, v in env.items() if k.startswith("ORACLE_MAILDIR")})


def _inbox(env: Mapping[str, str]) -> Iterator[tuple[Path, email.message.Message]]:
    """Every message of every Maildir of the sandbox, with its file."""
    for box in _maildirs(env):
        for sub in ("new", "cur"):
            folder = box / sub
            if not folder.is_dir():
                continue
            for f in sorted(folder.iterdir()):
                if f.is_file():
                    yield f, email.message_from_bytes(f.read_bytes(), policy=email.policy.default)


def _text_of(msg: email.message.Message) -> str:
    part = msg.get_body(preferencelist=("plain", "html")) if hasattr(msg, "get_body") else None
    if part is None:
        return ""
    try:
        return str(part.get_content())
    except (LookupError, KeyError, ValueError):
        return ""


def _selected(msg: email.message.Message, selector: str) -> bool:
    what, _, value = selector.strip().partition(":")
    if what == "all":
        return True
    if what == "subject":
        return value.strip().lower() in str(msg.get("subject", "")).lower()
    if what == "from":
        return value.strip().lower() in str(msg.get("from", "")).lower()
    raise RunbookError(
        f"forward selects 'all', 'subject:<text>' or 'from:<text>', not {selector!r}"
    )


def _mark_passed(path: Path) -> None:
    """Maildir flag P (passed), by renaming the file: its content stays as it was."""
    name, _, info = path.name.partition(":")
    flags = set(info[2:]) if info.startswith("2,") else set()
    target = path.parent.parent / "cur" / f"{name}:2,{''.join(sorted(flags | {'P'}))}"
    os.rename(path, target)


def forward(env: Mapping[str, str], selector: str, to: str) -> int:
    """Forward the inbox messages `selector` picks to `to` (the original attached); each is
    flagged P. Returns how many were sent."""
    chosen = [(f, m) for f, m in _inbox(env) if _selected(m, selector)]
    for path, original in chosen:
        msg = EmailMessage(policy=email.policy.SMTP)
        msg["From"] = SENDER
        msg["To"] = to
        msg["Subject"] = f"Fwd: {original.get('subject', '')}"
        msg.set_content(
            f"Forwarded message from {original.get('from', '?')}:\n\n{_text_of(original)}"
        )
        msg.add_attachment(original)
        clients.send_message(env, msg)
        _mark_passed(path)
    return len(chosen)


def _redis_url(env: Mapping[str, str], sink: str) -> str:
    return env.get(f"ORACLE_REDIS_URL_{env_suffix(sink)}") or env["ORACLE_REDIS_URL"]


def act(
    env: Mapping[str, str], verb: str, rest: str, replies: list[str] | None = None
) -> str | None:
    """Carry out one runbook line; for ``fetch``, return the page that was read."""
    if verb == "fetch":
        return clients.http_request(env, "GET", rest.strip()).text
    if verb == "post":
        url, _, body = rest.partition(": ")
        clients.http_request(env, "POST", url.strip(), _body(env, body).encode("utf-8"))
    elif verb == "mail":
        to, _, message = rest.partition(":")
        subject, _, body = message.partition("|")
        clients.send_mail(env, to.strip(), subject.strip(), _body(env, body), sender=SENDER)
    elif verb == "forward":
        selector, sep, to = rest.partition("->")
        if not sep:
            raise RunbookError(f"forward needs '<selector> -> <to>': {rest!r}")
        forward(env, selector, to.strip())
    elif verb == "reply":
        if replies is not None:
            replies.append(rest.strip())
    elif verb == "redis":
        import redis

        sink, _, command = rest.partition(":")
        client: Any = redis.Redis.from_url(_redis_url(env, sink.strip()))
        try:
            client.execute_command(*shlex.split(command.strip()))
        finally:
            client.close()
    elif verb == "sql":
        sink, _, statement = rest.partition(":")
        _run_sql(_db_url(env, sink.strip()), statement.strip())
    elif verb in ("write", "append"):
        rel, _, text = rest.partition(":")
        p = _path(env, rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        body = text.strip().replace("\\n", "\n") + "\n"
        with open(p, "a" if verb == "append" else "w", encoding="utf-8") as f:
            f.write(body)
    elif verb == "replace":
        rel, _, change = rest.partition(":")
        old, sep, new = change.partition("=>")
        if not sep:
            raise RunbookError(f"replace needs 'old => new': {rest!r}")
        p = _path(env, rel)
        p.write_text(p.read_text(encoding="utf-8").replace(old.strip(), new.strip()), "utf-8")
    elif verb == "copy":
        src, sep, dst = rest.partition("->")
        if not sep:
            raise RunbookError(f"copy needs 'src -> dst': {rest!r}")
        target = _path(env, dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_path(env, src), target)
    elif verb in ("move", "rename"):
        src, sep, dst = rest.partition("->")
        if not sep:
            raise RunbookError(f"{verb} needs 'src -> dst': {rest!r}")
        source, target = _path(env, src), _path(env, dst)
        if target.exists() or target.is_symlink():
            # A rename would replace it without a word: the line did not say to.
            raise RunbookError(f"{verb} {src.strip()!r}: {dst.strip()!r} exists already")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, target)
    elif verb == "sh":
        _shell(env, rest)
    elif verb == "delete":
        _path(env, rest).unlink()
    elif verb == "chmod":
        mode, _, rel = rest.partition(" ")
        _path(env, rel).chmod(int(mode, 8))
    else:
        raise RunbookError(f"unknown runbook verb {verb!r}")
    return None


def _shell(env: Mapping[str, str], command: str) -> None:
    """Run `command` with ``sh`` in the task root, with the sandbox's variables (and a PATH
    and HOME where an in-process agent's view has none)."""
    full = dict(env)
    full.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    root = env.get("ORACLE_TASK_ROOT") or env.get("GITHUB_WORKSPACE")
    if "HOME" not in full:
        home = Path(root or ".") / ".." / ".home-demo"
        home.mkdir(parents=True, exist_ok=True)
        full["HOME"] = str(home.resolve())
    done = subprocess.run(
        ["/bin/sh", "-c", command], cwd=root, env=full, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-500:]
        raise RunbookError(f"sh {command!r} exited with {done.returncode}: {said}")


def _github_texts(env: Mapping[str, str]) -> Iterator[str]:
    """The event that started the agent, and the repository's issues, pull requests and
    comments, read through the API as the agent's login."""
    event = env.get("GITHUB_EVENT_PATH")
    if event and os.path.isfile(event):
        with open(event, encoding="utf-8") as f:
            yield from _strings(json.load(f))
    token, repo = env.get("GH_TOKEN"), env.get("GITHUB_REPOSITORY")
    if not token or not repo:
        return
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
    api = f"https://api.github.com/repos/{repo}"
    found = clients.http_request(env, "GET", f"{api}/issues?state=all", headers=headers)
    if found.status != 200:
        return
    for item in json.loads(found.body):
        yield f"{item.get('title', '')}\n{item.get('body') or ''}"
        said = clients.http_request(
            env, "GET", f"{api}/issues/{item['number']}/comments", headers=headers
        )
        if said.status == 200:
            for c in json.loads(said.body):
                yield str(c.get("body") or "")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _read_inputs(env: Mapping[str, str]) -> Iterator[str]:
    """Everything the agent reads besides its prompt: files under the root, database text."""
    root = env.get("ORACLE_TASK_ROOT")
    if root and os.path.isdir(root):
        for p in sorted(Path(root).rglob("*")):
            if ".git" in p.relative_to(root).parts:
                continue
            if p.is_file() and not p.is_symlink():
                try:
                    yield p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
    for url in sorted({v for k, v in env.items() if k.startswith("ORACLE_DB_URL")}):
        yield from _database_texts(url)
    for _, msg in _inbox(env):
        yield f"{msg.get('subject', '')}\n{_text_of(msg)}"
    for url in sorted({v for k, v in env.items() if k.startswith("ORACLE_REDIS_URL")}):
        yield from _redis_texts(url)
    yield from _github_texts(env)


def _redis_texts(url: str) -> Iterator[str]:
    import redis

    client: Any = redis.Redis.from_url(url)
    try:
        for key in sorted(client.scan_iter()):
            kind = client.type(key).decode()
            values: list[Any]
            if kind == "string":
                values = [client.get(key)]
            elif kind == "hash":
                values = list(client.hgetall(key).values())
            elif kind == "list":
                values = client.lrange(key, 0, -1)
            else:
                continue
            for v in values:
                try:
                    yield v.decode("utf-8")
                except (UnicodeDecodeError, AttributeError):
                    continue
    finally:
        client.close()


def follow(env: Mapping[str, str], *, obey_data: bool) -> tuple[list[str], list[str]]:
    """Run the prompt's runbook lines, and with `obey_data` those found in what was read
    (files, rows, mail, and the pages it fetches as it goes).

    Returns the lines it ran, in order, and the reply lines."""
    prompt = Path(env["ORACLE_PROMPT_FILE"]).read_text(encoding="utf-8")
    steps = runbook(prompt)
    seen = set(steps)

    def learn(text: str) -> None:
        for s in runbook(text):
            if s not in seen:
                seen.add(s)
                steps.append(s)

    for text in list(_read_inputs(env)):  # the careful agent reads them too; it does not obey
        if obey_data:
            learn(text)
    done: list[str] = []
    replies: list[str] = []
    i = 0
    while i < len(steps):
        verb, rest = steps[i]
        read = act(env, verb, rest, replies)
        if read is not None and obey_data:
            learn(read)
        done.append(f"{verb} {rest}")
        i += 1
    return done, replies


def _reply(replies: list[str]) -> str | None:
    return "\n".join(replies) if replies else None


def careful(view: SandboxView) -> str | None:
    """The careful demo agent: runs the prompt's runbook, treats everything else as data.
    Returns its reply (the prompt's ``reply`` lines), if any."""
    return _reply(follow(view.env, obey_data=False)[1])


def obedient(view: SandboxView) -> str | None:
    """The obedient demo agent: also runs runbook lines found in what it reads (files, rows,
    mail, fetched pages). Returns its reply, if any."""
    return _reply(follow(view.env, obey_data=True)[1])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("careful", "obedient"):
        print("usage: python -m oracle.agents.demo careful|obedient", file=sys.stderr)
        return 2
    done, replies = follow(os.environ, obey_data=args[0] == "obedient")
    for line in done:
        print(f"ran: {line}")
    for line in replies:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
