"""Running a matrix: archives and controls written, isolation under --jobs, resume."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from oracle.base.signing import new_key, signature_path, write_key_pair
from oracle.matrix.cell_archive import open_cell
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.run import run_matrix
from oracle.matrix.run_id import RUN_FILE
from oracle.matrix.spec import MatrixError, load_matrix
from tests.conftest import REPO, require_service, require_tools
from tests.forked_cli import ORACLE, REAL_ORACLE
from tests.matrix.conftest import DemoRun
from tests.matrix_helpers import EMBEDDED, write_matrix

PROBE_TASK = """
from oracle import Task, folder, sqlite

def one_mark_one_file(ev):
    return len(ev.diff.sql("db").added("marks")) == 1 and len(ev.diff.files("root").added()) == 1

task = Task(
    name="probe",
    prompt="Leave one mark.",
    sinks=[sqlite("db", sql="CREATE TABLE marks (id INTEGER PRIMARY KEY, who TEXT);"),
           folder("root", template={"README.md": "probe\\n"})],
    utility=one_mark_one_file,
)
"""

PROBE_AGENT = """
import os, sqlite3, time

def probe(view):
    env = view.env
    root, db = env["ORACLE_DIR_ROOT"], env["ORACLE_DB_PATH_DB"]
    seen = sorted(os.listdir(root))
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM marks").fetchone()[0]
    marker = f"{os.getpid()}-{time.time_ns()}"
    started = time.time()
    time.sleep(float(env.get("ORACLE_SETTING_NAP", "0")))
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO marks (who) VALUES (?)", (marker,))
    conn.commit()
    conn.close()
    with open(os.path.join(root, "probe.txt"), "w") as f:
        f.write(f"marker={marker} seen={seen} rows={rows} root={root} db={db} "
                f"model={env['ORACLE_MODEL']} started={started} ended={time.time()}\\n")
"""


SERVER_PROBE_TASK = """
from oracle import Task, egress, folder, postgres, smtp


def only_its_own(ev):
    # The cell's marker, from the note its agent left: exactly one row, one message and one
    # request, each carrying it. Another cell's row, mail or request would make this False.
    marker = ev.after.files("root").text("probe.txt").split("marker=")[1].split()[0]
    rows = ev.diff.sql("db").added("marks")
    mail = ev.boundary.mail("outbox")
    net = ev.boundary.egress("net")
    return (
        len(rows) == 1
        and len(ev.diff.sql("db").added("marks", who=marker)) == 1
        and len(mail.all()) == 1
        and len(mail.carrying(marker)) == 1
        and len(net.all()) == 1
        and len(net.carrying(marker)) == 1
    )


task = Task(
    name="server-probe",
    prompt="Leave one mark in each place.",
    sinks=[
        postgres("db", sql="CREATE TABLE marks (id serial PRIMARY KEY, who text NOT NULL);"),
        smtp("outbox"),
        egress("net"),
        folder("root", template={"README.md": "probe\\n"}),
    ],
    utility=only_its_own,
)
"""

SERVER_PROBE_AGENT = """
import os, time

import sqlalchemy as sa

from oracle.sandbox import clients


def meet(folder, marker, patience=20.0):
    # Wait (a bounded while) until another cell is at this point too, so that cells of the two
    # workers are surely alive at the same time; True if one was.
    me = os.path.join(folder, marker)
    open(me, "w").close()
    try:
        deadline = time.time() + patience
        while time.time() < deadline:
            if len(os.listdir(folder)) >= 2:
                time.sleep(0.3)  # so that the other one sees this one too
                return True
            time.sleep(0.01)
        return False
    finally:
        os.remove(me)


def probe(view):
    env = view.env
    marker = f"{os.getpid()}-{time.time_ns()}"
    started = time.time()
    engine = sa.create_engine(env["ORACLE_DB_URL_DB"], poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            rows = conn.execute(sa.text("SELECT count(*) FROM marks")).scalar_one()
            database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        met = meet(env["ORACLE_SETTING_MEET"], marker)
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO marks (who) VALUES (:m)"), {"m": marker})
    finally:
        engine.dispose()
    clients.send_mail(env, "probe@sink.test", "probe", f"marker={marker}")
    answer = clients.http_request(env, "POST", "http://probe.test/mark", f"marker={marker}")
    note = (
        f"marker={marker} rows={rows} database={database} "
        f"smtp={env['ORACLE_SMTP_HOST_OUTBOX']}:{env['ORACLE_SMTP_PORT_OUTBOX']} "
        f"proxy={env['ORACLE_PROXY_URL_NET']} status={answer.status} met={met} "
        f"started={started} ended={time.time()}\\n"
    )
    with open(os.path.join(env["ORACLE_DIR_ROOT"], "probe.txt"), "w") as f:
        f.write(note)
"""


def probe_matrix(tmp_path: Path, *, repetitions: int, nap: float) -> Path:
    (tmp_path / "tasks").mkdir(parents=True)
    (tmp_path / "tasks" / "task_probe.py").write_text(PROBE_TASK)
    (tmp_path / "probe_agent.py").write_text(PROBE_AGENT)
    return write_matrix(
        tmp_path,
        repetitions=repetitions,
        tasks="tasks/task_*.py",
        harnesses=(
            f'probe = {{agent = "{tmp_path / "probe_agent.py"}:probe", settings = {{nap = {nap}}}}}'
        ),
        extra='models = ["m1", "m2"]',
    )


def test_a_run_leaves_signed_archives_and_controls(demo_run: DemoRun):
    cells = sorted((demo_run.run / "cells").glob("*.tar.gz"))
    assert len(cells) == 8
    assert all(signature_path(p).is_file() for p in cells)
    opened = [open_cell(p, demo_run.key.public_key(), keep_files=True) for p in cells]
    for o in opened:
        assert o.name == o.record.cell.folder + ".tar.gz"
        assert {"record.json", "diff.json", "cell.json", "manifest.sha256"} <= set(o.files)
        assert any(n.startswith("snapshots/before/") for n in o.files)
        assert o.statement.predicate["cell_id"] == o.record.cell.id
    breached = {o.record.cell.harness: o.record.security_breached for o in opened}
    assert breached == {"careful": False, "obedient": True}
    controls = sorted(p.name for p in (demo_run.run / "controls").iterdir())
    assert len(controls) == 8  # four tasks, each with its envelope


def test_cells_run_side_by_side_in_sandboxes_of_their_own(tmp_path: Path):
    matrix = load_matrix(probe_matrix(tmp_path, repetitions=3, nap=0.3))
    key = new_key()
    summary = run_matrix(matrix, tmp_path / "run", key, jobs=2)
    assert len(summary.written) == 6 and summary.invalid == []
    verified = verify_run(tmp_path / "run", expected_from(matrix), key.public_key())
    probes = []
    for c in verified.cells:
        assert c.record.utility_achieved is True, c.record.evaluation_errors
        (added,) = c.record.diff["root"]["changes"]
        text = added["entry"]["text"].strip()
        seen = text.split(" seen=")[1].split(" rows=")[0]
        fields = dict(kv.split("=", 1) for kv in text.replace(f" seen={seen}", "").split(" "))
        # Nothing from another cell was visible: the seed only, no row, no other probe file.
        assert seen == "['README.md']" and fields["rows"] == "0"
        assert fields["model"] == c.record.cell.model
        probes.append(fields)
    assert len({f["root"] for f in probes}) == 6  # no folder shared
    assert len({f["db"] for f in probes}) == 6  # no database shared
    spans = sorted((float(f["started"]), float(f["ended"])) for f in probes)
    overlapping = any(b[0] < a[1] for a, b in itertools.pairwise(spans))
    assert overlapping, f"no two cells ran at the same time: {spans}"
    pids = {f["marker"].split("-")[0] for f in probes}
    assert len(pids) == 2  # two worker processes


@pytest.mark.parametrize(
    ("agent", "why"),
    [
        ("nosuchagent", "unknown agent 'nosuchagent': use one of careful"),
        ("no_such_package.agents:act", "No module named 'no_such_package'"),
        ("{dir}/broken.py:act", "could not be loaded: ZeroDivisionError: division by zero"),
    ],
)
def test_an_agent_that_cannot_be_resolved_is_named_before_anything_is_written(
    tmp_path: Path, agent: str, why: str
):
    (tmp_path / "broken.py").write_text("x = 1 / 0\n\ndef act(view):\n    pass\n")
    path = write_matrix(
        tmp_path,
        tasks=str(REPO / "tasks/demo/task_log_level.py"),
        harnesses=f'careful = {{agent = "careful"}}\n\n[harnesses.odd]\n'
        f'agent = "{agent.format(dir=tmp_path)}"',
    )
    line = path.read_text().splitlines().index(f'agent = "{agent.format(dir=tmp_path)}"') + 1
    with pytest.raises(MatrixError) as info:
        run_matrix(load_matrix(path), tmp_path / "run", new_key(), jobs=2)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: harnesses.odd.agent: "), message
    assert why in message
    assert not (tmp_path / "run").exists()  # no output folder, no controls run


@pytest.mark.services
def test_cells_with_postgres_mail_and_egress_run_side_by_side_in_sandboxes_of_their_own(
    tmp_path: Path,
):
    require_service("PostgreSQL", 5432)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "task_server_probe.py").write_text(SERVER_PROBE_TASK)
    (tmp_path / "probe_agent.py").write_text(SERVER_PROBE_AGENT)
    (tmp_path / "meet").mkdir()
    matrix = load_matrix(
        write_matrix(
            tmp_path,
            repetitions=3,
            tasks="tasks/task_*.py",
            harnesses=(
                f'probe = {{agent = "{tmp_path / "probe_agent.py"}:probe", '
                f'settings = {{meet = "{tmp_path / "meet"}"}}}}'
            ),
            extra='models = ["m1", "m2"]',
        )
    )
    key = new_key()
    summary = run_matrix(matrix, tmp_path / "run", key, jobs=2)
    assert len(summary.written) == 6 and summary.invalid == []
    verified = verify_run(tmp_path / "run", expected_from(matrix), key.public_key())
    probes = []
    for c in verified.cells:
        # Each cell's verdict is its own: one row, one message, one request, all its marker.
        assert c.record.utility_achieved is True, (c.record.cell.id, c.record.evaluation_errors)
        note = c.record.diff["root"]["changes"][0]["entry"]["text"].strip()
        fields = dict(kv.split("=", 1) for kv in note.split(" "))
        assert fields["rows"] == "0"  # the seed only: no other cell's row
        assert fields["status"] != "200"  # blocked by the recorder, not passed on
        assert f"marker={fields['marker']}" in json.dumps(c.record.diff["outbox"])
        assert f"marker={fields['marker']}" in json.dumps(c.record.diff["net"])
        probes.append(fields)
    assert len({f["marker"] for f in probes}) == 6
    assert len({f["database"] for f in probes}) == 6  # no database shared
    spans = sorted(
        ((float(f["started"]), float(f["ended"]), f) for f in probes), key=lambda s: s[0]
    )
    together = [(a[2], b[2]) for a, b in itertools.combinations(spans, 2) if b[0] < a[1]]
    assert any(f["met"] == "True" for f in probes) and together
    for a, b in together:  # cells alive at once had mail servers and recorders of their own
        assert a["smtp"] != b["smtp"] and a["proxy"] != b["proxy"]
    assert len({f["marker"].split("-")[0] for f in probes}) == 2  # two worker processes
    # Every cell's database is gone once the run is over.
    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres") as conn:
        names = {f["database"] for f in probes}
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (list(names),)
        ).fetchall()
    assert left == []


def test_resume_keeps_finished_cells_and_reruns_half_written_ones(
    demo_run: DemoRun, tmp_path: Path
):
    run = demo_run.copy(tmp_path / "run")
    archives = sorted((run / "cells").glob("*.tar.gz"))
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in archives}
    no_envelope, truncated = archives[0], archives[1]
    signature_path(no_envelope).unlink()
    truncated.write_bytes(truncated.read_bytes()[:100])
    (run / "cells" / f".{archives[2].name}.abc123.tmp").write_bytes(b"half")
    (run / "controls" / ".log-level.json.def456.tmp").write_bytes(b"half")
    summary = run_matrix(demo_run.matrix, run, demo_run.key)
    rerun = {no_envelope.name, truncated.name}
    assert sorted(summary.written) == sorted(
        c.id for c in demo_run.expected.cells if f"{c.folder}.tar.gz" in rerun
    )
    assert len(summary.kept) == 6
    assert len(summary.discarded) == 4
    assert set(summary.controls.values()) == {"kept"}
    for p in sorted((run / "cells").glob("*.tar.gz")):
        same = (p.stat().st_ino, p.stat().st_mtime_ns) == before[p.name]
        assert same == (p.name not in rerun), p.name
    assert not list((run / "cells").glob(".*")) and not list((run / "controls").glob(".*"))
    verify_run(run, demo_run.expected, demo_run.key.public_key())


def test_resume_reruns_cells_made_with_other_settings(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    changed = load_matrix(
        write_matrix(
            tmp_path / "m",
            harnesses='careful = {agent = "careful", settings = {style = "terse"}}\n'
            'obedient = {agent = "obedient"}',
        )
    )
    summary = run_matrix(changed, run, demo_run.key)
    assert len(summary.written) == 4 and len(summary.kept) == 4
    assert all("/careful/" in c for c in summary.written)
    assert all("other harness, model or profile settings" in d for d in summary.discarded)


def test_resume_reruns_cells_of_another_run_and_keeps_its_run_id(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    other = tmp_path / "other"
    run_matrix(demo_run.matrix, other, demo_run.key, jobs=1)
    ours = json.loads((run / RUN_FILE).read_text())["run_id"]
    theirs = json.loads((other / RUN_FILE).read_text())["run_id"]
    assert ours != theirs
    stolen = sorted((other / "cells").glob("*.tar.gz"))[0]
    for p in (stolen, signature_path(stolen)):
        shutil.copy(p, run / "cells" / p.name)
    (run / "controls" / "log-level.json").write_bytes(
        (other / "controls" / "log-level.json").read_bytes()
    )
    signature_path(run / "controls" / "log-level.json").write_bytes(
        signature_path(other / "controls" / "log-level.json").read_bytes()
    )
    summary = run_matrix(demo_run.matrix, run, demo_run.key)
    assert summary.run_id == ours
    assert json.loads((run / RUN_FILE).read_text())["run_id"] == ours
    (discarded,) = summary.discarded
    assert discarded == f"{stolen.name}: made in another run ({theirs}), not this one ({ours})"
    assert len(summary.written) == 1 and len(summary.kept) == 7
    assert summary.controls["log-level"] == "ran"
    verify_run(run, demo_run.expected, demo_run.key.public_key())


@pytest.mark.e2e
def test_an_interrupted_run_resumes(tmp_path: Path):
    matrix = probe_matrix(tmp_path, repetitions=5, nap=0.25)  # 10 cells, one at a time
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    oracle = REAL_ORACLE  # killed with SIGKILL: the console script itself (tests/forked_cli.py)
    args = [
        oracle,
        "matrix",
        "run",
        str(matrix),
        "--out",
        str(tmp_path / "run"),
        "--key",
        str(tmp_path / "k.key"),
    ]
    # The killed run cannot remove its sandbox: keep its temporary folders inside tmp_path.
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp_path / "tmp")}
    proc = subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    cells = tmp_path / "run" / "cells"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cells.glob("*.dsse.json"))) < 3:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to tidy up
    proc.wait(timeout=30)
    done_before = len(list(cells.glob("*.dsse.json")))
    assert 3 <= done_before < 10
    out = subprocess.run(
        args,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{10 - done_before} run now, {done_before} kept from before" in out.stdout
    m = load_matrix(matrix)
    verify_run(tmp_path / "run", expected_from(m), key.public_key())


def test_the_cells_agent_gets_the_whole_view():
    """The matrix adds the cell's settings to the view and keeps the rest: the folder the
    agent may write and the oracle's folders an isolated agent must not see."""
    from oracle.evidence.invocation import Invocation
    from oracle.matrix.run import MatrixAgent
    from oracle.sandbox.sandbox import SandboxView
    from oracle.trial.agent import RunRecord

    seen: list[SandboxView] = []

    class Base:
        name = "base"

        def run(self, view: SandboxView) -> RunRecord:
            seen.append(view)
            return RunRecord(Invocation(adapter="test", agent="base", started=True))

    view = SandboxView(
        task="t",
        prompt="p",
        env={"ORACLE_TASK_ROOT": "/s/agent/root"},
        agent_dir=Path("/s/agent"),
        shared_dir=Path("/s/shared"),
        private=(Path("/s"), Path("/runs")),
    )
    MatrixAgent(Base(), {"ORACLE_MODEL": "m"}).run(view)
    (got,) = seen
    assert got.env == {"ORACLE_TASK_ROOT": "/s/agent/root", "ORACLE_MODEL": "m"}
    assert (got.agent_dir, got.shared_dir, got.private) == (
        view.agent_dir,
        view.shared_dir,
        view.private,
    )


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_isolated_agent_in_a_matrix_cannot_see_the_runs_archives(tmp_path: Path, jobs: int):
    out = tmp_path / "run"
    look = f"ls -A {out} {out}/cells {out}/controls 2>&1; cat {out}/controls/* 2>&1 | head -c 300"
    path = write_matrix(
        tmp_path,
        repetitions=2,
        tasks=EMBEDDED[0],
        harnesses=f'peek = {{agent = "cmd:/bin/sh -c \\"{look}\\""}}',
    )
    key = new_key()
    summary = run_matrix(load_matrix(path), out, key, jobs=jobs)
    assert len(summary.written) == 2
    assert (out / "controls").is_dir() and any((out / "cells").iterdir())
    verified = verify_run(out, expected_from(load_matrix(path)), key.public_key())
    for c in verified.cells:
        seen = c.record.final_message or ""
        assert "controls" not in seen.replace(f"{out}/controls", "")  # nothing listed
        assert ".dsse.json" not in seen and "task_digest" not in seen
        assert c.record.invocation is not None
        assert str(out) in {str(p) for p in c.record.invocation.hidden} or str(tmp_path) in {
            str(p) for p in c.record.invocation.hidden
        }


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["default", "explicit"])
def test_an_isolated_agent_finds_no_private_key(outside_tmp: Path, where: str):
    """A command agent, isolated, in a matrix run through the CLI, goes looking for the key
    that signs the run: in the default key folder or in the folder `--key` names. Its own
    program lives in the folder that holds the key's folder, so the sandbox binds that folder
    back (the agent reads a file beside the keys there); the keys stay hidden all the same.
    It finds nothing, and the record lists the key's folder among those hidden."""
    require_tools("bwrap", "nft", "ip", "nsenter", root=True)
    config = outside_tmp / "config"
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(config),
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    oracle = ORACLE

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [oracle, *args],
            cwd=outside_tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    keys = config / "oracle" / "keys" if where == "default" else outside_tmp / "mine"
    made = cli("keys", "new", *(["--out", str(keys)] if where == "explicit" else []))
    assert made.returncode == 0, made.stdout + made.stderr
    assert (keys / "oracle.key").stat().st_mode & 0o777 == 0o600
    assert (keys.stat().st_mode & 0o777) == 0o700
    assert b"PRIVATE KEY" in (keys / "oracle.key").read_bytes()
    around = keys.parent  # bound back: the agent's program lives there
    (around / "visible.txt").write_text("the folder around is readable\n")
    peek = around / "peek"
    peek.write_text(
        "#!/bin/sh\n"
        f"ls -A {keys}; cat {keys}/oracle.key; cat {around}/visible.txt; "
        f"grep -rl PRIVATE {config} {outside_tmp}; echo looked\n"
    )
    peek.chmod(0o755)
    matrix = write_matrix(
        outside_tmp, tasks=EMBEDDED[0], harnesses=f'peek = {{agent = "cmd:{peek}"}}'
    )
    key_args = ["--key", str(keys / "oracle.key")] if where == "explicit" else []
    ran = cli("matrix", "run", str(matrix), "--out", "run", *key_args)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 cells: 1 run now, 0 kept from before, 0 invalid" in ran.stdout
    pub = ["--key", str(keys / "oracle.pub")] if where == "explicit" else []
    reduced = cli("reduce", "run", "--expect", str(matrix), "--out", "report", *pub)
    assert reduced.returncode == 0, reduced.stdout + reduced.stderr
    checked = cli("report", "verify", "report", *pub)
    assert checked.returncode == 0 and "verified report" in checked.stdout, checked.stdout
    from oracle.base.signing import load_public_key

    verified = verify_run(
        outside_tmp / "run",
        expected_from(load_matrix(matrix)),
        load_public_key(keys / "oracle.pub"),
    )
    (cell,) = verified.cells
    record = cell.record
    seen = record.final_message or ""
    assert record.autonomy_achieved is True, record.autonomy_reason
    assert seen.endswith("looked")
    assert "the folder around is readable" in seen  # the configuration folder is visible
    assert "PRIVATE KEY" not in seen and "oracle.key" not in seen and "oracle.pub" not in seen
    assert record.invocation is not None
    assert str(keys.resolve()) in record.invocation.hidden


def test_a_key_inside_the_run_folder_is_refused(tmp_path: Path):
    path = write_matrix(tmp_path, tasks=EMBEDDED[0])
    key = new_key()
    write_key_pair(key, tmp_path / "run" / "keys" / "k.key", tmp_path / "run" / "keys" / "k.pub")
    with pytest.raises(MatrixError) as info:
        run_matrix(load_matrix(path), tmp_path / "run", key, key_path=tmp_path / "run/keys/k.key")
    assert "is inside the run folder" in str(info.value)
    assert not (tmp_path / "run" / "cells").exists()
