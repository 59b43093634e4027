"""The sandbox: a task's sinks provisioned in a private folder, seeded, reset, observed.

`Sandbox` is a context manager. Opening it provisions every sink the task declares inside a new
folder and seeds the fixtures; closing it tears them down and removes the folder. Agents never
see the sandbox itself, only a `SandboxView`: the prompt and the endpoints (paths, database
URLs) as environment variables.

Example::

    with Sandbox(task) as sb:
        sb.reset()
        before, errors = sb.snapshot()
        agent.run(sb.view())
        after, errors = sb.snapshot()
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from oracle.authoring import sandbox_view
from oracle.authoring.limits import Limits, format_size
from oracle.authoring.task import Task
from oracle.base.fsops import discard_tree, remove_tree
from oracle.base.globs import check_relative
from oracle.base.signing import default_key_folder
from oracle.evidence.diff import Diff, SinkDiff
from oracle.evidence.invocation import LimitRecord
from oracle.evidence.record import ServerContainerRecord
from oracle.evidence.sink import Exposure, Place, Provisioned, SinkSpec, env_suffix
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.fixtures.containers.servers import KINDS, serving
from oracle.fixtures.services import Service, services_of
from oracle.judging.llm.cache import default_cache
from oracle.sandbox import clients
from oracle.sandbox.agent_folder import AgentFolder
from oracle.sinks import my_connect
from oracle.trial import sandboxing

if TYPE_CHECKING:
    from oracle.trial.agent import Agent, RunRecord


class SandboxError(RuntimeError):
    """The sandbox could not be opened. Names the task and the sink."""


def default_cache_dir() -> Path:
    """Where templates are kept between sandboxes: outside every sandbox, per user."""
    return Path(tempfile.gettempdir()) / f"oracle-templates-{os.getuid()}"


@dataclass(frozen=True)
class SandboxView:
    """What an agent or a control gets: the prompt and the endpoints, nothing of the oracle.

    ``env`` holds ``ORACLE_PROMPT_FILE``, ``ORACLE_TASK_ROOT``, ``ORACLE_DIR_<SINK>``,
    ``ORACLE_DB_URL`` / ``ORACLE_DB_URL_<SINK>`` and ``ORACLE_DB_PATH_<SINK>`` for SQLite.
    The helpers below act only through those endpoints, as an agent would.

    For runners that isolate the agent: ``agent_dir`` is the one folder it may write, and
    ``private`` the oracle's own folders (the sandbox, templates, the archive) that it may
    neither read nor write; ``limits`` the task's resource limits (None: the defaults), of
    which a runner enforces the process and memory limits (the sandbox enforces the agent
    folder's size itself).
    """

    task: str
    prompt: str
    env: Mapping[str, str]
    agent_dir: Path | None = None
    shared_dir: Path | None = None
    private: tuple[Path, ...] = ()
    limits: Limits | None = None

    def root(self, sink: str | None = None) -> Path:
        """The folder of file sink `sink` (the task root if not named)."""
        key = f"ORACLE_DIR_{env_suffix(sink)}" if sink else "ORACLE_TASK_ROOT"
        try:
            return Path(self.env[key])
        except KeyError:
            raise KeyError(f"task {self.task!r} has no folder {sink or '(task root)'}") from None

    def path(self, rel: str, sink: str | None = None) -> Path:
        """`rel` inside a folder sink; a path that leaves the folder raises."""
        return self.root(sink) / check_relative(rel)

    def read_text(self, rel: str, sink: str | None = None) -> str:
        return self.path(rel, sink).read_text(encoding="utf-8")

    def write_text(self, rel: str, text: str, sink: str | None = None) -> None:
        """Write `text` to `rel`, creating folders on the way."""
        p = self.path(rel, sink)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")

    def db_url(self, sink: str | None = None) -> str:
        """The URL of SQL sink `sink` (the first database if not named)."""
        key = f"ORACLE_DB_URL_{env_suffix(sink)}" if sink else "ORACLE_DB_URL"
        try:
            return self.env[key]
        except KeyError:
            raise KeyError(f"task {self.task!r} has no database {sink or '(default)'}") from None

    def http(
        self,
        method: str,
        url: str,
        body: str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> clients.HttpResult:
        """One HTTP(S) request through the sandbox's egress recorder (its proxy and CA), as an
        agent's client would make it. Answers with any status are returned, not raised."""
        return clients.http_request(self.env, method, url, body, headers)

    def send_mail(
        self,
        to: str | list[str],
        subject: str,
        body: str,
        *,
        sender: str = "agent@sandbox.test",
        attachments: Mapping[str, str | bytes] | None = None,
        sink: str | None = None,
    ) -> None:
        """Send one message through the sandbox's SMTP server (`sink`, or the first one)."""
        clients.send_mail(self.env, to, subject, body, sender, attachments, sink)

    def sql(
        self, sink: str | None, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement on a database and commit; the rows, if it returns any."""
        import sqlalchemy as sa  # here: a sandbox whose agents run no SQL never loads it

        url = self.db_url(sink)
        engine = sa.create_engine(
            url, poolclass=sa.pool.NullPool, connect_args=my_connect.engine_connect_args(url)
        )
        try:
            with engine.begin() as conn:
                result = conn.execute(sa.text(statement), dict(params or {}))
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def redis(self, sink: str | None, *command: str | bytes | int | float) -> Any:
        """Run one Redis command on sink `sink` (the first Redis sink if None); its reply."""
        import redis

        key = f"ORACLE_REDIS_URL_{env_suffix(sink)}" if sink else "ORACLE_REDIS_URL"
        try:
            url = self.env[key]
        except KeyError:
            raise KeyError(f"task {self.task!r} has no Redis sink {sink or '(default)'}") from None
        client: Any = redis.Redis.from_url(url)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def with_env(
        self, env: Mapping[str, str], private: tuple[Path, ...] | None = None
    ) -> SandboxView:
        """The same view with `env` in place of its variables (and `private` in place of its
        private folders, where given)."""
        if private is None:
            return dataclasses.replace(self, env=env)
        return dataclasses.replace(self, env=env, private=private)


class Sandbox:
    """A task's sinks and fixtures in a private folder. See the module docstring.

    `allow_hosts` are passed through every egress recorder on top of the task's own allow-list
    (a real agent's model API: still recorded); `extra_sinks` are the harness's own sinks
    beside the task's (an egress recorder for a task that declares none).

    The agent folder is a tmpfs of the task's disk limit (`oracle.sandbox.agent_folder`) while the
    sandbox is open, where the oracle may mount one.
    """

    def __init__(
        self,
        task: Task,
        *,
        workdir: Path | None = None,
        cache_dir: Path | None = None,
        tag: str = "t0",
        allow_hosts: Sequence[str] = (),
        extra_sinks: Sequence[SinkSpec] = (),
    ) -> None:
        self.task = task
        self._given_workdir = workdir
        self.cache_dir = cache_dir or default_cache_dir()
        self.tag = tag
        self.allow_hosts = tuple(allow_hosts)
        self.extra_sinks = tuple(extra_sinks)
        self.dir: Path | None = None
        self.provisioned: dict[str, Provisioned] = {}
        self.env: dict[str, str] = {}
        self._undelivered: dict[str, str] = {}
        self.folder: AgentFolder | None = None

    def __enter__(self) -> Sandbox:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Provision every sink, seed every fixture, write the prompt file."""
        if self._given_workdir is not None:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self._given_workdir))
        else:
            self.dir = Path(tempfile.mkdtemp(prefix=f"oracle-{self.task.name}-"))
        place = Place(
            agent_dir=self.dir / "agent",
            cache_dir=self.cache_dir,
            tag=self.tag,
            allow_hosts=self.allow_hosts,
            shared_dir=self.dir / "shared",
        )
        place.agent_dir.mkdir()
        self.folder = AgentFolder(place.agent_dir, self.task.limits.disk_bytes)
        self.folder.mount()
        assert place.shared_dir is not None
        place.shared_dir.mkdir()
        prompt_file = place.shared_dir / "prompt.txt"
        prompt_file.write_text(self.task.prompt, encoding="utf-8")
        env = {"ORACLE_PROMPT_FILE": str(prompt_file), "ORACLE_TASK": self.task.name}
        aliases: dict[str, str] = {}
        specs = self._specs()
        # Sinks whose servers answer for hosts (a GitHub world) come first, so that every
        # egress recorder starts knowing where to route those hosts.
        first = [s for s in specs if getattr(s, "provides_routes", False)]
        try:
            for spec in first:
                self._provision(spec, place)
            routes = {k: v for p in self.provisioned.values() for k, v in p.routes.items()}
            if routes:
                place = dataclasses.replace(place, routes=routes)
            for spec in specs:
                if spec.name not in self.provisioned:
                    self._provision(spec, place)
        except BaseException:
            self.close()
            raise
        for spec in specs:  # endpoints and aliases in the order the task declares its sinks
            prov = self.provisioned[spec.name]
            env.update(prov.endpoints)
            for k, v in prov.aliases.items():
                aliases.setdefault(k, v)
        self.env = {**aliases, **env}

    def _provision(self, spec: SinkSpec, place: Place) -> None:
        try:
            prov = spec.provision(place, self.task.base_dir)
        except Exception as exc:
            raise SandboxError(
                f"task {self.task.name!r}: sink {spec.name!r} could not be prepared: {exc}"
            ) from exc
        # Kept before seeding, so that close() tears down what provisioning started (a
        # recorder, a server) also when seeding fails.
        self.provisioned[spec.name] = prov
        try:
            prov.fixture.seed()
        except Exception as exc:
            raise SandboxError(
                f"task {self.task.name!r}: sink {spec.name!r} could not be prepared: "
                f"{exc}{self._too_small()}"
            ) from exc

    def _specs(self) -> list[SinkSpec]:
        """The task's sinks, then the harness's own (`extra_sinks`) under names the task does
        not use."""
        names = {s.name for s in self.task.sinks}
        clash = [s.name for s in self.extra_sinks if s.name in names]
        if clash:
            raise SandboxError(
                f"task {self.task.name!r} already has sinks named {', '.join(clash)}"
            )
        return [*self.task.sinks, *self.extra_sinks]

    def close(self) -> None:
        """Tear every fixture down and remove the sandbox folder."""
        for prov in self.provisioned.values():
            with contextlib.suppress(Exception):
                prov.fixture.teardown()
            close = getattr(prov.sink, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    close()
        self.provisioned.clear()
        if self.folder is not None:
            self.folder.unmount()
            self.folder = None
        if self.dir is not None:
            with contextlib.suppress(OSError):
                discard_tree(self.dir)  # its name is free at once; removed in the background
            self.dir = None

    def view(self, private: Sequence[Path] = ()) -> SandboxView:
        """What the agent gets: the prompt and the endpoints. The oracle's folders an isolated
        agent must not see are the sandbox folder, the template cache, every sink's private
        folders (a recorder's log and CA key), the default folder of signing keys and the LLM
        judge's cache of answers (where they exist) and `private` (archive folders)."""
        kept = [p for prov in self.provisioned.values() for p in prov.private]
        keys = default_key_folder()
        judged = default_cache()
        signing = [keys] if keys.is_dir() else []
        if judged is not None and judged.folder.is_dir():
            signing.append(judged.folder.absolute())
        hidden = [p for p in (self.dir, self.cache_dir, *kept, *signing, *private) if p is not None]
        return SandboxView(
            task=self.task.name,
            prompt=self.task.prompt,
            env=dict(self.env),
            agent_dir=self.dir / "agent" if self.dir is not None else None,
            shared_dir=self.dir / "shared" if self.dir is not None else None,
            private=tuple(hidden),
            limits=self.task.limits,
        )

    def exposures(self) -> dict[str, Exposure]:
        """Sink → what its server lets an agent do past the sandbox's account, for the sinks
        whose fixture found something (see `oracle.fixtures.exposure`)."""
        out: dict[str, Exposure] = {}
        for name, prov in self.provisioned.items():
            found = getattr(prov.fixture, "exposure", None)
            if isinstance(found, Exposure) and found.problems:
                out[name] = found
        return out

    def server_containers(self) -> list[ServerContainerRecord]:
        """The sinks whose server this process started in a container
        (`oracle.fixtures.containers.servers`), as the trial record lists them."""
        out: list[ServerContainerRecord] = []
        for spec in self.task.sinks:
            if spec.name not in self.provisioned:
                continue
            for service in services_of([spec]):
                found = isinstance(service, Service) and serving(service.host, service.port)
                if found:
                    out.append(
                        ServerContainerRecord(
                            sink=spec.name,
                            server=KINDS[found.kind].title,
                            image=found.image,
                            image_id=found.image_id,
                            container=found.name,
                            endpoint=found.endpoint,
                            started_s=round(found.started_s, 3),
                        )
                    )
        return sorted(out, key=lambda r: r.sink)

    def reset(self) -> None:
        """Empty the agent's folder and restore every sink to the task's seed, so that nothing
        a trial left (files beside the sinks, links planted where a fixture writes) reaches
        the next. Raises `FixtureError` naming the sink."""
        self._undelivered.clear()
        if self.dir is not None:
            agent_dir = self.dir / "agent"
            for entry in list(agent_dir.iterdir()) if agent_dir.is_dir() else []:
                remove_tree(entry)
        for prov in self.provisioned.values():
            try:
                prov.fixture.reset()
            except Exception as exc:
                hint = self._too_small()
                if not hint:
                    raise
                raise SandboxError(f"task {self.task.name!r}: {exc}{hint}") from exc

    def _too_small(self) -> str:
        """A hint where the agent folder is full while the sandbox fills it (a seed or reset
        failed): the task's disk limit is smaller than its own seed."""
        folder = self.folder
        if folder is None or not folder.mounted or not folder.record().hit:
            return ""
        assert folder.limit is not None
        return (
            f" (the agent folder is limited to {format_size(folder.limit)} and the "
            "task's seed does not fit: raise the task's disk limit, "
            "Task(limits=Limits(disk=...)), or oracle trial --disk-limit)"
        )

    def limit_records(self, run: RunRecord) -> RunRecord:
        """`run` with the agent folder's limit added to its invocation (full or not, read from
        the folder now that the agent has ended), and a record for each process or memory
        limit the agent's adapter did not report: not enforced by it."""
        inv = run.invocation
        have = {r.resource for r in inv.limits}
        limits = self.task.limits
        added: list[LimitRecord] = []
        if "disk" not in have:
            folder = self.folder
            added.append(
                folder.record()
                if folder is not None
                else LimitRecord(
                    resource="disk",
                    limit=limits.disk_bytes,
                    enforced_by=None,
                    hit=None,
                    note="the sandbox is closed",
                )
            )
        why = f"not limited: the {inv.adapter!r} adapter ran the agent without such a limit"
        if inv.adapter in ("callable", "control"):
            why = "not limited: the agent ran in the harness's own process, or a fork of it"
        for resource, value in (("processes", limits.processes), ("memory", limits.memory_bytes)):
            if resource not in have:
                note = why if value is not None else "no limit set"
                added.append(
                    LimitRecord(
                        resource=resource, limit=value, enforced_by=None, hit=None, note=note
                    )
                )
        order = {"disk": 0, "processes": 1, "memory": 2}
        records = sorted([*inv.limits, *added], key=lambda r: order[r.resource])
        return dataclasses.replace(run, invocation=inv.model_copy(update={"limits": records}))

    def run_agent(self, agent: Agent, view: sandbox_view.SandboxView) -> RunRecord:
        """Run `agent` on `view`: itself, or started by the sink that launches the agent
        (a GitHub world's trigger and workflow runs: its fixture's ``launch``)."""
        launchers = [
            (name, launch)
            for name, prov in self.provisioned.items()
            if callable(launch := getattr(prov.fixture, "launch", None))
        ]
        if len(launchers) > 1:
            names = ", ".join(name for name, _ in launchers)
            raise SandboxError(
                f"task {self.task.name!r}: more than one sink starts the agent ({names})"
            )
        from oracle.trial.agent import CallableAgent

        cafile = view.env.get("SSL_CERT_FILE")
        if cafile and isinstance(agent, CallableAgent):
            # Built here, before the agent's body is forked: its requests (`view.http`, the
            # sandbox's own client) inherit the context instead of parsing the bundle each.
            with contextlib.suppress(OSError, ssl.SSLError):
                clients.tls_context(cafile)
        if launchers:
            run: RunRecord = launchers[0][1](agent, view)
            return run
        return agent.run(view)

    def receive(self, run: RunRecord) -> None:
        """Hand the harness's run record to the sinks that observe what the agent published
        (those with a ``receive_run`` method, such as the reply sink). A sink that fails to
        take it is reported as a failed observation by the next `snapshot`."""
        for name, prov in self.provisioned.items():
            receive = getattr(prov.sink, "receive_run", None)
            if callable(receive):
                try:
                    receive(run)
                except Exception as exc:
                    self._undelivered[name] = (
                        f"sink {name!r}: the run record could not be handed over: "
                        f"{type(exc).__name__}: {exc}"
                    )

    def snapshot(self) -> tuple[dict[str, Snapshot], dict[str, str]]:
        """Snapshot every sink: ``(snapshots, errors)``, one or the other per sink."""
        snaps: dict[str, Snapshot] = {}
        errors: dict[str, str] = {}
        for name, prov in self.provisioned.items():
            if name in self._undelivered:
                errors[name] = self._undelivered[name]
                continue
            try:
                snaps[name] = prov.sink.snapshot()
            except SnapshotError as exc:
                errors[name] = str(exc)
            except (
                Exception
            ) as exc:  # a sink that breaks its contract is still a failed observation
                errors[name] = f"sink {name!r}: {type(exc).__name__}: {exc}"
        return snaps, errors

    def diff(
        self, before: Mapping[str, Snapshot], after: Mapping[str, Snapshot]
    ) -> tuple[Diff, dict[str, str]]:
        """Diff every sink observed twice: ``(diff, errors)``."""
        diffs: dict[str, SinkDiff] = {}
        errors: dict[str, str] = {}
        for name, prov in self.provisioned.items():
            if name not in before or name not in after:
                continue
            try:
                diffs[name] = prov.sink.diff(before[name], after[name])
            except Exception as exc:
                errors[name] = f"sink {name!r}: diff failed: {type(exc).__name__}: {exc}"
        failed = {n: "not observed before and after" for n in self.provisioned if n not in diffs}
        return Diff(diffs, {**failed, **errors}), errors


# The built-in sandbox is what `oracle.trial.sandboxing.new_sandbox` opens once this module is
# imported (before that, the default the package root registers imports it on first use). Both
# assignments are checked by mypy: they fail as soon as these classes stop satisfying the
# protocols the core is written against.
_VIEW: type[sandbox_view.SandboxView] = SandboxView
_FACTORY: sandboxing.SandboxFactory = Sandbox
sandboxing.register_sandbox(_FACTORY)
