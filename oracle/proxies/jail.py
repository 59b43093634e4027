"""A network namespace whose only ways out are the services a task exposes.

`NetworkJail` makes a fresh network namespace for one run of an agent. Inside it:

- the loopback interface, where the exposed services (the egress recorder, the SMTP sink, the
  task's databases) are reachable at the same ``127.0.0.1:<port>`` as on the host (and at
  ``[::1]:<port>``, where a client tries ``localhost`` first), through relays that the harness
  runs (a relay listens inside the namespace and connects out from the host's);
- a default route onto the loopback, and nftables rules that redirect every other TCP
  connection and UDP datagram — to any address, loopback included: another port of
  ``127.0.0.1``, the rest of ``127.0.0.0/8``, ``[::1]`` — and every DNS query, to a trap. The
  trap records the destination, the port, the time and the first bytes sent, then closes: a
  program that ignores the proxy variables reaches nothing, and its attempt is state, not
  silence;
- nothing else: a host service the task does not expose is simply not there (the namespace has
  its own loopback).

A program may still talk to itself: a TCP connection to a local address (loopback, or the
namespace's own) where one of its own processes listens is passed on to that listener, and
not recorded — the trap tries the original destination first, from a socket the rules let
through (a mark only the harness can set), and records only when nothing answers there.

A relay to a database server for which the sandbox hands the agent an account is a *login
gate* (`oracle.proxies.gate`): it reads the protocol's login and relays only that account's;
any other login is refused in the protocol's own words and recorded as an attempt, with the
reason.

It needs root (to make the namespace) and ``nft`` and ``ip`` on the PATH; without them it
raises `JailError` saying which. Processes join it through `command_prefix()` (``nsenter``).

Example::

    with NetworkJail(expose=[("127.0.0.1", 8080)]) as jail:
        subprocess.run([*jail.command_prefix(), "curl", "http://93.184.216.34/"],
                       pass_fds=jail.pass_fds)
    jail.attempts   # [Attempt(proto='tcp', destination='93.184.216.34', port=80, …)]
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

from oracle.evidence.attempt import Attempt as Attempt  # its home before oracle.evidence.attempt
from oracle.proxies.gate import Gate, LoginGate, close, splice
from oracle.proxies.gate_mysql import MysqlGate
from oracle.proxies.gate_postgres import PostgresGate
from oracle.proxies.gate_redis import RedisGate

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h; the same number for IPv6 (at SOL_IPV6)
SOL_IPV6 = socket.IPPROTO_IPV6  # the socket module names no SOL_IPV6; the level is the protocol
CAPTURE_LIMIT = 4096
#: The namespace's own address (the source of everything it sends off the loopback).
OWN_ADDRESS = "10.255.0.1"
#: The mark on the harness's own connections inside the namespace, which the rules let
#: through. Setting a mark needs CAP_NET_ADMIN, which the agent does not have.
HARNESS_MARK = 0x6F72
#: How long the trap waits to learn whether one of the program's own listeners is there.
LOCAL_PROBE_TIMEOUT = 2.0


class JailError(RuntimeError):
    """The network namespace could not be made. Says what is missing."""


def _parse_original_dst(raw: bytes, family: int) -> tuple[str, int]:
    if family == socket.AF_INET:
        port, addr = struct.unpack_from("!2xH4s", raw)
        return socket.inet_ntop(socket.AF_INET, addr), port
    port, addr = struct.unpack_from("!2xH4x16s", raw)
    return socket.inet_ntop(socket.AF_INET6, addr), port


def _dns_name(packet: bytes) -> str | None:
    try:
        labels, i = [], 12
        while packet[i]:
            n = packet[i]
            labels.append(packet[i + 1 : i + 1 + n].decode("ascii", "replace"))
            i += n + 1
        return ".".join(labels)
    except IndexError:
        return None


def _dns_refused(query: bytes) -> bytes | None:
    """A REFUSED answer to `query`, so resolvers fail at once instead of waiting."""
    if len(query) < 12:
        return None
    flags = struct.unpack_from("!H", query, 2)[0]
    answer_flags = 0x8000 | (flags & 0x7900) | 5  # QR, keep opcode and RD, RCODE=REFUSED
    return (
        query[:2]
        + struct.pack("!HHHHH", answer_flags, *struct.unpack_from("!H", query, 4), 0, 0, 0)
        + query[12:]
    )


def _loopback_up() -> None:
    """Bring up ``lo`` in the calling thread's network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack_from("16sH", fcntl.ioctl(s, siocgifflags, req))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def _local_destination(address: str) -> bool:
    """An address the namespace itself answers at (where the program may listen)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_loopback or address == OWN_ADDRESS


def _loopback_endpoint(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_GATES: dict[str, Callable[[LoginGate], Gate]] = {
    "postgresql": PostgresGate,
    "mysql": MysqlGate,
    "redis": RedisGate,
}


class NetworkJail:
    """A network namespace for one run (see the module docstring). A context manager.

    `gates` (from `oracle.proxies.gate.login_gates`) turn the relays of their endpoints into
    login gates; their endpoints are exposed too. `netns` names an existing, empty network
    namespace to set up instead of making one (``/proc/<pid>/ns/net`` of a container started
    with ``--network none``: `oracle.agents.container`)."""

    def __init__(
        self,
        expose: Iterable[tuple[str, int]] = (),
        *,
        gates: Mapping[tuple[str, int], LoginGate] | None = None,
        capture: int = CAPTURE_LIMIT,
        netns: str | None = None,
    ):
        self.netns = netns
        self.gates: dict[tuple[str, int], Gate] = {
            endpoint: _GATES[spec.protocol](spec) for endpoint, spec in (gates or {}).items()
        }
        self.expose = sorted({(h, p) for h, p in expose} | set(self.gates))
        for host, port in self.expose:
            if not _loopback_endpoint(host):
                raise JailError(f"only loopback services can be exposed, not {host}:{port}")
        self.capture = capture
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._ns_fd: int | None = None
        self._sockets: dict[str, socket.socket] = {}
        self._inside: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._datagrams: list[tuple[float, bool, bytes, int, int]] = []
        self._collected = False

    # -- set-up ---------------------------------------------------------------------------

    def __enter__(self) -> NetworkJail:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._ns_fd,) if self._ns_fd is not None else ()

    def command_prefix(self, *, of: int | None = None) -> list[str]:
        """Prefix a command with this, and pass `pass_fds`, to run it inside the namespace;
        or, with `of`, to run it from a process that was not handed the namespace's file but
        may read it through process `of` (this one, for a child started before the jail)."""
        if self._ns_fd is None:
            raise JailError("the jail is not open")
        return ["nsenter", f"--net=/proc/{of or 'self'}/fd/{self._ns_fd}", "--"]

    def open(self) -> None:
        for tool in ("ip", "nft", "nsenter"):
            if shutil.which(tool) is None:
                raise JailError(
                    f"network isolation needs `{tool}` on the PATH "
                    "(Debian: iproute2, nftables, util-linux)"
                )
        made: dict[str, object] = {}

        def make() -> None:  # runs in a thread that alone moves into the new namespace
            try:
                if self.netns is None:
                    os.unshare(os.CLONE_NEWNET)
                else:
                    fd = os.open(self.netns, os.O_RDONLY)
                    try:
                        os.setns(fd, os.CLONE_NEWNET)
                    finally:
                        os.close(fd)
                made["fd"] = os.open(
                    f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY
                )
                made["sockets"] = self._make_sockets()
            except BaseException as exc:
                made["error"] = exc

        t = threading.Thread(target=make, name="oracle-jail-setup")
        t.start()
        t.join()
        error = made.get("error")
        if isinstance(error, BaseException):
            if isinstance(error, PermissionError):
                raise JailError("a network namespace needs root (CAP_SYS_ADMIN)") from error
            raise JailError(f"cannot make the network namespace: {error}") from error
        fd = made["fd"]
        assert isinstance(fd, int)
        self._ns_fd = fd
        try:
            self._configure()
            self._serve()
        except BaseException:
            self.close()
            raise

    def _make_sockets(self) -> dict[str, socket.socket]:
        """Listeners created inside the namespace (a socket stays in the one it was made in):
        the traps, and a relay per exposed service on each loopback address."""

        def listen(name: str, family: int, kind: int, addr: tuple[str, int]) -> None:
            s = socket.socket(family, kind)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            if kind == socket.SOCK_STREAM:
                s.listen(128)
            s.setblocking(False)
            self._sockets[name] = s

        _loopback_up()  # before anything binds to it
        listen("tcp4", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
        listen("dns4", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))
        listen("udp4", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))
        listen("tcp6", socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0))
        listen("dns6", socket.AF_INET6, socket.SOCK_DGRAM, ("::1", 0))
        listen("udp6", socket.AF_INET6, socket.SOCK_DGRAM, ("::1", 0))
        for host, port in self.expose:
            listen(f"relay:{host}:{port}", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", port))
            listen(f"relay6:{host}:{port}", socket.AF_INET6, socket.SOCK_STREAM, ("::1", port))
        return self._sockets

    def _run_inside(self, argv: list[str], stdin: bytes) -> None:
        proc = subprocess.run(
            [*self.command_prefix(), *argv],
            input=stdin,
            capture_output=True,
            pass_fds=self.pass_fds,
            check=False,
        )
        if proc.returncode != 0:
            raise JailError(
                f"setting up the namespace failed: {' '.join(argv)}: "
                f"{proc.stderr.decode(errors='replace').strip()}"
            )

    def _configure(self) -> None:
        ports = {name: s.getsockname()[1] for name, s in self._sockets.items()}
        # Routes for every address, onto the loopback, so that a connection anywhere gets as
        # far as the nat hook below instead of failing with "network unreachable"; the source
        # address is the namespace's own, so the trap's answers find their way back.
        self._run_inside(
            ["ip", "-batch", "-"],
            b"addr add 10.255.0.1/32 dev lo\n"
            b"route add default dev lo src 10.255.0.1\n"
            b"route add ::/0 dev lo\n",
        )
        # Only the exposed services' relays (and the harness's own marked connections) are
        # left alone; everything else goes to a trap, loopback included. TCP keeps its
        # original destination for the trap to read (SO_ORIGINAL_DST); a UDP datagram
        # redirected by NAT does not, so each (source port, address, port) is also added to a
        # set that is read back when the jail closes, and matched to the datagrams by their
        # source port.
        t4, d4, u4 = ports["tcp4"], ports["dns4"], ports["udp4"]
        t6, d6, u6 = ports["tcp6"], ports["dns6"], ports["udp6"]
        exposed = ", ".join(str(p) for p in sorted({p for _, p in self.expose}))
        relays = (
            f"ip daddr 127.0.0.1 tcp dport {{ {exposed} }} return\n"
            f"    ip6 daddr ::1 tcp dport {{ {exposed} }} return"
            if exposed
            else ""
        )
        key4, key6 = "udp sport . ip daddr . udp dport", "udp sport . ip6 daddr . udp dport"
        rules = f"""
table inet oracle_jail {{
  set udp4 {{ type inet_service . ipv4_addr . inet_service; flags dynamic; size 65536; }}
  set udp6 {{ type inet_service . ipv6_addr . inet_service; flags dynamic; size 65536; }}
  chain out {{
    type nat hook output priority -100;
    meta mark {HARNESS_MARK:#x} return
    {relays}
    meta nfproto ipv4 udp dport 53 update @udp4 {{ {key4} }} redirect to :{d4}
    meta nfproto ipv6 udp dport 53 update @udp6 {{ {key6} }} redirect to :{d6}
    meta nfproto ipv4 meta l4proto tcp redirect to :{t4}
    meta nfproto ipv6 meta l4proto tcp redirect to :{t6}
    meta nfproto ipv4 meta l4proto udp update @udp4 {{ {key4} }} redirect to :{u4}
    meta nfproto ipv6 meta l4proto udp update @udp6 {{ {key6} }} redirect to :{u6}
  }}
}}
"""
        self._run_inside(["nft", "-f", "-"], rules.encode())

    # -- serving ----------------------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="oracle-jail", daemon=True)
        self._thread.start()
        ready.wait()
        socks = dict(self._sockets)

        async def start() -> None:
            for name, s in socks.items():
                if name.startswith("relay"):
                    host, _, port = name.split(":", 1)[1].rpartition(":")
                    self._spawn(self._accept_loop(s, self._relay, (host, int(port))))
                elif name.startswith("tcp"):
                    self._spawn(self._accept_loop(s, self._trap_tcp, None))
                else:
                    loop.add_reader(s.fileno(), self._trap_udp, s, name.startswith("dns"))

        asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=5)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(
        self,
        listener: socket.socket,
        handler: Callable[[socket.socket, Any], Coroutine[Any, Any, None]],
        arg: tuple[str, int] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            self._spawn(handler(conn, arg))

    async def _trap_tcp(self, conn: socket.socket, _: object) -> None:
        loop = asyncio.get_running_loop()
        family = conn.family
        level = socket.SOL_IP if family == socket.AF_INET else SOL_IPV6
        try:
            dest, port = _parse_original_dst(conn.getsockopt(level, SO_ORIGINAL_DST, 64), family)
        except OSError:
            dest, port = "unknown", 0
        if _local_destination(dest) and port not in self._trap_ports():
            own = await self._own_listener(family, dest, port)
            if own is not None:  # the program talks to itself: pass it on, nothing to record
                await splice(await asyncio.open_connection(sock=conn), own)
                return
        data = b""
        with contextlib.suppress(TimeoutError, OSError):
            deadline = loop.time() + 0.3
            while len(data) <= self.capture:
                chunk = await asyncio.wait_for(
                    loop.sock_recv(conn, 4096), max(0.0, deadline - loop.time())
                )
                if not chunk:
                    break
                data += chunk
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        self._record("tcp", dest, port, data)

    def _trap_ports(self) -> set[int]:
        return {s.getsockname()[1] for n, s in self._sockets.items() if n in ("tcp4", "tcp6")}

    async def _own_listener(
        self, family: int, dest: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to `dest`:`port` inside the namespace, where one of the program's own
        processes listens there, or None where nothing does."""
        loop = asyncio.get_running_loop()
        if self._inside is None:
            ns_fd = self._ns_fd
            assert ns_fd is not None
            self._inside = concurrent.futures.ThreadPoolExecutor(
                1, "oracle-jail-inside", initializer=os.setns, initargs=(ns_fd, os.CLONE_NEWNET)
            )

        def marked() -> socket.socket:  # made inside the namespace, so it connects there
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, HARNESS_MARK)
            s.setblocking(False)
            return s

        try:
            s = await loop.run_in_executor(self._inside, marked)
        except OSError:
            return None
        try:
            await asyncio.wait_for(loop.sock_connect(s, (dest, port)), LOCAL_PROBE_TIMEOUT)
            return await asyncio.open_connection(sock=s)
        except (OSError, TimeoutError):
            s.close()
            return None

    def _trap_udp(self, s: socket.socket, dns: bool) -> None:
        try:
            data, addr = s.recvfrom(65535)
        except OSError:
            return
        with self._lock:
            self._datagrams.append((time.time(), dns, data, s.family, int(addr[1])))
        if dns:
            answer = _dns_refused(data)
            if answer is not None:
                with contextlib.suppress(OSError):
                    s.sendto(answer, addr)

    async def _relay(self, conn: socket.socket, target: tuple[str, int]) -> None:
        gate = self.gates.get(target)
        if gate is not None:
            await self._gated(conn, target, gate)
            return
        try:
            server = await asyncio.open_connection(*target)
        except OSError:
            conn.close()
            return
        await splice(await asyncio.open_connection(sock=conn), server)

    async def _gated(self, conn: socket.socket, target: tuple[str, int], gate: Gate) -> None:
        client = await asyncio.open_connection(sock=conn)

        def refuse(reason: str, sent: bytes) -> None:
            self._record("tcp", target[0], target[1], sent, reason=reason)

        try:
            await gate.serve(client, lambda: asyncio.open_connection(*target), refuse)
        except Exception as exc:  # a gate that breaks lets nothing through, and says so
            close(client)
            refuse(f"{gate.spec.server}: the login gate failed ({type(exc).__name__}: {exc})", b"")

    def _record(
        self,
        proto: Literal["tcp", "udp"],
        dest: str,
        port: int,
        data: bytes,
        query: str | None = None,
        when: float | None = None,
        reason: str | None = None,
    ) -> None:
        kept = data[: self.capture]
        attempt = Attempt(
            proto=proto,
            destination=dest,
            port=port,
            time=when or time.time(),
            sent=base64.b64encode(kept).decode("ascii"),
            sent_bytes=len(data),
            truncated=len(data) > self.capture,
            dns_query=query,
            reason=reason,
        )
        with self._lock:
            self.attempts.append(attempt)

    def _udp_destinations(self) -> list[tuple[int, int, str, int]]:
        """``(family, source port, address, port)`` of every UDP flow the rules redirected,
        read from the nft sets."""
        proc = subprocess.run(
            [*self.command_prefix(), "nft", "-j", "list", "table", "inet", "oracle_jail"],
            capture_output=True,
            pass_fds=self.pass_fds,
            check=False,
        )
        out: list[tuple[int, int, str, int]] = []
        if proc.returncode != 0:
            return out
        for item in json.loads(proc.stdout).get("nftables", []):
            found = item.get("set", {})
            family = socket.AF_INET6 if found.get("name") == "udp6" else socket.AF_INET
            for elem in found.get("elem", []):
                if isinstance(elem, dict) and isinstance(elem.get("elem"), dict):
                    elem = elem["elem"].get("val", elem["elem"])  # an element with a timeout
                concat = elem.get("concat") if isinstance(elem, dict) else None
                if isinstance(concat, list) and len(concat) == 3:
                    out.append((family, int(concat[0]), str(concat[1]), int(concat[2])))
        return out

    def finish(self) -> list[Attempt]:
        """Every attempt, once the agent has stopped (UDP ones are assembled here)."""
        if not self._collected and self._ns_fd is not None:
            self._collected = True
            with contextlib.suppress(Exception):
                self._collect_udp()
        with self._lock:
            return sorted(self.attempts, key=lambda a: a.time)

    def _collect_udp(self) -> None:
        """Turn trapped datagrams and the destinations in the sets into attempts: a datagram
        goes to the one destination its source port sent to; where a port sent to several,
        its datagrams are of an unknown destination and each destination is recorded too."""
        with self._lock:
            if not self._datagrams:
                return  # nothing was sent by UDP: no need to ask the sets
        flows: dict[tuple[int, int, bool], list[tuple[str, int]]] = {}
        for family, sport, address, port in self._udp_destinations():
            flows.setdefault((family, sport, port == 53), []).append((address, port))
        with self._lock:
            datagrams = list(self._datagrams)
        told: set[tuple[int, int, bool]] = set()
        for when, dns, data, family, sport in datagrams:
            sent_to = flows.get((family, sport, dns), [])
            if len(sent_to) == 1:
                told.add((family, sport, dns))
                dest = sent_to[0]
            else:
                dest = ("resolver", 53) if dns else ("unknown", 0)
            self._record("udp", dest[0], dest[1], data, _dns_name(data) if dns else None, when)
        for flow, sent_to in flows.items():  # destinations whose datagrams were not told apart
            if flow not in told and not flow[2]:
                for address, port in sent_to:
                    self._record("udp", address, port, b"", None)

    # -- tear-down --------------------------------------------------------------------------

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None:
            self.finish()
        if loop is not None and thread is not None:

            async def stop() -> None:
                for task in list(self._tasks):
                    task.cancel()
                for s in self._sockets.values():
                    with contextlib.suppress(ValueError, OSError):
                        loop.remove_reader(s.fileno())

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
        self._loop = self._thread = None
        if self._inside is not None:
            self._inside.shutdown(wait=False)
            self._inside = None
        for s in self._sockets.values():
            s.close()
        self._sockets.clear()
        if self._ns_fd is not None:
            os.close(self._ns_fd)
            self._ns_fd = None
