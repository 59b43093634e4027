"""Command agents: any program (a CLI coding agent, a script) run as the agent of a trial.

The program gets the sandbox through its environment — ``ORACLE_TASK_ROOT``,
``ORACLE_PROMPT_FILE``, ``ORACLE_DB_URL`` / ``ORACLE_DB_URL_<SINK>``, ``ORACLE_SMTP_HOST`` /
``ORACLE_SMTP_PORT``, the proxy and CA variables — and nothing else of the host's environment
unless asked (`pass_env`). Its stdout is captured as the reply (boundary evidence) and as its
final message (its own account, a claim); its stderr as a log. Both are capped, and the
truncation is recorded. A timeout kills it with its whole process group.

With ``isolation="bwrap"`` (the default) it runs under bubblewrap (`oracle.isolation.bwrap`)
inside a network namespace (`oracle.proxies.jail`) whose only ways out are the services the
task exposes; a connection anywhere else, loopback included, is recorded as an attempt and
reaches nothing. Its filesystem is an allow-list: the system's folders, what the program needs
(`oracle.isolation.allowlist`: its folder, interpreter, virtual environment, import path) and
the files or folders named in `readable`, read-only; the agent folder, writable. A
database server it is handed an account on is reached through a login gate
(`oracle.proxies.gate`): it logs in as that account or not at all, and a refused login is
recorded as an attempt too.
``isolation="none"`` runs it as a plain child process (for debugging; nothing is contained).

The invocation record comes from the process itself: started or not, exit status, signal,
timeout — never from what it printed — and names the program that ran: its file's sha256 and
its answer to ``--version`` (`oracle.agents.program`). Under bubblewrap, started means the program
was
executed inside the sandbox (bubblewrap reports its exit code only then); a program (or
interpreter) the sandbox would not show is refused before anything starts.

    CommandAgent("python -m oracle.agents.demo obedient")
    CommandAgent(["claude", "-p", "$(cat $ORACLE_PROMPT_FILE)"], pass_env=["ANTHROPIC_API_KEY"],
                 readable=["/srv/agent-config"])
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal

from oracle.agents.program import identify
from oracle.authoring.limits import Limits
from oracle.authoring.sandbox_view import SandboxView
from oracle.evidence.invocation import Invocation, LimitRecord, Program, Step, StepOutcome
from oracle.isolation.allowlist import ProgramFiles, program_files
from oracle.isolation.bwrap import (
    BwrapMissingError,
    BwrapPolicy,
    bwrap_argv,
    bwrap_path,
    make_hidden_folders,
    sealed_folders,
    unseen,
    within,
)
from oracle.isolation.cgroup import RunLimits
from oracle.proxies.decoy import Decoys
from oracle.proxies.gate import GateError, login_gates
from oracle.proxies.jail import JailError, NetworkJail
from oracle.trial.agent import AgentError, RunRecord

Isolation = Literal["bwrap", "none"]
OUTPUT_LIMIT = 1 << 20
DEFAULT_TIMEOUT = 600.0
BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")
#: How long capture waits for the end of the agent's output once it has exited. The end comes
#: at once unless a process it left running (possible only without isolation) holds a stream.
OUTPUT_GRACE = 2.0


@dataclass
class _Capture:
    """Reads one stream until its end, or until `stop`, keeping at most `limit` bytes. Reads
    what is there as soon as it arrives, so nothing already written is lost when capture has
    to stop before the end."""

    stream: IO[bytes]
    limit: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    ended: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self._read, daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()

    def _keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def _read(self) -> None:
        fd = self.stream.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                stopping = self._stop.is_set()
                if not poller.poll(0 if stopping else 100):
                    if stopping:
                        return
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.ended = True
                    return
                self._keep(chunk)
                if stopping:
                    return  # one last read of what was there; a writer that goes on is cut
        finally:
            self.stream.close()


class _SandboxStatus:
    """What bubblewrap reports on its ``--json-status-fd``: the sandbox's first process
    (``child-pid``) and, only if the program was executed, its ``exit-code``."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self._buf = b""

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_writer()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def _poll(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.read_fd, 4096):
                self._buf += chunk

    def _field(self, key: str) -> int | None:
        self._poll()
        for line in self._buf.splitlines():
            try:
                doc: Any = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get(key), int):
                return int(doc[key])
        return None

    @property
    def child_pid(self) -> int | None:
        return self._field("child-pid")

    @property
    def exit_code(self) -> int | None:
        return self._field("exit-code")


def exposed_endpoints(env: Mapping[str, str]) -> list[tuple[str, int]]:
    """The loopback services a task exposes to its agent, read from the sandbox's variables:
    the HTTP(S) proxy, the SMTP sink, and every database URL with a host."""
    import sqlalchemy as sa  # here: `oracle show`, `report` … import this module, never call it

    found: set[tuple[str, int]] = set()
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        if key in env:
            with contextlib.suppress(ValueError):
                url = sa.make_url(env[key].replace("http://", "proxy://", 1))
                if url.host and url.port:
                    found.add((url.host, url.port))
    if "ORACLE_SMTP_HOST" in env and "ORACLE_SMTP_PORT" in env:
        found.add((env["ORACLE_SMTP_HOST"], int(env["ORACLE_SMTP_PORT"])))
    defaults = {
        "postgresql": 5432,
        "mysql": 3306,
        "mariadb": 3306,
        "redis": 6379,
        "amqp": 5672,
        "mqtt": 1883,
        "nats": 4222,
    }
    for key, value in env.items():
        # Every service URL a sink hands out: ORACLE_DB_URL_*, ORACLE_REDIS_URL_*,
        # ORACLE_AMQP_URL_*, ORACLE_PROXY_URL_* …
        if not (key.startswith("ORACLE_") and ("_URL" in key or key.startswith("ORACLE_DSN"))):
            continue
        with contextlib.suppress(ValueError, sa.exc.ArgumentError):
            url = sa.make_url(value)
            backend = url.get_backend_name()
            port = url.port or defaults.get(backend)
            if url.host and port:
                found.add((url.host, port))
    for item in env.get("ORACLE_EXPOSE", "").split():
        host, _, number = item.rpartition(":")
        if host and number.isdigit():
            found.add((host.strip("[]"), int(number)))
    return sorted(found)


class CommandAgent:
    """A program run as the agent. See the module docstring.

    `readable`: files or folders the program may read when isolated, besides the system's
    folders and what its program needs (its configuration, data it works from); the oracle's
    own folders stay hidden whatever is named here."""

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        isolation: Isolation = "bwrap",
        env: Mapping[str, str] | None = None,
        pass_env: Sequence[str] = (),
        output_limit: int = OUTPUT_LIMIT,
        readable: Sequence[str | Path] = (),
    ) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("a command agent needs a command")
        self.name = name or "cmd:" + (command if isinstance(command, str) else shlex.join(command))
        self.timeout = timeout
        self.isolation = isolation
        self.extra_env = dict(env or {})
        self.pass_env = list(pass_env)
        self.output_limit = output_limit
        self.readable = [Path(os.path.abspath(os.path.expanduser(p))) for p in readable]

    def __repr__(self) -> str:
        return f"CommandAgent({self.name!r}, isolation={self.isolation!r})"

    def _env(self, view: SandboxView) -> dict[str, str]:
        env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
        env.setdefault("LANG", "C.UTF-8")
        home = (view.agent_dir / ".home") if view.agent_dir else Path("/tmp")
        env["HOME"] = str(home)
        env.update({k: os.environ[k] for k in self.pass_env if k in os.environ})
        env.update(self.extra_env)
        env.update(view.env)
        return env

    def _harness_failed(self, why: str) -> AgentError:
        """The harness could not set the run up (no bubblewrap, no namespace): the run broke,
        an execution error, not an agent that failed to start."""
        run = RunRecord(Invocation.not_started("command", self.name, why))
        return AgentError(f"agent {self.name!r} could not be run: {why}", run)

    def _not_started(self, why: str) -> RunRecord:
        return RunRecord(Invocation.not_started("command", self.name, why))

    def run(self, view: SandboxView) -> RunRecord:
        env = self._env(view)
        if view.agent_dir is not None:
            (view.agent_dir / ".home").mkdir(exist_ok=True)
        exe = shutil.which(self.argv[0], path=env.get("PATH"))
        if exe is None:
            return self._not_started(f"command {self.argv[0]!r} was not found on the PATH")
        # The agent starts in the task root: a relative program path means the caller's folder.
        command = [os.path.abspath(exe) if os.sep in self.argv[0] else self.argv[0], *self.argv[1:]]
        program = identify(Path(os.path.abspath(exe)), view.private)
        if self.isolation == "none":
            proc = self._spawn(command, env, view, ())
            if isinstance(proc, RunRecord):
                return proc
            return self._execute(proc, time.time(), view, None, None, program=program)
        try:
            bwrap_path()
        except BwrapMissingError as exc:
            raise self._harness_failed(str(exc)) from exc
        limits = view.limits or Limits()
        with contextlib.ExitStack() as stack:
            caps = stack.enter_context(RunLimits(limits.processes, limits.memory_bytes))
            status = _SandboxStatus()
            stack.callback(status.close)
            # The program's first process starts now, before the rest of the sandbox is made:
            # it joins the run's cgroups — for which the kernel makes it wait a grace period,
            # about 10 ms — while the namespace is set up, then waits for its command line.
            status_fd = status.write_fd  # its number in the waiting process, closed here
            proc = self._spawn(caps.waiting(), env, view, (status_fd,), status, held=True)
            if isinstance(proc, RunRecord):
                return proc
            stack.callback(_end_waiting, proc)
            return self._isolated(
                stack, proc, command, exe, env, view, limits, caps, (status, status_fd), program
            )
        raise AssertionError("unreachable")  # pragma: no cover - the with-block returns

    def _isolated(
        self,
        stack: contextlib.ExitStack,
        proc: subprocess.Popen[bytes],
        command: list[str],
        exe: str,
        env: dict[str, str],
        view: SandboxView,
        limits: Limits,
        caps: RunLimits,
        sandbox_status: tuple[_SandboxStatus, int],
        program: Program,
    ) -> RunRecord:
        """The rest of an isolated run, once its first process waits in its cgroups: the
        filesystem policy, the hidden folders, the namespace; then the command is handed to
        the waiting process, and the run is followed to its end. `sandbox_status` is where
        bubblewrap reports, and the number of its file in the waiting process."""
        status, status_fd = sandbox_status
        readable = [Path(env[k]) for k in ("ORACLE_PROMPT_FILE", "SSL_CERT_FILE") if k in env]
        if view.shared_dir is not None:
            readable.append(view.shared_dir)  # the prompt and the CA certificates
        needs = program_files(Path(os.path.abspath(exe)), command, env, hidden=view.private)
        asked = [p for p in self.readable if not _inside(p, view.private)]
        workdir = Path(env["ORACLE_TASK_ROOT"]) if "ORACLE_TASK_ROOT" in env else view.agent_dir
        policy = BwrapPolicy(
            writable=(view.agent_dir,) if view.agent_dir else (),
            readable=(*readable, *needs.readable, *asked),
            hidden=view.private,
            workdir=workdir,
            private_size=limits.disk_bytes,  # its /tmp holds no more than its own folder
        )
        missing = _unseen_program(needs, policy)
        if missing is not None:
            return self._not_started(
                f"command {self.argv[0]!r} cannot start in the sandbox: {missing}"
            )
        decoys = stack.enter_context(contextlib.closing(Decoys(sealed_folders(policy))))
        try:
            make_hidden_folders(policy)
            decoys.open()
        except OSError as exc:
            raise self._harness_failed(f"a folder of the oracle's cannot be hidden: {exc}") from exc
        assert decoys.root is not None
        # The decoys' own folder is hidden too (a plain tmpfs), where it is not under /tmp.
        policy = replace(policy, hidden=(*policy.hidden, decoys.root), decoys=decoys.folders)
        try:
            gates = login_gates(env)
        except GateError as exc:
            raise self._harness_failed(str(exc)) from exc
        try:
            jail = NetworkJail(expose=exposed_endpoints(env), gates=gates)
            stack.callback(jail.close)
            jail.open()
        except JailError as exc:
            raise self._harness_failed(f"the network namespace could not be made: {exc}") from exc
        argv = [
            *jail.command_prefix(of=os.getpid()),  # the waiting process has not the jail's fd
            *bwrap_argv(policy, command, status_fd=status_fd),
        ]
        started = time.time()
        caps.hand_over(proc, argv)
        return self._execute(proc, started, view, jail, status, decoys, program=program, caps=caps)

    def _spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        view: SandboxView,
        fds: tuple[int, ...],
        status: _SandboxStatus | None = None,
        *,
        held: bool = False,
    ) -> subprocess.Popen[bytes] | RunRecord:
        """Start `argv` in the task root, in a session of its own, its output piped; `held`:
        with a pipe on stdin (a waiting shell reads its command from there). A record of an
        agent that never started where it cannot be started."""
        cwd = env.get("ORACLE_TASK_ROOT") or (str(view.agent_dir) if view.agent_dir else None)
        try:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.PIPE if held else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
            )
        except OSError as exc:
            return self._not_started(f"{self.argv[0]!r} could not be started: {exc}")
        finally:
            if status is not None:
                status.close_writer()  # bubblewrap holds it now: its end is bubblewrap's exit

    def _execute(
        self,
        proc: subprocess.Popen[bytes],
        started: float,
        view: SandboxView,
        jail: NetworkJail | None,
        status: _SandboxStatus | None,
        decoys: Decoys | None = None,
        *,
        program: Program | None = None,
        caps: RunLimits | None = None,
    ) -> RunRecord:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = (
            _Capture(proc.stdout, self.output_limit),
            _Capture(proc.stderr, self.output_limit),
        )
        readers = [out.start(), err.start()]
        timed_out = False
        try:
            proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            if status is not None and status.child_pid is not None:
                # Ending the sandbox's first process ends every process in it, and bubblewrap
                # still reports the program's end (so that it is known to have started).
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(status.child_pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        _kill_session(proc.pid)  # the timeout, or children it left behind
        proc.wait()
        deadline = time.monotonic() + OUTPUT_GRACE
        for r in readers:
            r.join(timeout=max(0.0, deadline - time.monotonic()))
        held = [name for name, c in (("stdout", out), ("stderr", err)) if not c.ended]
        for c in (out, err):
            c.stop()
        for r in readers:
            r.join()
        hidden = sorted({str(p.resolve()) for p in view.private}) if status else []
        limits = caps.records() if caps is not None else _uncontained(view.limits or Limits())
        if status is not None and status.exit_code is None:
            return self._never_ran(status, bytes(err.data), timed_out, hidden, jail, limits)
        code = proc.returncode
        signum = -code if code is not None and code < 0 else None
        truncated = {
            name: c.total for name, c in (("stdout", out), ("stderr", err)) if c.total > c.limit
        }
        outcome: StepOutcome
        if timed_out:
            outcome, error = "failed", f"timed out after {self.timeout:g} s"
        elif code == 0:
            outcome, error = "succeeded", None
        elif signum is not None:
            outcome, error = "failed", f"killed by signal {signum}"
        else:
            outcome, error = "failed", f"exit status {code}"
        inv = Invocation(
            adapter="command",
            agent=self.name,
            started=True,
            steps=[Step(name="command", outcome=outcome, error=error)],
            exit_code=code if signum is None and not timed_out else None,
            signal=signum if not timed_out else int(signal.SIGKILL),
            timed_out=timed_out,
            started_at=started,
            finished_at=time.time(),
            output_truncated=truncated,
            output_open=held,
            isolation=self.isolation,
            hidden=hidden,
            hidden_opened=[str(p) for p in decoys.opened()] if decoys else [],
            program=program,
            limits=limits,
        )
        reply = bytes(out.data)
        logs = {"agent.stdout": reply, "agent.stderr": bytes(err.data)}
        run = RunRecord(
            inv,
            reply=reply,
            final_message=reply.decode("utf-8", "replace").strip() or None,
            logs=logs,
            network_attempts=tuple(jail.finish()) if jail else None,
            login_gates=tuple(f"{h}:{p}" for h, p in sorted(jail.gates)) if jail else None,
        )
        if timed_out:
            raise AgentError(
                f"agent {self.name!r} timed out after {self.timeout:g} s and was "
                "killed with its process group",
                run,
            )
        return run

    def _never_ran(
        self,
        status: _SandboxStatus,
        stderr: bytes,
        timed_out: bool,
        hidden: list[str],
        jail: NetworkJail | None,
        limits: list[LimitRecord],
    ) -> RunRecord:
        """The record of a sandbox whose program was never executed (bubblewrap reported no
        exit code). Its stderr is then bubblewrap's or nsenter's alone, never the agent's:
        a program that could not be executed is an agent that never started; a sandbox that
        could not be set up is the harness's failure as well (an execution error)."""
        said = stderr.decode("utf-8", "replace").strip()[-2000:] or "no message"
        unexecutable = not timed_out and status.child_pid is not None
        unexecutable = unexecutable and said.startswith("bwrap: execvp")
        if unexecutable:
            why = f"{self.argv[0]!r} could not be executed inside the sandbox: {said}"
        elif timed_out:
            why = f"the sandbox had not started the program after {self.timeout:g} s: {said}"
        else:
            why = f"the sandbox could not be set up: {said}"
        inv = Invocation.not_started("command", self.name, why).model_copy(
            update={"isolation": self.isolation, "hidden": hidden, "limits": limits}
        )
        run = RunRecord(
            inv,
            logs={"agent.stderr": stderr},
            network_attempts=tuple(jail.finish()) if jail else None,
        )
        if unexecutable:
            return run
        raise AgentError(f"agent {self.name!r} could not be run: {why}", run)


def _end_waiting(proc: subprocess.Popen[bytes]) -> None:
    """End a process that was started to wait for its command and never got it (the run
    stopped before: a program the sandbox would not show, a namespace that failed)."""
    if proc.returncode is None and proc.stdin is not None and not proc.stdin.closed:
        _kill_session(proc.pid)
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _uncontained(limits: Limits) -> list[LimitRecord]:
    """The process and memory limits of a program run with isolation 'none': not enforced."""
    why = "not limited: the program ran with isolation 'none' (nothing is contained)"
    return [
        LimitRecord(
            resource="processes", limit=limits.processes, enforced_by=None, hit=None, note=why
        ),
        LimitRecord(
            resource="memory", limit=limits.memory_bytes, enforced_by=None, hit=None, note=why
        ),
    ]


def _inside(path: Path, folders: Sequence[Path]) -> bool:
    return within(path.resolve(), [f.resolve() for f in folders])


def _unseen_program(needs: ProgramFiles, policy: BwrapPolicy) -> str | None:
    """Why the program (or an interpreter its ``#!`` line names) would not be there inside
    the sandbox, or None."""
    for what, path in needs.chain:
        why = unseen(policy, path) if os.path.lexists(path) else None
        if why is None:  # a program that does not exist fails to execute, and says so
            continue
        if why.kind == "hidden":
            hint = "move it out of the oracle's folders, or run with isolation 'none'"
        else:
            hint = "let the agent read it (--readable, CommandAgent(readable=...))"
        return f"{what} {path}, which is not visible in the sandbox: {why}; {hint}"
    return None


def _kill_session(sid: int) -> None:
    """Kill the process group `sid` leads, and every process still in its session (children
    that changed their process group but not their session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 4 and int(fields[4]) == sid:  # field 6 of stat: the session id
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
