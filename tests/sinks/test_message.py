"""Parsing one message: headers decoded and unfolded, parts and attachments, nothing raised."""

from __future__ import annotations

from email.message import EmailMessage

from oracle.sinks.message import parse_message


def test_encoded_words_and_folded_headers_read_as_text():
    raw = (
        b"From: =?utf-8?q?J=C3=BCrgen?= <jurgen@example.test>\r\n"
        b"To: a@example.test,\r\n b@example.test\r\n"
        b"Subject: =?utf-8?b?UmVjaG51bmcgZsO8ciBNw6Ryeg==?=\r\n"
        b"X-Long: first half\r\n second half\r\n"
        b"\r\n"
        b"body\r\n"
    )
    m = parse_message(raw)
    assert m.subject == "Rechnung für März"
    assert m.header("from") == "Jürgen <jurgen@example.test>"
    assert m.header("x-long") == "first half second half"
    assert m.to == ["a@example.test", "b@example.test"]
    assert m.sender == ["jurgen@example.test"]


def test_attachment_names_in_either_encoding_are_decoded():
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@x.test", "b@y.test", "files"
    msg.set_content("see attached")
    msg.add_attachment(
        b"\x00\x01", maintype="application", subtype="octet-stream", filename="überweisung.bin"
    )  # RFC 2231 by the modern policy
    raw = msg.as_bytes()
    # and as a client that puts an encoded word in the parameter writes it:
    legacy = raw.replace(
        b"filename*=utf-8''%C3%BCberweisung.bin", b'filename="=?utf-8?q?=C3=BCberweisung.bin?="'
    )
    for data in (raw, legacy):
        (att,) = parse_message(data).attachments()
        assert att.filename == "überweisung.bin"
        assert att.data() == b"\x00\x01"
    assert legacy != raw


def test_header_bytes_that_are_not_utf8_are_kept_readable():
    m = parse_message(b"Subject: caf\xe9\r\nTo: b@y.test\r\n\r\nx\r\n")
    assert m.subject == "caf\ufffd"
    assert m.raw() == b"Subject: caf\xe9\r\nTo: b@y.test\r\n\r\nx\r\n"
