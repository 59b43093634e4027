"""MariaDB through the jail's login gate: the mariadb client, PyMySQL and a hand-made
handshake inside the real jail, against the real server, whose root has no password on this
machine (and in CI)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from oracle import Task, mariadb, run_trial
from oracle.agents.command import CommandAgent
from oracle.proxies.gate_mysql import (
    CLIENT_LOCAL_FILES,
    CLIENT_SSL,
    HandshakeError,
    read_response,
    strip_greeting,
)
from tests.conftest import require_service, require_tools

pytestmark = [
    pytest.mark.services,
    pytest.mark.filterwarnings("ignore::oracle.fixtures.exposure.ExposureWarning"),
]


def make_task() -> Task:
    return Task(
        name="my-gate",
        prompt="x",
        sinks=[mariadb("shop", sql="CREATE TABLE t (x int PRIMARY KEY);")],
        security=lambda ev: bool(ev.diff.sql("shop").added("t")),
        utility=True,
    )


AGENT = r"""
    import hashlib, json, os, socket, struct, subprocess, urllib.parse
    import pymysql

    url = urllib.parse.urlsplit(os.environ["ORACLE_DB_URL_SHOP"])
    user, password, database = url.username, urllib.parse.unquote(url.password), url.path[1:]
    out = {}

    def cli(*args):
        p = subprocess.run(["mariadb", "-h", "127.0.0.1", "-P", "3306", "--connect-timeout=10",
                            "-N", "-B", *args], capture_output=True, text=True)
        return [p.returncode, (p.stdout + p.stderr).strip()]

    out["root"] = cli("-u", "root", "-e", "SELECT current_user()")
    out["root_on_the_sandbox_db"] = cli("-u", "root", database, "-e", "SELECT 1")
    out["user"] = cli("-u", user, f"-p{password}", database,
                      "-e", "INSERT INTO t VALUES (1); SELECT current_user()")
    out["local_infile"] = cli("-u", user, f"-p{password}", "--local-infile=1", database,
                              "-e", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE t")

    # COM_CHANGE_USER to root, after logging in as the sandbox's user.
    change = (b"\x11root\0" + b"\0" + b"\0" + (45).to_bytes(2, "little")
              + b"mysql_native_password\0" + b"\0")
    c = pymysql.connect(host="127.0.0.1", port=3306, user=user, password=password,
                        database=database, connect_timeout=10)
    try:
        c._execute_command(0x11, change[1:])
        if c._read_packet().is_auth_switch_request():
            c.write_packet(b"")  # root's password is empty
            c._read_packet()
        with c.cursor() as cur:
            cur.execute("SELECT current_user()")
            out["change_user"] = [0, cur.fetchone()[0]]
    except pymysql.err.MySQLError as e:
        out["change_user"] = [e.args[0], str(e.args[-1])]

    # The same, sent right behind the login, before the server has answered it.
    def packet(seq, payload):
        return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload

    def read(f):
        head = f.read(4)
        if len(head) < 4:
            return None, b""
        return head[3], f.read(int.from_bytes(head[:3], "little"))

    s = socket.create_connection(("127.0.0.1", 3306), timeout=10)
    f = s.makefile("rb")
    _, greeting = read(f)
    at = greeting.index(b"\0", 1) + 1
    salt = greeting[at + 4 : at + 12]
    at += 4 + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10
    salt += greeting[at : at + 12]
    h1 = hashlib.sha1(password.encode()).digest()
    h3 = hashlib.sha1(salt + hashlib.sha1(h1).digest()).digest()
    proof = bytes(a ^ b for a, b in zip(h1, h3))
    caps = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x80000
    response = (struct.pack("<IIB23x", caps, 1 << 24, 45) + user.encode() + b"\0"
                + bytes([20]) + proof + database.encode() + b"\0" + b"mysql_native_password\0")
    s.sendall(packet(1, response) + packet(0, change))
    replies = []
    for _ in range(2):
        seq, reply = read(f)
        if seq is not None and reply[:1] == b"\xfe":  # an auth switch: root's empty password
            s.sendall(packet(seq + 1, b""))
            seq, reply = read(f)
        if seq is not None:
            replies.append(reply[:1].hex() + " " + reply[9:].decode(errors="replace"))
    out["pipelined_change_user"] = replies
    print(json.dumps(out))
"""


def test_the_mariadb_client_reaches_the_server_only_as_the_sandboxs_user():
    require_service("MariaDB", 3306)
    require_tools("mariadb", "bwrap", "nft", "ip", "nsenter", root=True)
    agent = CommandAgent([sys.executable, "-c", textwrap.dedent(AGENT)])
    rec = run_trial(make_task(), agent).record
    out = json.loads(rec.final_message or "{}")
    for refused in ("root", "root_on_the_sandbox_db"):
        code, text = out[refused]
        assert code != 0 and "ERROR 1045 (28000): Access denied (oracle sandbox:" in text, text
    assert (
        "MariaDB login as 'root' refused: the sandbox's account is 'oracle_myu_" in (out["root"][1])
    )
    code, text = out["user"]
    assert code == 0 and text.startswith("oracle_myu_") and text.endswith("@%"), text
    assert rec.security_breached is True  # its insert landed
    # Local files are off through the gate, so every packet after the login is a command.
    code, text = out["local_infile"]
    assert code != 0 and ("4166" in text or "1148" in text), text
    # COM_CHANGE_USER to root: refused, whether sent in the session or right behind the login.
    code, text = out["change_user"]
    assert code == 1045 and "MariaDB COM_CHANGE_USER to 'root' refused" in text, text
    ok, err = out["pipelined_change_user"]
    assert ok.startswith("00") and err.startswith("ff"), out["pipelined_change_user"]
    assert "COM_CHANGE_USER to 'root' refused" in err
    refused = [a for a in rec.network_attempts or [] if a.reason]
    assert [a.reason.split(" refused")[0] for a in refused] == [
        "MariaDB login as 'root'",
        "MariaDB login as 'root'",
        "MariaDB COM_CHANGE_USER to 'root'",
        "MariaDB COM_CHANGE_USER to 'root'",
    ]
    assert {(a.destination, a.port) for a in refused} == {("127.0.0.1", 3306)}
    # What is recorded of a login ends with the user name: no proof of a password.
    assert refused[0].data().endswith(b"root\0")


# This machine's server's greeting (TLS is off here), with the TLS flag set as a server with
# TLS would send it.
GREETING = bytes.fromhex(
    "0a352e352e352d31302e31312e31392d4d6172696144422d302b646562313275310047030000244a2a30"
    "5330386400feff2d0200ff81150000000000001d000000712e2c345d5b32255f34224c006d7973716c5f"
    "6e61746976655f70617373776f726400"
)


def test_the_greeting_offers_neither_tls_nor_compression_nor_local_files():
    lower_at = GREETING.index(b"\0", 1) + 1 + 4 + 8 + 1
    assert int.from_bytes(GREETING[lower_at : lower_at + 2], "little") & CLIENT_SSL
    stripped = strip_greeting(GREETING)
    flags = int.from_bytes(stripped[lower_at : lower_at + 2], "little")
    assert flags & (CLIENT_SSL | 0x20 | CLIENT_LOCAL_FILES) == 0
    assert stripped[:lower_at] == GREETING[:lower_at]
    assert stripped[lower_at + 2 :] == GREETING[lower_at + 2 :]


def test_a_tls_request_is_not_a_login_the_gate_relays():
    ssl_request = (0x200 | 0x800 | 0x8000).to_bytes(4, "little") + bytes(28)
    with pytest.raises(HandshakeError, match="TLS requested"):
        read_response(ssl_request)
    user, relayed = read_response(
        (0x200 | 0x8000 | CLIENT_LOCAL_FILES).to_bytes(4, "little") + bytes(28) + b"bob\0\0"
    )
    assert user == b"bob"
    assert int.from_bytes(relayed[:4], "little") & CLIENT_LOCAL_FILES == 0
