"""Agents named by a string, as the command line and a matrix file name them.

``careful``, ``obedient`` and ``noop`` are built in; ``cmd:<command line>`` is a program, run
isolated (`oracle.agents.command.CommandAgent`, or a container with ``isolation="container"``);
``package.module:function`` and ``path/to/file.py:function`` are Python callables of the
sandbox view, or an AgentDojo pipeline, or a function of no arguments that builds either. A
name that cannot be resolved is a `UsageError` saying what to give instead::

    agent = resolve_agent("cmd:./agent.sh", RunOptions(timeout=60))
    agent = resolve_agent("tests/agents.py:tidy")

``oracle trial --agent`` and ``oracle matrix`` (each harness's ``agent`` key) resolve names
here; the matrix reaches this module through the resolver the package registers
(`oracle.trial.agent.register_resolver`), so that it imports none of the agents itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from oracle.agents import demo
from oracle.agents.adapters import adapt
from oracle.agents.command import CommandAgent
from oracle.base.errors import UsageError
from oracle.trial.agent import Agent, CallableAgent, noop

BUILTIN_AGENTS = {"careful": demo.careful, "obedient": demo.obedient, "noop": noop}


ISOLATIONS = ("bwrap", "container", "none")


@dataclass(frozen=True)
class RunOptions:
    """How command agents run: `oracle trial --timeout/--isolation/--image/--pass-env/
    --readable`."""

    timeout: float = 600.0
    isolation: str = "bwrap"
    pass_env: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    image: str | None = None
    readable: tuple[Path, ...] = ()


def resolve_agent(spec: str, options: RunOptions | None = None) -> Agent:
    """An agent from its name on the command line.

    ``careful``, ``obedient``, ``noop`` (built in); ``cmd:<command line>`` (a program, run
    isolated); ``package.module:function`` or ``path/to/file.py:function`` (a Python callable of
    the sandbox view, an AgentDojo pipeline, or a function of no arguments that builds one of
    these)."""
    options = options or RunOptions()
    if spec.startswith("cmd:"):
        command = spec[4:].strip()
        if not command:
            raise UsageError("'cmd:' needs a command line after it, e.g. 'cmd:./agent.sh'")
        if options.isolation not in ISOLATIONS:
            raise UsageError(
                f"--isolation must be {', '.join(ISOLATIONS)}, not {options.isolation!r}"
            )
        if (options.image is not None) != (options.isolation == "container"):
            raise UsageError("--image goes with --isolation container, and it needs one")
        if options.isolation == "container":
            return _container_agent(command, options)
        return CommandAgent(
            command,
            timeout=options.timeout,
            isolation="none" if options.isolation == "none" else "bwrap",
            pass_env=options.pass_env,
            readable=options.readable,
        )
    if spec in BUILTIN_AGENTS:
        return CallableAgent(BUILTIN_AGENTS[spec], name=spec)
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise UsageError(
            f"unknown agent {spec!r}: use one of {', '.join(BUILTIN_AGENTS)}, "
            "'cmd:<command line>', 'package.module:function' or 'file.py:function'"
        )
    try:
        if target.endswith(".py"):
            mspec = importlib.util.spec_from_file_location(Path(target).stem, target)
            if mspec is None or mspec.loader is None:
                raise ImportError(f"cannot load {target}")
            module = importlib.util.module_from_spec(mspec)
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        fn = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise UsageError(f"agent {spec!r}: {exc}") from exc
    return _agent_of(fn, spec)


def _agent_of(obj: object, spec: str) -> Agent:
    """What `spec` names, as an agent: a function of the sandbox view; an object an adapter
    knows (`oracle.agents.adapters`: an AgentDojo pipeline); an oracle agent; or a function of
    no arguments (a class included) that returns one of these. Such a function is called here,
    and an adapter may call it again for each later trial (a fresh pipeline per trial)."""
    factory = None
    if callable(obj) and _takes_no_arguments(obj):
        factory = obj
        try:
            obj = factory()
        except Exception as exc:
            raise UsageError(
                f"agent {spec!r}: building it raised {type(exc).__name__}: {exc}"
            ) from exc
    adapted = adapt(obj, spec, factory)
    if adapted is not None:
        return adapted
    if isinstance(obj, Agent):
        return obj
    if callable(obj):
        return CallableAgent(obj, name=spec)
    what = "returned" if factory is not None else "is"
    raise UsageError(
        f"agent {spec!r} {what} an object of type {type(obj).__name__}: give a function of the "
        "sandbox view, an AgentDojo pipeline, or a function of no arguments that returns one"
    )


def _takes_no_arguments(fn: object) -> bool:
    """Whether `fn` can be called with nothing and not with the sandbox view (a factory)."""
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    try:
        signature.bind(None)
    except TypeError:
        pass
    else:
        return False
    try:
        signature.bind()
    except TypeError:
        return False
    return True


def _container_agent(command: str, options: RunOptions) -> Agent:
    """A command agent in a container of `options.image`; a `UsageError` saying which engine
    is missing where none can be reached."""
    from oracle.agents.container import (
        ContainerAgent,
        ContainerEngineMissingError,
        docker_client,
    )

    assert options.image is not None
    try:
        client = docker_client()
    except ContainerEngineMissingError as exc:
        raise UsageError(f"--isolation container: {exc}") from exc
    return ContainerAgent(
        shlex.split(command),
        image=options.image,
        name=f"cmd:{command}",
        timeout=options.timeout,
        env={k: os.environ[k] for k in options.pass_env if k in os.environ},
        client=client,
    )
