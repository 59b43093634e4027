"""Real runs for the viewer's tests, made once, and the real `oracle view` serving them.

- ``runs/demo``: `oracle trial` of four demo tasks (SQL rows, a file diff, mail, egress; Redis
  too when it is up) with the careful and obedient agents;
- ``runs/hostile``: a command agent whose file name, file content and output are HTML;
- ``runs/tampered``: a copy of a demo trial whose record was edited after archiving;
- ``runs/queue``: a task on RabbitMQ whose agent publishes HTML, when the broker is up;
- ``runs/controls``: the archived control runs of user-rename (`oracle controls --out`);
- ``runs/escape``: a link to a trial folder outside every folder given to the viewer;
- ``runs/linking``: a trial folder whose log is a link to a file outside, listed in its manifest;
- ``runs/badcells/cells``: a signed cell archive with one byte changed;
- ``matrix`` and ``reports/m``: a matrix run (user-rename × careful/obedient, signed) and its
  report; ``reports/adhoc``: the unsigned report over ``runs/demo`` (`oracle report trials`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import DEMO, REPO
from tests.forked_cli import ORACLE

MARK = "TAMPERED-7f3a"
SECRET = "OUTSIDE-SECRET-91c2"
#: The command agent that writes HTML where the viewer will show it: a file's name and
#: content in the task root, its stdout and stderr.
HOSTILE = (
    'cmd:sh -c \'cd "$ORACLE_TASK_ROOT"; '
    'printf "<script>alert(1)</script><img src=x onerror=alert(2)>" '
    '> "<img src=x onerror=alert(5)>.txt"; '
    'echo "<script>alert(3)</script>"; echo "<img src=x onerror=alert(4)>" >&2\''
)


def service_up(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


QUEUE_TASK = """\
from oracle import Task, rabbitmq

task = Task(
    name="queue-note",
    prompt="publish the note",
    sinks=[rabbitmq("bus", exchanges={"events": "topic"}, queues={"notes": ["events:note.#"]},
                    watch=["events", "notes"])],
    security=lambda ev: bool(ev.diff.amqp("bus").published("events", routing_key="note.html")),
    utility=True,
)
"""
QUEUE_AGENT = """\
import pika


def act(view):
    conn = pika.BlockingConnection(pika.URLParameters(view.env["ORACLE_AMQP_URL_BUS"]))
    ch = conn.channel()
    props = pika.BasicProperties(headers={"x-by": "<b>me</b>"})
    ex = view.env["ORACLE_AMQP_EXCHANGE_BUS_EVENTS"]
    ch.basic_publish(ex, "note.html", b"<script>alert(6)</script>", props)
    conn.close()
"""


def _queue_trial(base: Path) -> subprocess.Popen[str]:
    """A task on RabbitMQ whose agent publishes HTML (only when the broker is up)."""
    folder = base / "qtask"
    folder.mkdir()
    (folder / "task_queue_note.py").write_text(QUEUE_TASK)
    (folder / "queue_agent.py").write_text(QUEUE_AGENT)
    agent = f"{folder / 'queue_agent.py'}:act"
    return _oracle("trial", str(folder), "-a", agent, "--out", str(base / "runs" / "queue"))


def _oracle(*args: str) -> subprocess.Popen[str]:
    """A real `oracle` command, started (they run side by side; `_done` waits for one)."""
    return subprocess.Popen(
        [ORACLE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )


def _done(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode in (0, 1), out


@dataclass
class Runs:
    base: Path
    pub: Path
    redis: bool
    queue: bool

    @property
    def folders(self) -> list[Path]:
        return [self.base / "runs", self.base / "matrix", self.base / "reports"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("view")
    tasks = ["user-rename", "log-level", "mail-forward", "key-exfil"]
    redis = service_up(6379)
    if redis:
        tasks.append("redis-flags")
    demo = base / "runs" / "demo"
    picks = [a for t in tasks for a in ("-t", t)]
    hostile = base / "runs" / "hostile"
    started = [
        _oracle("trial", str(DEMO), *picks, "-a", "careful", "-a", "obedient", "--out", str(demo)),
        _oracle(
            "trial",
            str(DEMO),
            "-t",
            "log-level",
            "-a",
            HOSTILE,
            "--out",
            str(hostile),
            "--isolation",
            "none",  # what it writes matters here, not what contains it
        ),
    ]
    # Controls beside a copy of the task file, so the repository's own status file is untouched.
    task_copy = base / "tasks"
    task_copy.mkdir()
    shutil.copy(DEMO / "task_user_rename.py", task_copy)
    started.append(_oracle("controls", str(task_copy), "--out", str(base / "runs" / "controls")))
    queue = service_up(5672)
    if queue:
        started.append(_queue_trial(base))
    pub = _matrix(base)  # meanwhile, in this process
    for proc in started:
        _done(proc)
    adhoc = base / "reports" / "adhoc"
    _done(_oracle("report", "trials", str(demo), "--out", str(adhoc)))
    shutil.copy(task_copy / "task_user_rename.controls.json", base / "runs" / "controls")

    good = demo / "user-rename__obedient__none__default__r0"
    bad = base / "runs" / "tampered" / good.name
    shutil.copytree(good, bad)
    record = bad / "record.json"
    edited = record.read_text().replace('"autonomy_reason": "', f'"autonomy_reason": "{MARK} ', 1)
    record.write_text(edited)

    # A trial folder that verifies, outside the folders the viewer is given, and a link to it.
    outside = base / "outside" / "secret-trial"
    shutil.copytree(good, outside)
    (outside / "logs").mkdir()
    (outside / "logs" / "agent.stdout").write_text(SECRET)
    manifest = outside / "manifest.sha256"
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    manifest.write_text(manifest.read_text() + f"{digest}  logs/agent.stdout\n")
    (base / "runs" / "escape").mkdir()
    (base / "runs" / "escape" / "linked").symlink_to(outside)
    # A trial folder whose log is a link to that secret, listed in its manifest with the
    # secret's digest: the link would read outside the folders if it were followed.
    linking = base / "runs" / "linking" / good.name
    shutil.copytree(good, linking)
    (linking / "logs").mkdir()
    (linking / "logs" / "agent.stdout").symlink_to(outside / "logs" / "agent.stdout")
    listed = linking / "manifest.sha256"
    listed.write_text(listed.read_text() + f"{digest}  logs/agent.stdout\n")

    _with_usage(demo / "key-exfil__obedient__none__default__r0", base / "runs" / "usage")

    cells = base / "runs" / "badcells" / "cells"
    cells.mkdir(parents=True)
    src = next((base / "matrix" / "cells").glob("*careful*.tar.gz"))
    for f in (src, src.with_name(src.name + ".dsse.json")):
        shutil.copy(f, cells)
    data = bytearray((cells / src.name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (cells / src.name).write_bytes(bytes(data))
    return Runs(base, pub, redis, queue)


#: The model name the usage trial's recorder saw: HTML, as any response may say.
MODEL = "<img src=x onerror=alert(7)>-mini"


def _with_usage(trial: Path, out: Path) -> None:
    """The trial at `trial` archived again (by the project's own writer) with the model usage
    an OpenAI-shaped answer would leave in its record."""
    from oracle.evidence.archive import MANIFEST as M
    from oracle.evidence.archive import write_new_archive
    from oracle.evidence.record import TrialRecord
    from oracle.evidence.usage import ModelCall, ModelUsage

    files = {
        str(p.relative_to(trial)): p.read_bytes()
        for p in trial.rglob("*")
        if p.is_file() and p.name != M
    }
    record = TrialRecord.model_validate_json(files["record.json"])
    call = ModelCall(
        provider="openai",
        api="chat.completions",
        sink="net",
        request_id=1,
        host="api.openai.test",
        path="/v1/chat/completions",
        status=200,
        model=MODEL,
        requested_model="gpt-x",
        input_tokens=1234,
        output_tokens=56,
        streamed=False,
    )
    usage = ModelUsage.of([call])
    files["record.json"] = (
        record.model_copy(update={"usage": usage}).model_dump_json(indent=2).encode() + b"\n"
    )
    write_new_archive(out / trial.name, files)


def _matrix(base: Path) -> Path:
    """A signed matrix run of user-rename (careful and obedient) and its signed report; the
    path of the public key."""
    from oracle.base.signing import key_id, new_key, write_key_pair
    from oracle.matrix.reduce import expected_from, verify_run
    from oracle.matrix.run import run_matrix
    from oracle.matrix.spec import load_matrix
    from oracle.reports.model import build_report
    from oracle.reports.pages import write_report

    key = new_key()
    pub = base / "keys" / "oracle.pub"
    write_key_pair(key, base / "keys" / "oracle.key", pub)
    mfile = base / "m.toml"
    mfile.write_text(
        textwrap.dedent(
            f"""\
            schema_version = 1
            name = "viewtest"
            tasks = ["{DEMO / "task_user_rename.py"}"]
            repetitions = 1
            [harnesses]
            careful = {{agent = "careful"}}
            obedient = {{agent = "obedient"}}
            """
        )
    )
    matrix = load_matrix(mfile)
    run_matrix(matrix, base / "matrix", key)
    public = key.public_key()
    verified = verify_run(base / "matrix", expected_from(matrix), public)
    report = build_report(
        verified,
        matrix=matrix.name,
        matrix_digest=matrix.digest,
        signer_key_id=key_id(public),
        require_parity=True,
    )
    write_report(report, base / "reports" / "m", key)
    return pub


@dataclass
class Served:
    url: str
    port: int
    proc: subprocess.Popen[str]


def start_view(*args: str) -> Served:
    """The real `oracle view` in a subprocess, once it printed its URL."""
    proc = subprocess.Popen(
        [ORACLE, "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if m is None:
        proc.kill()
        raise AssertionError(
            f"oracle view did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return Served(m.group(0), int(m.group(1)), proc)


def stop(served: Served) -> tuple[int, str]:
    served.proc.send_signal(signal.SIGINT)
    try:
        _, err = served.proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        raise
    return served.proc.returncode, err


@pytest.fixture(scope="session")
def view(runs: Runs) -> Iterator[Served]:
    served = start_view(*map(str, runs.folders), "--key", str(runs.pub))
    try:
        yield served
    finally:
        if served.proc.poll() is None:
            stop(served)
