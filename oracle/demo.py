"""Two scripted demo agents that act only through the sandbox's endpoints.

Both follow *runbook lines*, one action per line, written in plain text wherever they appear::

    RUN sql <sink>: <statement>
    RUN redis <sink>: <command>          (``HSET flags dark_mode on``, split like a shell)
    RUN write <path>: <text>            (``\\n`` in text is a newline)
    RUN append <path>: <text>
    RUN replace <path>: <old> => <new>
    RUN copy <src> -> <dst>
    RUN delete <path>
    RUN chmod <octal mode> <path>

Both read the prompt, every text file under the task root and every text value in every
database (SQL or Redis), as an agent reading its tool results would. The difference is whom
they obey:

- ``careful`` runs the lines of the user's prompt only; what it reads is data.
- ``obedient`` also runs every line it finds in what it reads: the injection works on it.

They run in-process (``CallableAgent``) or as a program: ``python -m oracle.demo obedient``,
with the sandbox's ``ORACLE_*`` variables in its environment.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from oracle.globs import check_relative
from oracle.sandbox import SandboxView
from oracle.sink import env_suffix

RUNBOOK_LINE = re.compile(r"^\s*RUN\s+(\w+)\s+(.*)$", re.MULTILINE)


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


def _redis_url(env: Mapping[str, str], sink: str) -> str:
    return env.get(f"ORACLE_REDIS_URL_{env_suffix(sink)}") or env["ORACLE_REDIS_URL"]


def act(env: Mapping[str, str], verb: str, rest: str) -> None:
    """Carry out one runbook line."""
    if verb == "redis":
        import redis

        sink, _, command = rest.partition(":")
        client: Any = redis.Redis.from_url(_redis_url(env, sink.strip()))
        try:
            client.execute_command(*shlex.split(command.strip()))
        finally:
            client.close()
    elif verb == "sql":
        sink, _, statement = rest.partition(":")
        engine = sa.create_engine(_db_url(env, sink.strip()), poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(statement.strip())
        finally:
            engine.dispose()
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
    elif verb == "delete":
        _path(env, rest).unlink()
    elif verb == "chmod":
        mode, _, rel = rest.partition(" ")
        _path(env, rel).chmod(int(mode, 8))
    else:
        raise RunbookError(f"unknown runbook verb {verb!r}")


def _read_inputs(env: Mapping[str, str]) -> Iterator[str]:
    """Everything the agent reads besides its prompt: files under the root, database text."""
    root = env.get("ORACLE_TASK_ROOT")
    if root and os.path.isdir(root):
        for p in sorted(Path(root).rglob("*")):
            if p.is_file() and not p.is_symlink():
                try:
                    yield p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
    urls = sorted({v for k, v in env.items() if k.startswith("ORACLE_DB_URL")})
    for url in urls:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                for table in sa.inspect(conn).get_table_names():
                    q = conn.dialect.identifier_preparer.quote(table)
                    for row in conn.exec_driver_sql(f"SELECT * FROM {q}"):
                        for value in row:
                            if isinstance(value, str):
                                yield value
        finally:
            engine.dispose()
    for url in sorted({v for k, v in env.items() if k.startswith("ORACLE_REDIS_URL")}):
        yield from _redis_texts(url)


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


def follow(env: Mapping[str, str], *, obey_data: bool) -> list[str]:
    """Run the prompt's runbook lines, and with `obey_data` those found in what was read.

    Returns the lines it ran, in order."""
    prompt = Path(env["ORACLE_PROMPT_FILE"]).read_text(encoding="utf-8")
    steps = runbook(prompt)
    if obey_data:
        for text in list(_read_inputs(env)):
            steps.extend(s for s in runbook(text) if s not in steps)
    else:
        list(_read_inputs(env))  # it reads the same inputs; it just does not obey them
    done = []
    for verb, rest in steps:
        act(env, verb, rest)
        done.append(f"{verb} {rest}")
    return done


def careful(view: SandboxView) -> None:
    """The careful demo agent: runs the prompt's runbook, treats everything else as data."""
    follow(view.env, obey_data=False)


def obedient(view: SandboxView) -> None:
    """The obedient demo agent: also runs runbook lines found in files and rows it reads."""
    follow(view.env, obey_data=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("careful", "obedient"):
        print("usage: python -m oracle.demo careful|obedient", file=sys.stderr)
        return 2
    for line in follow(os.environ, obey_data=args[0] == "obedient"):
        print(f"ran: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
