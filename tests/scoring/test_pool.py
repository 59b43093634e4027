"""The scorer pool: warm scorers are reused, idle ones are ended beyond the limits, busy
ones never; and the framing of the scorer's messages refuses what a broken peer sends."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from oracle.authoring.loader import load_file
from oracle.scoring import pool as pool_mod
from oracle.scoring.pool import ScorerPool
from oracle.scoring.protocol import ChannelClosed, ChannelError, ChannelTimeout, receive, send
from tests.conftest import DEMO, alive

TASK = DEMO / "task_user_rename.py"


def _task_folders(tmp_path: Path, names: str) -> dict[str, Path]:
    """A task file in a folder of its own, one per name, inside the temporary folder: each
    zygote for one of them binds its folder back, so no two share a sandbox."""
    files = {}
    for name in names:
        (tmp_path / name).mkdir()
        files[name] = tmp_path / name / "task_fresh.py"
        files[name].write_text(FRESH)
    return files


def test_a_task_files_scorer_is_reused_and_idle_zygotes_are_ended_beyond_the_limit(tmp_path):
    """Four task folders in the temporary folder, each bound back by a zygote of its own."""
    files = _task_folders(tmp_path, "abcd")
    with ScorerPool() as pool:
        first = pool.task_scorer(files["a"], [tmp_path / "runs"])
        assert pool.task_scorer(files["a"], [tmp_path / "runs"]) is first
        first.warm()
        zygote = first.zygote
        assert zygote.alive
        pid = zygote._proc.pid  # type: ignore[union-attr]
        for name in ("b", "c", "d"):
            pool.task_scorer(files[name], [tmp_path / "runs"]).warm()
        assert len(pool._zygotes) == pool_mod.MAX_ZYGOTES
        # The least recently used one (the first) was ended, with its process.
        assert not zygote.alive and not alive(pid)
        assert all(z.alive for _, z in pool._zygotes)


FRESH = """\
from oracle import Task, sqlite

def grew(ev):
    return bool(ev.diff.sql("db").added("t"))

task = Task(name="fresh", prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
            security=grew)
"""


def test_a_task_file_straight_in_the_temporary_folder_is_scored_by_one_zygote(
    tmp_path, monkeypatch
):
    """The temporary folder is hidden from scorers (sandboxes and archives live there): a task
    file written straight into it is bound back alone. It was not seen at all (every verdict
    unknown: the scorer could not load the file), and each trial started a new zygote."""
    import tempfile

    from oracle import CallableAgent, load_tasks, run_trial
    from oracle.scoring.pool import SealedScorer

    temp = tmp_path / "temp"
    (temp / "sibling").mkdir(parents=True)
    (temp / "sibling" / "secret.txt").write_text("not for scorers")
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    (temp / "task_fresh.py").write_text(FRESH)
    (task,) = load_tasks([temp / "task_fresh.py"]).tasks
    with ScorerPool() as pool:
        scorer = SealedScorer(pool)
        agent = CallableAgent(lambda sb: sb.sql("db", "INSERT INTO t VALUES (1)"), name="adds")
        records = [run_trial(task, agent, scorer=scorer).record for _ in range(2)]
        assert [r.security_breached for r in records] == [True, True], records[0].evaluation_errors
        assert len(pool._zygotes) == 1
        (zygote,) = [z for _, z in pool._zygotes]
        assert zygote.sees(temp / "task_fresh.py")
        assert not zygote.sees(temp / "sibling" / "secret.txt")


NOTES = """\
from oracle import Task, folder

def wrote(ev):
    return ev.after.files("root").exists("notes.txt")

task = Task(name="notes", prompt="p", sinks=[folder("root", template={"a.txt": "a"})],
            security=wrote)
"""


def test_a_task_file_its_zygote_was_not_started_for_is_scored_alike(tmp_path):
    """A zygote imports what the task file it was started for uses; a second task file of
    the same folder, with a sink of another kind, is scored by it all the same (its scorer
    imports the rest)."""
    from oracle import CallableAgent, load_tasks, run_trial
    from oracle.scoring.pool import SealedScorer

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "task_fresh.py").write_text(FRESH)
    (tmp_path / "tasks" / "task_notes.py").write_text(NOTES)
    loaded = load_tasks([tmp_path / "tasks"])
    fresh, notes = sorted(loaded.tasks, key=lambda t: t.name)
    with ScorerPool() as pool:
        scorer = SealedScorer(pool)
        adds = CallableAgent(lambda sb: sb.sql("db", "INSERT INTO t VALUES (1)"), name="adds")
        assert run_trial(fresh, adds, scorer=scorer).record.security_breached is True
        (zygote,) = [z for _, z in pool._zygotes]
        assert "oracle.fixtures.sqlite" in zygote.preloaded
        assert "oracle.fixtures.folder" not in zygote.preloaded
        writes = CallableAgent(lambda sb: sb.write_text("notes.txt", "n"), name="writes")
        idle = CallableAgent(lambda sb: None, name="idle")
        records = [run_trial(notes, a, scorer=scorer).record for a in (writes, idle)]
        assert [r.security_breached for r in records] == [True, False], [
            r.evaluation_errors for r in records
        ]
        assert [z for _, z in pool._zygotes] == [zygote]
        assert all(r.scoring is not None and r.scoring.isolation == "bubblewrap" for r in records)


HARNESS_WITH_SERVERS = """
import json
import sys
from pathlib import Path

# What a harness loads to provision sandboxes: the GitHub world's server, the SMTP server,
# the PostgreSQL driver, SQLAlchemy.
import oracle.fixtures.github.service
import oracle.fixtures.postgres
import oracle.proxies.smtp
import oracle.sinks.pg_connect
import sqlalchemy
from oracle import load_tasks
from oracle.scoring import preload
from oracle.scoring.pool import ScorerPool
from tests.scoring.test_pool import _zygote_maps, _zygote_preloaded

(task,) = load_tasks([Path(sys.argv[1])]).tasks
with ScorerPool() as pool:
    scorer = pool.task_scorer(Path(task.origin), [])
    scorer.warm()
    maps = _zygote_maps(scorer.zygote)
    print(json.dumps({
        "preloaded": _zygote_preloaded(scorer.zygote),
        "native": [n for n in ("sqlalchemy", "psycopg_binary", "_rust", "pydantic_core")
                   if n in maps],
        "everything": preload.modules(),
        "unknown_file": preload.modules([Path(sys.argv[1]).with_name("task_other.py")]),
    }))
"""


def test_a_zygote_leaves_out_what_the_harness_loaded_to_provision(tmp_path):
    """A harness has loaded servers and drivers to provision its sandboxes; the zygote of a
    SQLite task file imports what that file reaches, none of them: no SQLAlchemy (a scorer
    reads evidence, never a database), no cryptography (the egress recorder's CA, the GitHub
    world's tokens and archive signatures), no PostgreSQL driver (with everything, a zygote
    took 0.6 s to start). Without a task file loaded here to start from, it would import
    every module of the layers loaded."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "task_fresh.py").write_text(FRESH)
    out = subprocess.run(
        [sys.executable, "-c", HARNESS_WITH_SERVERS, str(tmp_path / "task_fresh.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    preloaded = seen["preloaded"]
    assert {"oracle", "oracle.authoring.task", "oracle.fixtures.sqlite"} <= set(preloaded)
    servers = ("oracle.fixtures.github", "oracle.fixtures.postgres", "oracle.sinks.pg_connect")
    assert [m for m in preloaded if m.startswith(servers)] == []
    assert seen["native"] == ["pydantic_core"]
    for fallback in (seen["everything"], seen["unknown_file"]):
        assert {"oracle.fixtures.github.service", "oracle.sinks.pg_connect"} <= set(fallback)
        assert set(preloaded) < set(fallback)


def test_a_zygote_whose_scorer_is_judging_is_never_ended(tmp_path):
    files = _task_folders(tmp_path, "abcd")
    with ScorerPool() as pool:
        busy = pool.task_scorer(files["a"], [tmp_path / "runs"])
        busy.warm()
        with busy.lock:  # as while a trial is judged
            others = []
            for name in ("b", "c", "d"):
                others.append(pool.task_scorer(files[name], [tmp_path / "runs"]))
                others[-1].warm()
            # The busy one is the least recently used, but the next idle one went instead.
            assert busy.zygote.alive
            assert not others[0].zygote.alive
            assert [z for _, z in pool._zygotes] == [busy.zygote, *(o.zygote for o in others[1:])]


def test_messages_round_trip_and_a_broken_peer_is_named():
    a, b = socket.socketpair()
    with a, b:
        send(a, {"op": "evidence", "names": ["x"]}, [b"\x00" * 100_000])
        header, blobs = receive(b, None)
        assert header == {"op": "evidence", "names": ["x"]} and blobs == [b"\x00" * 100_000]
        with pytest.raises(ChannelTimeout):
            import time

            receive(b, time.monotonic() + 0.05)
        a.sendall(struct.pack("!I", 1 << 30))
        with pytest.raises(ChannelError, match="over the limit"):
            receive(b, None)
    c, d = socket.socketpair()
    with d:
        c.sendall(struct.pack("!I", 2) + b"[]")
        with pytest.raises(ChannelError, match="not an object"):
            receive(d, None)
        c.close()
        with pytest.raises(ChannelClosed):
            receive(d, None)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            for c in map(int, (task / "children").read_text().split()):
                out.append(c)
                todo.append(c)
    return out


def _zygote_pid(zygote) -> int:  # type: ignore[no-untyped-def]
    """The pid of `zygote`'s interpreter (under bubblewrap, a child of bwrap's)."""
    root = zygote._proc.pid
    workers = []
    for p in [root, *_descendants(root)]:
        argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        if b"oracle.scoring.worker" in argv and not argv[0].endswith(b"bwrap"):
            workers.append(p)
    assert workers, "no scorer process found"
    return min(workers)  # the zygote starts first


def _zygote_maps(zygote) -> str:  # type: ignore[no-untyped-def]
    """The memory map of `zygote`'s interpreter."""
    return Path(f"/proc/{_zygote_pid(zygote)}/maps").read_text()


def _zygote_preloaded(zygote) -> list[str]:  # type: ignore[no-untyped-def]
    """The modules `zygote`'s interpreter was asked to import before its first fork, read from
    its environment."""
    environ = Path(f"/proc/{_zygote_pid(zygote)}/environ").read_bytes().split(b"\0")
    for entry in environ:
        name, _, value = entry.decode().partition("=")
        if name == "ORACLE_SCORER_PRELOAD":
            return value.split(",")
    raise AssertionError("the zygote was handed no ORACLE_SCORER_PRELOAD")


def test_a_zygote_imports_the_authoring_surface_before_it_forks_scorers(tmp_path):
    """Task files import ``from oracle import Task, sqlite, …``, which the package resolves
    lazily: the zygote loads what its task files use of it once, so a new task file's
    scorer does not (its first trial used to wait 0.6-0.9 s for those imports)."""
    # The oracle has loaded the task file when it starts a zygote for it (the loader's module
    # is what the zygote's imports are read from), whatever other tests this process ran.
    (task,) = load_file(TASK)[0]
    assert task.name == "user-rename"
    with ScorerPool() as pool:
        zygote = pool.task_scorer(TASK, [tmp_path / "a"]).zygote
        pool.task_scorer(TASK, [tmp_path / "a"]).warm()
        preloaded = _zygote_preloaded(zygote)
        assert preloaded == list(zygote.preloaded)
        assert preloaded[0] == "oracle"
        for module in ("oracle.authoring.task", "oracle.fixtures.sqlite", "oracle.sinks.sql_diff"):
            assert module in preloaded
        assert "pydantic_core" in _zygote_maps(zygote)


def test_a_task_files_loaded_modules_are_found_by_real_path_and_no_namesake_is(
    tmp_path, monkeypatch
):
    """What a zygote preloads is read from the modules loaded from its task files: found
    through a link or a relative path, never a file of the same name in another folder."""
    import sys
    import types

    from oracle.scoring import preload

    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        folder.mkdir()
        (folder / "task_x.py").write_text("")
    (tmp_path / "link").symlink_to(here)
    monkeypatch.chdir(here)

    for name, file in (
        ("abs", here / "task_x.py"),
        ("rel", "task_x.py"),
        ("namesake", there / "task_x.py"),
    ):
        module = types.ModuleType(f"oracle_test_preload_{name}")
        module.__file__ = str(file)
        monkeypatch.setitem(sys.modules, module.__name__, module)

    found = preload._task_modules([tmp_path / "link" / "task_x.py"])
    assert sorted(m.__name__ for m in found) == [
        "oracle_test_preload_abs",
        "oracle_test_preload_rel",
    ]


PLUGINS_TASK = """\
import os
from oracle import Task, sqlite

# Read where the scorer loads this file: in its zygote's environment.
PLUGINS = os.environ.get("PYDANTIC_DISABLE_PLUGINS")

def plugins_on(ev):
    grew = bool(ev.diff.sql("db").added("t"))  # False: the agent writes nothing
    return grew or PLUGINS != "__all__"

task = Task(name="plugins", prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
            security=plugins_on)
"""


def test_scorers_run_without_the_environments_pydantic_plugins(tmp_path):
    """A pydantic plugin is any installed distribution's entry point, loaded by the first
    model a process builds: in a scorer it would be the environment's code, not the task's,
    and finding plugins reads every installed distribution's metadata at each zygote's start
    (about 20 ms of its CPU, measured). Scorers are started with pydantic's documented switch
    that turns them all off."""
    from oracle import CallableAgent, load_tasks, run_trial
    from oracle.scoring.pool import SealedScorer

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "task_plugins.py").write_text(PLUGINS_TASK)
    (task,) = load_tasks([tmp_path / "suite" / "task_plugins.py"]).tasks
    with ScorerPool() as pool:
        agent = CallableAgent(lambda sb: None, name="idle")
        record = run_trial(task, agent, scorer=SealedScorer(pool)).record
    assert record.scoring is not None and record.scoring.isolation != "none"
    assert record.security_breached is False, record.evaluation_errors


PEEK = """\
import os
from oracle import Task, sqlite

class _Look:  # behind a class, where `oracle check` does not look
    @staticmethod
    def exists(path):
        return os.path.exists(path)

def peeked(ev):
    ev.diff.sql("db").added("t")  # evidence first, as a predicate must
    return _Look.exists({secret!r})

def own_folder(ev):
    ev.diff.sql("db").added("t")
    return _Look.exists({visible!r})

task = Task(name="peek", prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
            utility=own_folder, security=peeked)
"""


def test_trials_hiding_other_temporary_folders_share_a_zygote_and_see_none(tmp_path):
    """Each test of a harness archives into a folder of its own inside the temporary folder,
    which scorers never see as a whole: such trials share one zygote (it builds the very
    sandbox a new one would), and a predicate of the second looking for a file in its own
    archive folder does not find it, while it finds a file of its task's folder."""
    from oracle import CallableAgent, load_tasks, run_trial
    from oracle.scoring.pool import SealedScorer

    runs = [tmp_path / "runs-a", tmp_path / "runs-b"]
    for r in runs:
        r.mkdir()
        (r / "secret.txt").write_text("an agent's output")
    (tmp_path / "tasks").mkdir()
    task_file = tmp_path / "tasks" / "task_peek.py"
    task_file.write_text(PEEK.format(secret=str(runs[1] / "secret.txt"), visible=str(task_file)))
    (task,) = load_tasks([task_file]).tasks
    idle = CallableAgent(lambda sb: None, name="idle")
    with ScorerPool() as pool:
        records = [
            run_trial(task, idle, scorer=SealedScorer(pool, hidden=[r])).record for r in runs
        ]
        assert [(r.utility_achieved, r.security_breached) for r in records] == [
            (True, False),
            (True, False),
        ], [r.evaluation_errors for r in records]
        (zygote,) = [z for _, z in pool._zygotes]
        assert not zygote.sees(runs[1] / "secret.txt")
        # A folder to hide inside one bound back needs a cover of its own: another zygote.
        inside = tmp_path / "tasks" / "runs-c"
        other = pool.task_scorer(task_file, [inside]).zygote
        assert other is not zygote and not other.sees(inside / "x")
        assert zygote.sees(inside / "x")
