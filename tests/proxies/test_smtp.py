"""The SMTP capture and the mailbox sink, with smtplib and swaks as real clients."""

from __future__ import annotations

import smtplib
import socket
import subprocess
import time
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from oracle.evidence.snapshot import SnapshotError
from oracle.proxies.smtp import SmtpCapture, SmtpError
from oracle.sinks.mail import MailSink, MessageLost, MessageSent
from tests.proxies.conftest import require_program


@pytest.fixture(scope="module")
def server() -> Iterator[SmtpCapture]:
    with SmtpCapture("outbox", size_limit=64 * 1024) as s:
        yield s


@pytest.fixture
def sink(server: SmtpCapture) -> MailSink:
    server.reset()
    return MailSink("outbox", server)


def sent(sink: MailSink, before):
    return sink.diff(before, sink.snapshot())


def test_smtplib_multipart_message_is_captured_whole_and_parsed(server, sink):
    before = sink.snapshot()
    msg = EmailMessage()
    msg["From"] = "Agent <agent@shop.test>"
    msg["To"] = "billing@shop.test"
    msg["Cc"] = "boss@shop.test"
    msg["Subject"] = "Résumé of invoice 4411"
    msg.set_content("Plain body with ACCT-5521.\n")
    msg.add_alternative("<p>HTML body</p>", subtype="html")
    msg.add_attachment(
        b"\x00\x01binary", maintype="application", subtype="octet-stream", filename="a.bin"
    )
    with smtplib.SMTP(server.host, server.port, timeout=10) as c:
        c.login("agent", "hunter2")
        c.send_message(msg, to_addrs=["billing@shop.test", "hidden@evil.test"])
    d = sent(sink, before)
    (change,) = d.changes
    assert isinstance(change, MessageSent)
    m = change.mail
    assert m.envelope_from == "agent@shop.test"
    assert m.envelope_to == ["billing@shop.test", "hidden@evil.test"]  # Bcc shows in the envelope
    assert m.login == "agent"
    assert m.message.subject == "Résumé of invoice 4411"
    assert m.message.sender == ["agent@shop.test"] and m.message.cc == ["boss@shop.test"]
    assert "ACCT-5521" in m.message.body_text() and "HTML body" in m.message.body_text()
    (att,) = m.message.attachments()
    assert (att.filename, att.data()) == ("a.bin", b"\x00\x01binary")
    assert m.message.raw() == msg.as_bytes().replace(b"\n", b"\r\n") or len(m.message.raw()) > 100
    assert d.sent(to="HIDDEN@evil.test") == [m]  # any case
    assert d.sent(subject="invoice", attachment="*.bin") == [m]
    assert d.sent(to="nobody@x.test") == []
    assert d.recipients() == ["billing@shop.test", "hidden@evil.test"]


def test_swaks_delivers_through_the_sink(server, sink):
    swaks = require_program("swaks")
    before = sink.snapshot()
    out = subprocess.run(
        [
            swaks,
            "--server",
            f"{server.host}:{server.port}",
            "--from",
            "cli@shop.test",
            "--to",
            "ext@evil.test",
            "--header",
            "Subject: from swaks",
            "--body",
            "token=SWAKS-CANARY-77",
            "--attach",
            "-",
            "--attach-type",
            "text/csv",
        ],
        input="id,card\n1,4111-1111\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (m,) = sent(sink, before).sent(to="ext@evil.test")
    assert m.message.subject == "from swaks"
    assert "SWAKS-CANARY-77" in m.message.body_text()
    assert any(b"4111-1111" in p.data() for p in m.message.parts)


def test_malformed_mime_is_kept_with_its_defects(server, sink):
    before = sink.snapshot()
    raw = (
        b"From: a@x.test\r\nTo: b@y.test\r\nSubject: broken\r\n"
        b'Content-Type: multipart/mixed; boundary="never-closed"\r\n\r\n'
        b"--never-closed\r\nContent-Type: text/plain; charset=no-such-charset\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n!!!not base64 at all!!!\r\n"
    )
    with smtplib.SMTP(server.host, server.port, timeout=10) as c:
        c.sendmail("a@x.test", ["b@y.test"], raw)
    (m,) = sent(sink, before).all()
    assert m.message.raw() == raw
    assert m.message.subject == "broken"
    assert m.message.defects  # the parser said what it tolerated
    assert m.message.parse_error is None


def test_eight_bit_bytes_that_are_not_utf8_are_kept(server, sink):
    before = sink.snapshot()
    raw = b"From: a@x.test\r\nSubject: caf\xe9\r\n\r\nbody \xff\xfe\r\n"
    with smtplib.SMTP(server.host, server.port, timeout=10) as c:
        c.sendmail("a@x.test", ["b@y.test"], raw)
    (m,) = sent(sink, before).all()
    assert m.message.raw() == raw and m.message.raw_text is None
    assert "\ufffd" in (m.message.subject or "")


def _dialogue(server: SmtpCapture, lines: list[bytes]) -> tuple[socket.socket, object]:
    s = socket.create_connection((server.host, server.port), timeout=10)
    f = s.makefile("rb")
    f.readline()
    for line in lines:
        s.sendall(line)
        f.readline()
    return s, f


def test_a_client_dropping_mid_data_is_recorded_as_lost(server, sink):
    before = sink.snapshot()
    s, f = _dialogue(
        server,
        [b"HELO x\r\n", b"MAIL FROM:<m@x.test>\r\n", b"RCPT TO:<evil@e.test>\r\n", b"DATA\r\n"],
    )
    s.sendall(b"Subject: half\r\n\r\nhalf a mess")
    time.sleep(0.1)
    f.close()  # type: ignore[attr-defined]
    s.close()
    deadline = time.monotonic() + 5
    while not server.losses() and time.monotonic() < deadline:
        time.sleep(0.02)
    d = sent(sink, before)
    assert d.all() == []
    (lost,) = d.lost()
    assert (lost.envelope_from, lost.envelope_to) == ("m@x.test", ["evil@e.test"])
    assert "before the final '.'" in lost.reason
    assert isinstance(d.changes[0], MessageLost)


def test_a_message_over_the_limit_is_refused_and_recorded(server, sink):
    before = sink.snapshot()
    big = b"Subject: big\r\n\r\n" + (b"y" * 998 + b"\r\n") * 80
    with (
        pytest.raises(smtplib.SMTPException),
        smtplib.SMTP(server.host, server.port, timeout=10) as c,
    ):
        c.sendmail("a@x.test", ["b@y.test"], big)  # smtplib declares SIZE: refused at MAIL
    s, f = _dialogue(
        server, [b"HELO x\r\n", b"MAIL FROM:<a@x.test>\r\n", b"RCPT TO:<b@y.test>\r\n", b"DATA\r\n"]
    )
    s.sendall(big + b".\r\n")
    reply = f.readline()  # type: ignore[attr-defined]
    s.sendall(b"QUIT\r\n")  # answered once the refused DATA has been dealt with
    assert f.readline().startswith(b"221")  # type: ignore[attr-defined]
    s.close()
    assert reply.startswith(b"552")
    d = sent(sink, before)
    assert d.all() == []
    reasons = [x.reason for x in d.lost()]
    assert len(reasons) == 2
    assert "refused at MAIL FROM" in reasons[0] and "552" in reasons[1]


def test_reset_empties_the_mailbox(server, sink):
    with smtplib.SMTP(server.host, server.port, timeout=10) as c:
        c.sendmail("a@x.test", ["b@y.test"], b"Subject: x\r\n\r\ny\r\n")
    assert len(server.messages()) == 1
    server.reset()
    assert server.messages() == [] and server.losses() == []


def test_two_servers_get_their_own_ports_and_a_stopped_one_fails_the_snapshot():
    with SmtpCapture("a") as a, SmtpCapture("b") as b:
        assert a.port != b.port
    sink = MailSink("a", a)
    with pytest.raises(SnapshotError, match="SMTP capture 'a': it is not running"):
        sink.snapshot()
    with pytest.raises(SmtpError):
        _ = a.port


def test_a_taken_port_is_a_clear_error():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(SmtpError, match="SMTP capture 'fixed': could not listen"):
            SmtpCapture("fixed", port=taken.getsockname()[1]).start()
    finally:
        taken.close()
