"""The container backend: its policy as data, and a clear error where no engine exists.

The run path is exercised with a fake client (named so) that records what it was asked to do;
the engine-missing path uses the real docker SDK, pointed at an address where no engine is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oracle import Task, run_trial, sqlite
from oracle.agents.container import ContainerAgent, container_config, docker_client
from oracle.fixtures.owner import Owner
from oracle.sandbox.sandbox import SandboxView

VIEW = SandboxView(
    task="t",
    prompt="p",
    env={
        "ORACLE_PROMPT_FILE": "/tmp/s/prompt.txt",
        "ORACLE_TASK_ROOT": "/tmp/s/agent/root",
        "SSL_CERT_FILE": "/tmp/s/ca.pem",
        "HTTP_PROXY": "http://127.0.0.1:8080",
    },
    agent_dir=Path("/tmp/s/agent"),
)


def test_policy():
    cfg = container_config(VIEW, ["python", "agent.py"], image="python:3.12-slim", env={"A": "1"})
    assert cfg["network_mode"] == "none"
    assert cfg["read_only"] is True
    assert cfg["cap_drop"] == ["ALL"]
    assert cfg["security_opt"] == ["no-new-privileges:true"]
    assert cfg["mem_limit"] == cfg["memswap_limit"] == "2g" and cfg["pids_limit"] == 512
    assert cfg["volumes"] == {
        "/tmp/s/agent": {"bind": "/tmp/s/agent", "mode": "rw"},
        "/tmp/s/prompt.txt": {"bind": "/tmp/s/prompt.txt", "mode": "ro"},
        "/tmp/s/ca.pem": {"bind": "/tmp/s/ca.pem", "mode": "ro"},
    }
    assert "/tmp" in cfg["tmpfs"]
    assert cfg["working_dir"] == "/tmp/s/agent/root"
    assert cfg["environment"]["A"] == "1" and cfg["environment"]["HTTP_PROXY"].endswith("8080")
    assert (
        container_config(VIEW, ["x"], image="i", network="oracle-internal")["network_mode"]
        == "oracle-internal"
    )


def test_the_oracles_folders_are_not_mounted():
    """Only the agent folder, the prompt and the CA bundle reach the container: the sandbox
    folder, templates, recorders and archives a bubblewrap sandbox hides are not there at all."""
    view = SandboxView(
        task="t",
        prompt="p",
        env={"ORACLE_PROMPT_FILE": "/srv/s/shared/prompt.txt"},
        agent_dir=Path("/srv/s/agent"),
        private=(Path("/srv/s"), Path("/srv/runs"), Path("/srv/egress")),
    )
    cfg = container_config(view, ["x"], image="i")
    assert sorted(cfg["volumes"]) == ["/srv/s/agent", "/srv/s/shared/prompt.txt"]
    assert cfg["network_mode"] == "none"


def test_no_engine_is_a_clear_error_and_the_agent_never_started(monkeypatch):
    pytest.importorskip("docker")
    # No engine at this address, whatever runs on the host.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(RuntimeError, match="no Docker engine is reachable"):
        docker_client()
    task = Task(
        name="c",
        prompt="p",
        sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
        security=lambda ev: bool(ev.diff.sql("db").added("t")),
    )
    r = run_trial(task, ContainerAgent(["true"], image="alpine")).record
    # The harness could not run it: an execution error (an attempt in no ratio), not an agent
    # that failed to start.
    assert "no Docker engine is reachable" in (r.error or "")
    assert r.autonomy_achieved is False and r.security_breached is None


class FakeDockerContainer:
    def __init__(self, code: int) -> None:
        self.code, self.removed, self.killed, self.started = code, False, False, False

    def start(self) -> None:
        self.started = True

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": self.code}

    def kill(self) -> None:
        self.killed = True

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return b"done\n" if stdout else b"warn\n"

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeDockerClient:
    def __init__(self, code: int = 0) -> None:
        self.calls: list[dict] = []
        self.container = FakeDockerContainer(code)
        self.containers = self

    def create(self, **kwargs: object) -> FakeDockerContainer:
        self.calls.append(kwargs)
        return self.container


def created(config: dict) -> dict:
    """`config` as the engine is asked to create it (``detach`` is ``run``'s word alone)."""
    return {k: v for k, v in config.items() if k != "detach"}


def test_services_the_network_cannot_be_set_up_to_reach_are_refused():
    """The fake engine's holder has no process to find a namespace in: the agent's own
    container is never asked for, and the holder is removed."""
    from oracle.trial.agent import AgentError

    client = FakeDockerClient()
    with pytest.raises(AgentError, match="container's network could not be set up to reach"):
        ContainerAgent(["agent"], image="img", client=client).run(VIEW)
    (holder,) = client.calls
    assert holder["network_mode"] == "none" and holder["entrypoint"][0] == "sleep"
    assert holder["cap_drop"] == ["ALL"] and client.container.removed


def test_run_path_with_a_fake_client():
    client = FakeDockerClient()
    agent = ContainerAgent(
        ["agent"], image="img", client=client, network="oracle-net", env={"KEY": "k"}
    )
    run = agent.run(VIEW)
    (config,) = client.calls
    # It carries its owner, for the sweep after a killed run.
    owner = Owner.parse(config["labels"].pop("oracle.owner"))
    assert owner is not None and owner.pid == os.getpid()
    # The engine is asked for exactly the policy: read-only root, no capabilities,
    # no-new-privileges, memory and process limits, the named network.
    assert config == created(
        container_config(VIEW, ["agent"], image="img", env={"KEY": "k"}, network="oracle-net")
    )
    assert config["read_only"] is True and config["cap_drop"] == ["ALL"]
    assert config["security_opt"] == ["no-new-privileges:true"]
    assert config["mem_limit"] == "2g" and config["pids_limit"] == 512
    assert config["environment"]["KEY"] == "k" and client.container.removed
    assert client.container.started
    assert run.invocation.isolation == "container"
    assert run.invocation.exit_code == 0 and run.reply == b"done\n"
    assert run.logs["agent.stderr"] == b"warn\n"
    failed = ContainerAgent(
        ["agent"], image="img", client=FakeDockerClient(2), network="oracle-net"
    ).run(VIEW)
    assert failed.invocation.steps[0].outcome == "failed"


def test_the_tasks_limits_reach_the_engine_and_the_record():
    from dataclasses import replace

    from oracle.authoring.limits import Limits

    client = FakeDockerClient()
    view = replace(VIEW, limits=Limits(processes=32, memory="64MiB"))
    run = ContainerAgent(["agent"], image="img", client=client, network="n").run(view)
    (config,) = client.calls
    assert config["mem_limit"] == config["memswap_limit"] == "64m"
    assert config["pids_limit"] == 32
    processes, memory = run.invocation.limits
    assert (processes.limit, processes.enforced_by, processes.hit) == (32, "container", None)
    assert processes.note == "the engine does not report refused forks"
    # The fake engine says nothing of OOM kills: unknown, not "not reached".
    assert (memory.limit, memory.enforced_by, memory.hit) == (64 << 20, "container", None)
    unlimited = replace(VIEW, limits=Limits(processes=None, memory=None))
    cfg = container_config(unlimited, ["x"], image="i")
    assert "mem_limit" not in cfg and "pids_limit" not in cfg
