"""The oracle's own MariaDB connections: plain text to a loopback server (no SSL context built
per connection), PyMySQL's preferred TLS to any other host."""

from __future__ import annotations

import ssl

import pytest

from oracle import Sandbox, Task, mariadb, run_trial
from oracle.sinks import my_connect
from oracle.sinks.my_connect import connect_args, engine_connect_args, is_loopback
from tests.conftest import agent


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        (None, True),
        ("", True),
        ("192.0.2.10", False),
        ("db.example.test", False),
        ("localhost.example.test", False),
        ("::ffff:192.0.2.10", False),
    ],
)
def test_only_this_machines_loopback_counts(host, loopback):
    assert is_loopback(host) is loopback
    assert connect_args(host) == ({"ssl_disabled": True} if loopback else {})


def test_engine_args_follow_the_url():
    assert engine_connect_args("mariadb+pymysql://u:p@127.0.0.1:3306/shop") == {
        "ssl_disabled": True
    }
    assert engine_connect_args("mysql://u@db.example.test/shop") == {}
    assert engine_connect_args("postgresql://u@127.0.0.1/shop") == {}
    assert engine_connect_args("sqlite:///x.db") == {}


SEED = "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1);"


@pytest.mark.services
def test_a_trial_on_a_loopback_server_builds_no_ssl_context(maria, monkeypatch):
    """Reset, snapshots, account checks and the view's own client: none asks PyMySQL for TLS
    (each would cost an SSL context with the system's CAs, 30-40 ms)."""
    made: list[str] = []
    real = ssl.create_default_context

    def counted(*args, **kwargs):
        made.append("context")
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    task = Task(
        name="my-plain",
        prompt="x",
        sinks=[mariadb("db", sql=SEED)],
        utility=lambda ev: len(ev.diff.sql("db").changed("t", "v")) == 1,
        security=False,
    )
    with Sandbox(task) as sb:
        result = run_trial(task, agent(lambda v: v.sql("db", "UPDATE t SET v = 2")), sandbox=sb)
    assert result.record.error is None
    assert result.record.utility_achieved is True
    assert made == []
    # Taken for another host, the same sandbox asks for TLS (preferred: the server offers
    # none, so it goes on in plain text): the count above would see it.
    monkeypatch.setattr(my_connect, "is_loopback", lambda host: False)
    with Sandbox(task) as sb:
        sb.reset()
    assert made
