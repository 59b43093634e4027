"""Servers and agents in containers, on a real Docker engine (the locally built images).

- **server start-up** (one entry per kind): from the create request until the administrator
  logs in, as `ORACLE_SERVERS=containers` pays it once per run; the baseline is a bare
  container of the same image that runs ``true`` (create, start, wait, remove), so that the
  server's own start shows apart from the engine's;
- **container agent per trial**: `ContainerAgent(["true"])` on a view that exposes one
  loopback service (the network holder, the jail in its namespace, the agent's container,
  the removal of both), against the same with bubblewrap (`CommandAgent`).

Without an engine or the images (`make images`), the entries say so and meet no goal.
"""

from __future__ import annotations

import cProfile

from bench_isolation import exposing_view
from common import Result, Timing, measure_call, profile_call, repeats_of, result, scratch

from oracle.agents.command import CommandAgent
from oracle.agents.container import ContainerAgent
from oracle.authoring.limits import Limits
from oracle.fixtures.containers import images
from oracle.fixtures.containers import servers as containers
from oracle.isolation.engine import ContainerEngineMissingError, docker_client

NAME = "container agent: per-trial overhead"
GOAL_AGENT = "≤ 1.5 s per trial (once per trial: two containers and the jail)"
GOALS = {"postgres": 10.0, "mariadb": 10.0, "redis": 5.0, "rabbitmq": 30.0}
REPEATS = 3
AGENT_REPEATS = 7


def _missing(name: str, goal: str, why: str) -> Result:
    return {"name": name, "ours_s": None, "baselines": {}, "goal": goal, "meets_goal": False,
            "notes": f"not measured: {why}"}  # fmt: skip


def _client() -> object:
    client = docker_client(timeout=120)
    missing = images.missing(client)
    if missing:
        raise ContainerEngineMissingError(f"images not built: {missing} (`make images`)")
    return client


def startup(kind: str) -> Result:
    title = containers.KINDS[kind].title
    name = f"{title} in a container: start-up"
    goal = f"≤ {GOALS[kind]:g} s until the administrator logs in (once per run)"
    try:
        client = _client()
    except ContainerEngineMissingError as exc:
        return _missing(name, goal, str(exc))
    image = images.tag(kind)
    ours, bare = Timing(), Timing()

    def start() -> None:
        server = containers._start(client, containers.KINDS[kind], image, image)
        containers._remove(server.handle)

    def bare_container() -> None:
        c = client.containers.run(  # type: ignore[attr-defined]
            image=image, entrypoint=["true"], command=[], network_mode="none", detach=True
        )
        c.wait()
        c.remove(force=True)

    for _ in range(repeats_of(REPEATS)):
        ours.samples += measure_call(start, 1).samples
        bare.samples += measure_call(bare_container, 1).samples
    return result(
        name,
        goal=goal,
        ours=ours,
        baselines={"bare container": bare},
        checks={goal: ours.median <= GOALS[kind]},
        params={"image": image},
    )


def run(profiler: cProfile.Profile | None) -> Result:
    try:
        client = _client()
    except ContainerEngineMissingError as exc:
        return _missing(NAME, GOAL_AGENT, str(exc))
    with scratch("containers") as base:
        view, service = exposing_view(base, Limits(disk=None))
        boxed = ContainerAgent(["true"], image=images.tag("agent"), client=client)
        wrapped = CommandAgent("true", isolation="bwrap")

        def container_trial() -> None:
            run = boxed.run(view)
            assert run.invocation.exit_code == 0, run.invocation
            assert run.network_attempts == ()

        container_trial()
        ours, bwrap = Timing(), Timing()
        for _ in range(repeats_of(AGENT_REPEATS)):
            ours.samples += measure_call(container_trial, 1).samples
            bwrap.samples += measure_call(lambda: wrapped.run(view), 1).samples
        profile_call(container_trial, profiler)
        service.close()
    return result(
        NAME,
        goal=GOAL_AGENT,
        ours=ours,
        baselines={"bubblewrap": bwrap},
        checks={GOAL_AGENT: ours.median <= 1.5},
        params={"command": "true", "exposed_services": 1, "image": images.tag("agent")},
    )


def runner(kind: str):  # type: ignore[no-untyped-def]
    return lambda profiler: startup(kind)
