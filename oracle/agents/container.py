"""A container backend for command agents, where a Docker engine exists.

The container gets no network, a read-only root filesystem, a private ``/tmp``, every
capability dropped, ``no-new-privileges``, memory and process limits, and the sandbox's agent
folder as its one writable mount (the prompt file and the CA bundle read-only); nothing else of
the host, so none of the oracle's files. Without an engine, `ContainerAgent.run` records that
the agent never started, and says which engine is missing and why.

Its network is the one bubblewrap agents get (`oracle.proxies.jail`), made in the container's
own namespace: a holder container is started first with ``--network none`` (it runs
``sleep``, so the image needs it), the jail sets that namespace up from the host (relays to
the services the task exposes, login gates for the databases, traps that record every other
connection and datagram), and the agent's container joins it (``--network container:<holder>``).
So the agent reaches the egress recorder, the SMTP sink and the servers at the same
``127.0.0.1:<port>`` as on the host, and nothing else; its attempts are in the record. Both
containers carry an owner label, and a process that was killed leaves them to the sweep
(`oracle.fixtures.containers.servers.sweep_stale`). Setting a namespace up needs root and
``nft``: where that fails, an agent whose task exposes nothing runs with no network and no
record of attempts, and one that needs services is refused with the reason. A caller may
instead name a Docker network (`network=`) that it has set up itself; it is passed through as
is, and nothing checks what it reaches.

`container_config` is the whole policy as plain data, so it can be checked without an engine::

    cfg = container_config(view, ["python", "agent.py"], image="python:3.12-slim")
    cfg["cap_drop"]     # ['ALL']
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from oracle.agents.command import exposed_endpoints
from oracle.authoring.limits import Limits, format_size, parse_size
from oracle.authoring.sandbox_view import SandboxView
from oracle.evidence.invocation import Invocation, LimitRecord, Step, StepOutcome
from oracle.fixtures.containers.servers import owner_labels, sweep_stale
from oracle.isolation.engine import AGENT_REMEDY as AGENT_REMEDY
from oracle.isolation.engine import ContainerEngineMissingError as ContainerEngineMissingError
from oracle.isolation.engine import docker_client as docker_client
from oracle.isolation.engine import start_container
from oracle.proxies.gate import GateError, login_gates
from oracle.proxies.jail import NetworkJail
from oracle.trial.agent import AgentError, RunRecord


def container_config(
    view: SandboxView,
    command: Sequence[str],
    *,
    image: str,
    env: Mapping[str, str] | None = None,
    network: str | None = None,
    memory: str | None = None,
    pids: int | None = None,
    cpus: float = 1.0,
) -> dict[str, Any]:
    """The keyword arguments for ``docker.containers.run`` that run `command` for `view`.
    `memory` and `pids` default to the task's limits (`view.limits`)."""
    limits = view.limits or Limits()
    if memory is None and limits.memory_bytes is not None:
        memory = _docker_size(limits.memory_bytes)
    if pids is None:
        pids = limits.processes
    environment = {**(env or {}), **view.env}
    volumes: dict[str, dict[str, str]] = {}
    if view.agent_dir is not None:
        volumes[str(view.agent_dir)] = {"bind": str(view.agent_dir), "mode": "rw"}
    prompt = view.env.get("ORACLE_PROMPT_FILE")
    if prompt:
        volumes[prompt] = {"bind": prompt, "mode": "ro"}
    cert = view.env.get("SSL_CERT_FILE")
    if cert:
        volumes[cert] = {"bind": cert, "mode": "ro"}
    return {
        "image": image,
        "command": list(command),
        "environment": environment,
        "network_mode": "none" if network is None else network,
        "read_only": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=256m"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        **({"mem_limit": memory, "memswap_limit": memory} if memory is not None else {}),
        **({"pids_limit": pids} if pids is not None else {}),
        "nano_cpus": int(cpus * 1e9),
        "volumes": volumes,
        "working_dir": view.env.get("ORACLE_TASK_ROOT") or str(view.agent_dir or "/"),
        "detach": True,
        "stdin_open": False,
        "labels": {"oracle.authoring.task": view.task},
    }


def _docker_size(n: int) -> str:
    """Bytes in the engine's notation: ``2g``, ``512m``, ``4096b``."""
    for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}b"


class ContainerAgent:
    """A command run in a container (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        image: str,
        name: str | None = None,
        timeout: float = 600.0,
        network: str | None = None,
        memory: str | None = None,
        pids: int | None = None,
        env: Mapping[str, str] | None = None,
        client: Any = None,
    ) -> None:
        self.command = list(command)
        self.image = image
        self.name = name or f"container:{image}:{' '.join(command)}"
        self.timeout = timeout
        self.network = network
        self.env = dict(env or {})
        self.memory = memory
        self.pids = pids
        self._client = client

    def run(self, view: SandboxView) -> RunRecord:
        failed = Invocation.not_started
        try:
            client = self._client or docker_client()
        except ContainerEngineMissingError as exc:
            # The harness cannot run it: an execution error, not an agent that never started.
            raise AgentError(str(exc), RunRecord(failed("container", self.name, str(exc)))) from exc
        sweep_stale(client)
        with contextlib.ExitStack() as stack:
            network, jail = self.network, None
            if network is None:
                holder, jail = self._jail(client, view, stack)
                if holder is not None:
                    network = f"container:{holder.id}"
            return self._run(client, view, network, jail)

    def _jail(
        self, client: Any, view: SandboxView, stack: contextlib.ExitStack
    ) -> tuple[Any, NetworkJail | None]:
        """A holder container with no network, and the jail set up in its namespace; or
        (None, None) where no jail can be made and the task needs none."""
        failed = Invocation.not_started
        env = {**self.env, **view.env}  # as the container gets it (`container_config`)
        endpoints = exposed_endpoints(env)
        try:
            gates = login_gates(env)
        except GateError as exc:
            raise AgentError(str(exc), RunRecord(failed("container", self.name, str(exc)))) from exc
        try:
            holder = start_container(
                client,
                dict(
                    image=self.image,
                    entrypoint=["sleep", "2147483647"],
                    command=[],
                    network_mode="none",
                    # The engine turns IPv6 off in a namespace without a network; the jail's
                    # relays and traps listen on [::1] too.
                    sysctls={
                        "net.ipv6.conf.all.disable_ipv6": "0",
                        "net.ipv6.conf.lo.disable_ipv6": "0",
                    },
                    read_only=True,
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges:true"],
                    pids_limit=4,
                    labels={**owner_labels(), "oracle.role": "network-holder"},
                ),
            )
        except Exception as exc:
            why = f"the container that holds the agent's network did not start: {exc}"
            raise AgentError(why, RunRecord(failed("container", self.name, why))) from exc
        stack.callback(_remove, holder)
        try:
            holder.reload()
            pid = int(holder.attrs["State"]["Pid"])
            jail = NetworkJail(expose=endpoints, gates=gates, netns=f"/proc/{pid}/ns/net")
            stack.callback(jail.close)
            jail.open()
        except Exception as exc:  # no process to find (JailError, or the engine said no pid)
            if endpoints:
                why = (
                    "the task exposes services on loopback (recorder, SMTP, databases), and "
                    f"the container's network could not be set up to reach them: {exc}"
                )
                raise AgentError(why, RunRecord(failed("container", self.name, why))) from exc
            return None, None
        return holder, jail

    def _run(
        self, client: Any, view: SandboxView, network: str | None, jail: NetworkJail | None
    ) -> RunRecord:
        config = container_config(
            view,
            self.command,
            image=self.image,
            env=self.env,
            network=network,
            memory=self.memory,
            pids=self.pids,
        )
        config["labels"] = {**config["labels"], **owner_labels()}
        started = time.time()
        try:
            container = start_container(client, config)
        except Exception as exc:
            return RunRecord(Invocation.not_started("container", self.name, f"{exc}"))
        timed_out = False
        try:
            try:
                status = container.wait(timeout=self.timeout)
                code = int(status.get("StatusCode", -1))
            except Exception:
                timed_out = True
                container.kill()
                code = None
            stdout = container.logs(stdout=True, stderr=False)
            stderr = container.logs(stdout=False, stderr=True)
            limits = _limit_records(container, config)
        finally:
            container.remove(force=True)
        outcome: StepOutcome = "succeeded" if code == 0 else "failed"
        error = None if code == 0 else ("timed out" if timed_out else f"exit status {code}")
        inv = Invocation(
            isolation="container",
            adapter="container",
            agent=self.name,
            started=True,
            steps=[Step(name="container", outcome=outcome, error=error)],
            exit_code=code,
            timed_out=timed_out,
            started_at=started,
            finished_at=time.time(),
            limits=limits,
        )
        run = RunRecord(
            inv,
            reply=stdout,
            final_message=stdout.decode("utf-8", "replace").strip() or None,  # as CommandAgent
            logs={"agent.stdout": stdout, "agent.stderr": stderr},
            network_attempts=tuple(jail.finish()) if jail else None,
            login_gates=tuple(f"{h}:{p}" for h, p in sorted(jail.gates)) if jail else None,
        )
        if timed_out:
            raise AgentError(f"agent {self.name!r} timed out after {self.timeout:g} s", run)
        return run


def _remove(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.remove(force=True)


def _limit_records(container: Any, config: Mapping[str, Any]) -> list[LimitRecord]:
    """The container's process and memory limits, and whether the kernel killed a process of
    it for memory (the engine's ``OOMKilled``); the engine does not report refused forks."""
    oom: bool | None = None
    try:
        container.reload()
        killed = container.attrs["State"]["OOMKilled"]
        oom = killed if isinstance(killed, bool) else None
    except Exception:
        oom = None
    memory = config.get("mem_limit")
    pids = config.get("pids_limit")
    memory_bytes = parse_size(memory) if isinstance(memory, str) else None
    message = None
    if oom and memory_bytes is not None:
        message = f"memory limit ({format_size(memory_bytes)}) reached: killed by the kernel"
    return [
        LimitRecord(
            resource="processes",
            limit=pids,
            enforced_by="container" if pids is not None else None,
            hit=None,
            note="the engine does not report refused forks" if pids else "no limit set",
        ),
        LimitRecord(
            resource="memory",
            limit=memory_bytes,
            enforced_by="container" if memory_bytes is not None else None,
            hit=oom if memory_bytes is not None else None,
            message=message,
            note="" if oom is not None or memory_bytes is None else "the engine did not say",
        ),
    ]
