"""SMTP capture: messages captured per second, against aiosmtpd discarding them.

A client process sends BATCH small messages (a text part and a 2 KiB attachment, serialised
beforehand) over one SMTP session with smtplib and times the batch; the servers run in this
process:

- ours: `SmtpCapture` (keeps every message whole, records what arrives broken);
- aiosmtpd_discard: aiosmtpd's controller with a handler that accepts and drops messages, the
  floor of the same server library.

``parse`` (extra) is the mailbox sink's snapshot of the captured batch: each message parsed
with the `email` package (headers, parts, attachments), per message.
"""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
import textwrap
import time

from aiosmtpd.controller import Controller
from common import Result, Timing, repeats_of, result, sized

from oracle.proxies.smtp import SmtpCapture, free_port
from oracle.sinks.mail import MailSink

NAME = "SMTP capture: messages per second"
GOAL = "≥ 500 messages/s captured"
BATCH = 500
QUICK_BATCH = 50
REPEATS = 5

CLIENT = textwrap.dedent(
    """
    import json, smtplib, sys, time
    from email.message import EmailMessage
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    msgs = []
    for i in range(n):
        m = EmailMessage()
        m["From"], m["To"], m["Subject"] = "a@x.test", "b@y.test", f"message {i}"
        m.set_content(f"hello {i}\\n" * 20)
        data = bytes(range(256)) * 8
        m.add_attachment(data, maintype="application", subtype="octet-stream", filename="a.bin")
        msgs.append(m.as_bytes().replace(b"\\n", b"\\r\\n"))  # serialised before timing
    with smtplib.SMTP(host, port, timeout=30) as s:
        s.sendmail("a@x.test", ["b@y.test"], msgs[0])
        t0 = time.perf_counter()
        for m in msgs:
            s.sendmail("a@x.test", ["b@y.test"], m)
        dt = time.perf_counter() - t0
    print(json.dumps(dt))
    """
)


class _Discard:
    async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
        return "250 OK"


def _batch(host: str, port: int, batch: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, host, str(port), str(batch)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    seconds: float = json.loads(out.stdout)
    return seconds / batch


def run(profiler: cProfile.Profile | None = None) -> Result:
    batch, repeats = sized(BATCH, QUICK_BATCH), repeats_of(REPEATS)
    ours, floor, parse = Timing(), Timing(), Timing()
    with SmtpCapture("bench") as capture:
        sink = MailSink("bench", capture)
        for _ in range(repeats):
            capture.reset()
            ours.samples.append(_batch(capture.host, capture.port, batch))
            assert len(capture.messages()) == batch + 1 and not capture.losses()
            t0 = time.perf_counter()
            state = sink.snapshot().state
            parse.samples.append((time.perf_counter() - t0) / len(state.accepted))
            assert all(len(m.message.attachments()) == 1 for m in state.accepted)
    port = free_port()
    controller = Controller(_Discard(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        for _ in range(repeats):
            floor.samples.append(_batch("127.0.0.1", port, batch))
    finally:
        controller.stop()
    rate = 1 / ours.median
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"aiosmtpd_discard": floor},
        extra={"parse": parse},
        checks={"≥ 500 messages/s": rate >= 500},
        params={
            "batch": batch,
            "repeats": repeats,
            "messages_per_s": round(rate, 1),
            "floor_messages_per_s": round(1 / floor.median, 1),
            "parse_messages_per_s": round(1 / parse.median, 1),
        },
        notes="times are seconds per message (batch time / batch size); rate = 1 / median",
    )
