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
