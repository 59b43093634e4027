"""Which account each exposed endpoint admits, read from the URLs the agent is handed."""

from __future__ import annotations

import pytest

from oracle.proxies.gate import Account, GateError, login_gates


def test_each_database_endpoint_admits_the_accounts_its_urls_name():
    env = {
        "ORACLE_DB_URL_A": "postgresql+psycopg://oracle_pgr_a:pw@127.0.0.1:5432/oracle_pgdb_a",
        "ORACLE_DSN_A": "postgresql://oracle_pgr_a:pw@127.0.0.1:5432/oracle_pgdb_a",
        "ORACLE_DSN_B": "postgresql://oracle_pgr_b:pw@127.0.0.1:5432/oracle_pgdb_b",
        "ORACLE_DB_URL_SHOP": "mariadb+pymysql://oracle_myu_1:pw@127.0.0.1:3306/oracle_mydb_1",
        "ORACLE_REDIS_URL_CACHE": "redis://oracle-rd-1:pw@127.0.0.1:6379/3",
        "ORACLE_REDIS_URL_OLD": "redis://:only-a-password@127.0.0.1:6380/1",
        "ORACLE_DB_URL_LITE": "sqlite:////tmp/x.sqlite",
        "ORACLE_AMQP_URL_BUS": "amqp://guest:guest@127.0.0.1:5672/%2F",
        "HTTP_PROXY": "http://127.0.0.1:8123",
    }
    gates = login_gates(env)
    assert sorted(gates) == [
        ("127.0.0.1", 3306),
        ("127.0.0.1", 5432),
        ("127.0.0.1", 6379),
        ("127.0.0.1", 6380),
    ]
    pg = gates[("127.0.0.1", 5432)]
    assert pg.protocol == "postgresql"
    assert pg.accounts == {
        Account("oracle_pgr_a", "oracle_pgdb_a"),
        Account("oracle_pgr_b", "oracle_pgdb_b"),
    }
    # Each role on its own database only: not on the other sandbox's, not on postgres.
    assert pg.admits("oracle_pgr_a", "oracle_pgdb_a")
    assert not pg.admits("oracle_pgr_a", "oracle_pgdb_b")
    assert not pg.admits("postgres", "oracle_pgdb_a")
    assert gates[("127.0.0.1", 3306)].users == {"oracle_myu_1"}
    assert gates[("127.0.0.1", 6379)].users == {"oracle-rd-1"}
    assert gates[("127.0.0.1", 6380)].users == {"default"}  # a password alone: the default user


def test_a_url_without_a_user_gives_no_gate_and_a_database_defaults_to_the_user():
    gates = login_gates(
        {
            "ORACLE_DB_URL_X": "postgresql://127.0.0.1:5433/x",
            "ORACLE_DSN_Y": "postgresql://someone@127.0.0.1:5434",
        }
    )
    assert ("127.0.0.1", 5433) not in gates
    assert gates[("127.0.0.1", 5434)].accounts == {Account("someone", "someone")}


def test_one_endpoint_handed_out_as_two_protocols_is_an_error():
    env = {
        "ORACLE_DB_URL_A": "postgresql://a:pw@127.0.0.1:7000/a",
        "ORACLE_REDIS_URL_B": "redis://b:pw@127.0.0.1:7000/1",
    }
    with pytest.raises(GateError, match=r"127\.0\.0\.1:7000 is handed out as PostgreSQL and as"):
        login_gates(env)


def test_the_refusal_names_the_sandboxs_account():
    (gate,) = login_gates({"ORACLE_DSN_A": "postgresql://oracle_pgr_a:pw@127.0.0.1/db_a"}).values()
    assert gate.refusal("PostgreSQL login as 'postgres'") == (
        "PostgreSQL login as 'postgres' refused: the sandbox's account is 'oracle_pgr_a' on "
        "database 'db_a'"
    )
