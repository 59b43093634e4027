"""The rendezvous where scorers in a container connect back: real Unix sockets, real threads.

Only a connection that names an expected token is handed over, once; strangers, silent and
oversized greetings are closed without holding up the one that is awaited; and what a scorer
says right after its greeting stays in the channel for its reader."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from oracle.scoring.protocol import (
    ChannelClosed,
    ChannelTimeout,
    Rendezvous,
    connect_back,
    receive,
    send,
)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed `sock` (reads until then, for at most 30 s)."""
    sock.settimeout(30)
    try:
        while chunk := sock.recv(4096):
            del chunk
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_the_awaited_channel_is_handed_over_with_what_followed_its_greeting(tmp_path):
    with Rendezvous(tmp_path) as meeting:
        token = meeting.expect()
        # The greeting and the next message in one write, as a fast process sends them.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(meeting.path))
            hello = b'{"op":"hello","token":"%s","blobs":[]}' % token.encode()
            ready = b'{"op":"ready","blobs":[5]}'
            raw.sendall(
                struct.pack("!I", len(hello))
                + hello
                + struct.pack("!I", len(ready))
                + ready
                + b"12345"
            )
            chan = meeting.wait(token, time.monotonic() + 30)
            try:
                header, blobs = receive(chan, time.monotonic() + 30)
                assert header == {"op": "ready"} and blobs == [b"12345"]
                send(chan, {"op": "go"})
                assert receive(raw, time.monotonic() + 30)[0] == {"op": "go"}
            finally:
                chan.close()


def test_strangers_get_nothing_and_do_not_hold_up_the_awaited_process(tmp_path):
    with Rendezvous(tmp_path, greeting=0.5) as meeting:
        token = meeting.expect()
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(meeting.path))
        wrong = connect_back(str(meeting.path), "0" * 32)
        huge = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        huge.connect(str(meeting.path))
        huge.sendall(struct.pack("!I", 1 << 20))
        awaited = connect_back(str(meeting.path), token)
        chan = meeting.wait(token, time.monotonic() + 30)
        try:
            send(awaited, {"op": "ready"})
            assert receive(chan, time.monotonic() + 30)[0] == {"op": "ready"}
            # The token is spent: a second process naming it gets nothing.
            again = connect_back(str(meeting.path), token)
            for stranger in (wrong, huge, again, silent):
                assert closed_by_peer(stranger)
                stranger.close()
        finally:
            chan.close()
            awaited.close()


def test_waiting_ends_when_no_one_comes_or_the_process_is_gone(tmp_path):
    with Rendezvous(tmp_path) as meeting:
        token = meeting.expect()
        with pytest.raises(ChannelTimeout):
            meeting.wait(token, time.monotonic() + 0.3)
        token = meeting.expect()
        with pytest.raises(ChannelClosed, match="ended before it connected"):
            meeting.wait(token, time.monotonic() + 30, alive=lambda: False)
    assert not (tmp_path / "scorer.sock").exists()
