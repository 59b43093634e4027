"""The local Docker engine, where one exists: a client of it, or an error that says why not.

Container agents (`oracle.agents.container`) and the container scorer
(`oracle.scoring.container`) both reach the engine through `docker_client`; where none
answers it raises `ContainerEngineMissingError` naming the cause and what to do instead::

    try:
        client = docker_client()
    except ContainerEngineMissingError as exc:
        print(exc)   # no Docker engine is reachable (…); start one, or run the agent with …
"""

from __future__ import annotations

import contextlib
from typing import Any


class ContainerEngineMissingError(RuntimeError):
    """No Docker engine can be reached."""


#: What to do where no engine answers, for an agent.
AGENT_REMEDY = (
    "start one, or run the agent with bubblewrap isolation instead "
    "(CommandAgent(isolation='bwrap'))"
)


def docker_client(remedy: str = AGENT_REMEDY, timeout: float | None = 60) -> Any:
    """A client of the local Docker engine (requests wait `timeout` seconds, None: for ever),
    or `ContainerEngineMissingError` saying why not and what to do (`remedy`)."""
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ContainerEngineMissingError(
            "the docker Python package is not installed (pip install 'oracle[container]')"
        ) from exc
    try:
        client = docker.from_env(timeout=timeout)  # asks the engine for its API version
    except docker.errors.DockerException as exc:
        raise ContainerEngineMissingError(
            f"no Docker engine is reachable ({exc}); {remedy}"
        ) from exc
    return client


#: What the engine answers when a container's first process died after the container was
#: created and before it was started: the runtime's init, which waits to run the command, was
#: gone, so nothing of the command ran. Seen about once in a hundred starts while other
#: containers start and stop on a busy two-core machine.
DIED_BEFORE_START = "cannot start a stopped process"


def start_container(client: Any, config: dict[str, Any], tries: int = 3) -> Any:
    """Create and start a container from `config` (the keyword arguments of
    ``client.containers.run``, detached); its handle.

    A container that fails to start is removed, not left behind (``containers.run`` keeps it).
    Where the engine says its process died before the start (`DIED_BEFORE_START`), the command
    never ran and a new container is tried, up to `tries` in all; any other error is raised."""
    create = {k: v for k, v in config.items() if k != "detach"}
    attempt = 0
    while True:
        attempt += 1
        container = client.containers.create(**create)
        try:
            container.start()
            return container
        except Exception as exc:
            with contextlib.suppress(Exception):
                container.remove(force=True)
            if attempt >= tries or DIED_BEFORE_START not in str(exc):
                raise
