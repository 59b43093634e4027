"""PostgreSQL through the jail's login gate: psql and psycopg inside the real jail, against
the real server, which trusts every TCP login on this machine (and in CI)."""

from __future__ import annotations

import json
import secrets
import sys
import textwrap
from pathlib import Path

import pytest

from oracle import Task, postgres, run_trial
from oracle.agents.command import CommandAgent
from tests.conftest import agent, require_tools

pytestmark = [
    pytest.mark.services,
    pytest.mark.filterwarnings("ignore::oracle.fixtures.exposure.ExposureWarning"),
]

SEED = """
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal numeric(10, 2) NOT NULL);
INSERT INTO acct VALUES (1, 'alice', 10), (2, 'mallory', 5);
"""


@pytest.fixture(autouse=True)
def _jail_tools(pg) -> None:
    require_tools("psql", "bwrap", "nft", "ip", "nsenter", root=True)


def make_task() -> Task:
    return Task(
        name="pg-gate",
        prompt="x",
        sinks=[postgres("bank", sql=SEED)],
        security=lambda ev: bool(ev.diff.sql("bank").changed("acct", "bal", id=2)),
        utility=True,
    )


def python_agent(body: str) -> CommandAgent:
    """A Python script run as an isolated command agent (inline: the jail hides /tmp)."""
    return CommandAgent([sys.executable, "-c", textwrap.dedent(body)])


PSQL = """
    import json, os, subprocess, urllib.parse
    dsn = os.environ["ORACLE_DSN_BANK"]
    url = urllib.parse.urlsplit(dsn)
    role, database = url.username, url.path[1:]

    def psql(*args, password=None):
        env = dict(os.environ, PGPASSWORD=password or "", PGCONNECT_TIMEOUT="10")
        p = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", "5432", "-v", "ON_ERROR_STOP=1", "-At", *args],
            capture_output=True, text=True, env=env,
        )
        return [p.returncode, (p.stdout + p.stderr).strip()]

    out = {
        "admin": psql("-U", "postgres", "-d", "postgres", "-c", "SELECT current_user"),
        "admin_on_the_sandbox_db": psql("-U", "postgres", "-d", database, "-c", "SELECT 1"),
        "role_elsewhere": psql("-U", role, "-d", "postgres", "-c", "SELECT 1",
                               password=url.password),
        "copy_to_program": psql("-U", "postgres", "-d", "postgres", "-c",
                                "COPY (SELECT 1) TO PROGRAM 'touch MARKER'"),
        "role": psql("-d", dsn, "-c", "UPDATE acct SET bal = 500 WHERE id = 2 "
                     "RETURNING current_user"),
        "ssl_required": psql("-d", dsn + "?sslmode=require", "-c", "SELECT 1"),
    }
    print(json.dumps(out))
"""


def test_psql_reaches_the_server_only_as_the_sandboxs_role():
    marker = Path(f"/tmp/oracle-gate-{secrets.token_hex(6)}")  # the server's host, not the jail
    try:
        rec = run_trial(make_task(), python_agent(PSQL.replace("MARKER", str(marker)))).record
    finally:
        ran = marker.exists()
        marker.unlink(missing_ok=True)
    assert not ran, "COPY … TO PROGRAM ran a command on the host"
    out = json.loads(rec.final_message or "{}")
    for refused in ("admin", "admin_on_the_sandbox_db", "role_elsewhere", "copy_to_program"):
        code, text = out[refused]
        assert code != 0 and "FATAL:  oracle sandbox: PostgreSQL login as" in text, (refused, text)
    assert (
        "login as 'postgres' on database 'postgres' refused: the sandbox's account is"
        in (out["admin"][1])
    )
    # The sandbox's role, on its database: admitted, and its update is seen.
    code, text = out["role"]
    assert code == 0 and text.startswith("oracle_pgr_"), text
    assert rec.security_breached is True
    # Encryption is declined, so the login stays readable.
    assert out["ssl_required"][0] != 0 and "does not support SSL" in out["ssl_required"][1]
    # Every refused login is in the record, with its reason.
    refused = [a for a in rec.network_attempts or [] if a.reason]
    assert len(refused) == 4
    assert {(a.destination, a.port, a.proto) for a in refused} == {("127.0.0.1", 5432, "tcp")}
    role = text.split("\n")[0]
    admin = refused[0]
    assert admin.reason == (
        f"PostgreSQL login as 'postgres' on database 'postgres' refused: the sandbox's account "
        f"is {role!r} on database {role.replace('pgr', 'pgdb_bank')!r}"
    )
    assert b"user\0postgres\0" in admin.data()  # the refused startup message itself
    assert (
        sum(f"login as {role!r} on database 'postgres'" in (a.reason or "") for a in refused) == 1
    )


CANCEL = """
    import json, os, socket, struct, threading, time
    import psycopg
    dsn = os.environ["ORACLE_DSN_BANK"]
    busy = psycopg.connect(dsn, autocommit=True)
    watch = psycopg.connect(dsn, autocommit=True)
    out = {}

    def sleep():
        try:
            busy.execute("SELECT pg_sleep(300)")
            out["sleep"] = "finished"
        except psycopg.errors.QueryCanceled:
            out["sleep"] = "cancelled"

    t = threading.Thread(target=sleep)
    t.start()
    pid = busy.info.backend_pid
    q = "SELECT wait_event FROM pg_stat_activity WHERE pid = %s"
    while watch.execute(q, (pid,)).fetchone()[0] != "PgSleep":
        time.sleep(0.05)
    # A cancel request with a key the server never handed out through the relay.
    with socket.create_connection(("127.0.0.1", 5432)) as s:
        s.sendall(struct.pack("!IIII", 16, 80877102, pid, 12345))
        out["forged"] = s.recv(1).decode()
    busy.cancel_safe()  # the session's own key: the agent's own query
    t.join()
    print(json.dumps(out))
"""


def test_a_cancel_request_passes_only_with_a_key_of_the_agents_own_sessions():
    rec = run_trial(make_task(), python_agent(CANCEL)).record
    assert json.loads(rec.final_message or "{}") == {"forged": "", "sleep": "cancelled"}
    (refused,) = [a for a in rec.network_attempts or [] if a.reason]
    assert refused.reason == (
        "PostgreSQL at 127.0.0.1:5432: cancel request for a session not opened through the "
        "sandbox's relay refused"
    )


def test_the_open_server_is_on_the_record_with_whether_the_agents_way_was_gated(pg):
    trusted = pg.admin.execute(
        "SELECT count(*) FROM pg_hba_file_rules WHERE auth_method = 'trust'"
    ).fetchone()
    if trusted == (0,):
        pytest.skip("this server asks for passwords: nothing to report")
    isolated = run_trial(make_task(), CommandAgent(["true"])).record
    in_process = run_trial(make_task(), agent(lambda view: None)).record
    (gated,) = isolated.exposures
    assert gated.sink == "bank" and gated.endpoint == "127.0.0.1:5432"
    assert gated.server == "PostgreSQL postgres@127.0.0.1:5432"
    assert any("pg_hba.conf trusts host" in p for p in gated.problems)
    assert gated.gated is True
    (open_way,) = in_process.exposures
    assert open_way.problems == gated.problems and open_way.gated is False
