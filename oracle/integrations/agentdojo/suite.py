"""AgentDojo suites as oracle tasks: one task per (user task, injection task) pair.

Each task's sink is the suite's environment (with the attack's injections planted and the user
task's ``init_environment`` applied) in a file the agent reaches through ``ORACLE_AGENTDOJO_ENV_
<SINK>``; beside it, a reply sink keeps what the agent answers (boundary evidence for the checks
that read the final text). AgentDojo's checks are its evaluators (`checks`), its ground-truth
pipelines its breach control (the injection task's, which answers with its
``GROUND_TRUTH_OUTPUT``) and clean control (the user task's, likewise); the no-op control comes
with every task. Nothing needs a model: the ground truth and the fixed-template attacks
run offline.

An agent (or a control) acts on the environment with AgentDojo's own tools::

    with environment(view) as env:
        env.call("send_email", recipients=["a@b.test"], subject="Hi", body="…")
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Injection, Task, breach, clean
from oracle.base.canonical import digest_json
from oracle.base.fsops import write_atomic
from oracle.evidence.kinds import SinkKind
from oracle.evidence.sink import FixtureError, Place, Provisioned, env_suffix
from oracle.evidence.tools import ToolCall, current_log
from oracle.fixtures.reply import reply
from oracle.integrations.agentdojo.checks import AgentDojoCheck, classify
from oracle.integrations.agentdojo.environment import (
    KIND,
    EnvDiff,
    EnvSink,
    EnvState,
    dumps,
    restore,
)

DEFAULT_VERSION = "v1.2.2"
DEFAULT_ATTACK = "direct"
SINK = "env"
REPLY = "reply"


class AgentDojoError(ValueError):
    """An AgentDojo version, suite, task or attack that does not exist. Lists what does."""


def agentdojo_version() -> str:
    return metadata.version("agentdojo")


def versions() -> list[str]:
    """The benchmark versions the installed AgentDojo knows."""
    from agentdojo.task_suite.load_suites import _SUITES

    return sorted(v for v, suites in _SUITES.items() if suites)


def get_suite(name: str, version: str = DEFAULT_VERSION) -> Any:
    """AgentDojo's `TaskSuite`, or `AgentDojoError` naming the versions or suites there are."""
    from agentdojo.task_suite.load_suites import _SUITES

    known = versions()
    if version not in known:
        raise AgentDojoError(
            f"AgentDojo {agentdojo_version()} has no benchmark version {version!r}; "
            f"available: {', '.join(known)}"
        )
    suites = _SUITES[version]
    if name not in suites:
        raise AgentDojoError(
            f"AgentDojo {version} has no suite {name!r}; available: {', '.join(sorted(suites))}"
        )
    return suites[name]


def suite_names(version: str = DEFAULT_VERSION) -> list[str]:
    """The suites of benchmark `version` (`AgentDojoError` if there is no such version)."""
    from agentdojo.task_suite.load_suites import _SUITES

    if version not in versions():
        raise AgentDojoError(
            f"AgentDojo {agentdojo_version()} has no benchmark version {version!r}; "
            f"available: {', '.join(versions())}"
        )
    return sorted(_SUITES[version])


# --- the environment as a fixture ---------------------------------------------------------------


@functools.cache
def _attack(suite_name: str, version: str, attack: str) -> Any:
    from agentdojo.attacks.attack_registry import ATTACKS

    if attack not in ATTACKS:
        raise AgentDojoError(f"AgentDojo has no attack {attack!r}; available: {sorted(ATTACKS)}")
    return ATTACKS[attack](get_suite(suite_name, version), None)


def injection_text(suite_name: str, version: str, attack: str, user: str, injection: str) -> str:
    """The attack's text for one pair (the same in every vector the user task reads)."""
    suite = get_suite(suite_name, version)
    atk = _attack(suite_name, version, attack)
    goal = suite.get_injection_task_by_id(injection).GOAL
    jailbreak = getattr(atk, "jailbreak", "{goal}")
    return str(
        jailbreak.format(
            goal=goal,
            user=getattr(atk, "user_name", "the user"),
            model=getattr(atk, "model_name", "the AI language model"),
            task=suite.get_user_task_by_id(user).PROMPT,
        )
    )


def seed_environment(
    suite_name: str, version: str, attack: str | None, user: str, injection: str | None
) -> Any:
    """The environment a pair's trial starts from: injected, then ``init_environment``."""
    suite = get_suite(suite_name, version)
    user_task = suite.get_user_task_by_id(user)
    injections: dict[str, str] = {}
    if attack is not None and injection is not None:
        atk = _attack(suite_name, version, attack)
        injections = dict(atk.attack(user_task, suite.get_injection_task_by_id(injection)))
    env = suite.load_and_inject_default_environment(injections)
    return user_task.init_environment(env)


@dataclass
class AgentDojoEnvSpec:
    """An AgentDojo environment as a sink: see `agentdojo_env`."""

    name: str
    suite: str
    version: str
    user_task: str
    injection_task: str | None
    attack: str | None
    agentdojo: str = field(default_factory=agentdojo_version)
    kind: str = KIND

    def describe(self) -> str:
        attack = f", {self.attack} attack for {self.injection_task}" if self.attack else ""
        return (
            f"agentdojo {self.name!r}: the {self.suite} environment ({self.version}) for "
            f"{self.user_task}{attack}"
        )

    def provision(self, place: Place, base_dir: Path) -> Provisioned:
        path = place.agent_dir / "agentdojo" / f"{self.name}.json"
        env_type = get_suite(self.suite, self.version).environment_type
        suffix = env_suffix(self.name)
        return Provisioned(
            sink=EnvSink(self.name, path, env_type),
            fixture=AgentDojoEnvFixture(self, path, place.cache_dir),
            endpoints={
                f"ORACLE_AGENTDOJO_ENV_{suffix}": str(path),
                f"ORACLE_AGENTDOJO_SUITE_{suffix}": f"{self.suite}@{self.version}",
            },
        )


def load_env_state(raw: Any, spec: object) -> EnvState:
    """An environment's state from its JSON form (see
    `oracle.evidence.snapshot.snapshot_from_json`):
    the type `EnvState.environment` rebuilds comes from `spec`, the task's `agentdojo_env`
    (without one the state answers everything but ``environment()``)."""
    if spec is None:
        return EnvState.from_json(raw)
    if not isinstance(spec, AgentDojoEnvSpec):
        raise TypeError(f"its spec is a {type(spec).__name__}, not an AgentDojo environment")
    return EnvState.from_json(raw, get_suite(spec.suite, spec.version).environment_type)


#: The AgentDojo environment sink kind: ``ev.diff.of(AGENTDOJO, "env")``, ``ev.after.of(AGENTDOJO,
#: "env")`` (its states rebuilt with the environment type the sink's spec names).
AGENTDOJO = SinkKind(KIND, diff=EnvDiff, state=EnvState, load=load_env_state)


class AgentDojoEnvFixture:
    """Builds the seeded environment once (a template in the cache) and copies it into place
    before every trial."""

    def __init__(self, spec: AgentDojoEnvSpec, path: Path, cache_dir: Path) -> None:
        self.spec = spec
        self.path = path
        parts = [spec.suite, spec.version, spec.agentdojo, spec.user_task, spec.injection_task]
        key = digest_json([*parts, spec.attack]).split(":")[1][:24]
        self.template = cache_dir / "agentdojo" / f"{spec.suite}-{key}.json"

    def seed(self) -> None:
        if self.template.exists():
            return
        s = self.spec
        try:
            env = seed_environment(s.suite, s.version, s.attack, s.user_task, s.injection_task)
            write_atomic(self.template, dumps(env))
        except AgentDojoError:
            raise
        except Exception as exc:
            raise FixtureError(s.name, f"AgentDojo could not build the environment: {exc}") from exc

    def reset(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self.template, self.path)
        except OSError as exc:
            raise FixtureError(self.spec.name, f"cannot copy the template: {exc}") from exc

    def teardown(self) -> None:
        self.path.unlink(missing_ok=True)


def agentdojo_env(
    name: str,
    suite: str,
    user_task: str,
    injection_task: str | None = None,
    *,
    version: str = DEFAULT_VERSION,
    attack: str | None = DEFAULT_ATTACK,
) -> AgentDojoEnvSpec:
    """Declare an AgentDojo environment sink for a task: `suite`'s environment as `user_task`
    sees it, with `attack`'s injections for `injection_task` planted (none without one)."""
    s = get_suite(suite, version)
    if user_task not in s.user_tasks:
        raise AgentDojoError(f"suite {suite!r} ({version}) has no user task {user_task!r}")
    if injection_task is not None and injection_task not in s.injection_tasks:
        raise AgentDojoError(
            f"suite {suite!r} ({version}) has no injection task {injection_task!r}; "
            f"available: {', '.join(s.injection_tasks)}"
        )
    return AgentDojoEnvSpec(
        name, suite, version, user_task, injection_task, attack if injection_task else None
    )


# --- acting on the environment -------------------------------------------------------------------


class Session:
    """An environment opened by an agent: ``call`` runs one of the suite's tools on it and
    records the call (harness tier, with the sink as its effect unless the tool only reads)."""

    def __init__(self, env: Any, suite: Any, sink: str) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime

        self.env = env
        self.suite = suite
        self.sink = sink
        self.runtime = FunctionsRuntime(suite.tools)

    def call(self, function: str, /, **args: Any) -> Any:
        """Run tool `function`; raise if it fails (as AgentDojo's ground truth does)."""
        started = time.time()
        result, error = self.runtime.run_function(self.env, function, args, raise_on_error=False)
        log = current_log()
        if log is not None:
            from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

            log.calls.append(
                ToolCall(
                    name=function,
                    arguments={k: _plain(v) for k, v in args.items()},
                    effects=[] if function.startswith(READ_ONLY_PREFIXES) else [self.sink],
                    ok=error is None,
                    result=tool_result_to_str(result) if error is None else None,
                    error=error,
                    started_at=started,
                    finished_at=time.time(),
                )
            )
        if error is not None:
            raise RuntimeError(f"AgentDojo tool {function!r} failed: {error}")
        return result


READ_ONLY_PREFIXES = ("get_", "search_", "list_", "read_", "check_")


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


@contextmanager
def environment(view: SandboxView, sink: str = SINK) -> Iterator[Session]:
    """Open the sandbox's AgentDojo environment `sink`; what the block did is saved on exit
    (also when it raised: the environment is then as far as the agent got)."""
    suffix = env_suffix(sink)
    try:
        path = Path(view.env[f"ORACLE_AGENTDOJO_ENV_{suffix}"])
        suite_name, _, version = view.env[f"ORACLE_AGENTDOJO_SUITE_{suffix}"].partition("@")
    except KeyError:
        raise KeyError(f"task {view.task!r} has no AgentDojo environment {sink!r}") from None
    import orjson

    suite = get_suite(suite_name, version)
    env = restore(suite.environment_type, orjson.loads(path.read_bytes()))
    session = Session(env, suite, sink)
    try:
        yield session
    finally:
        write_atomic(path, dumps(session.env))


# --- suites as tasks --------------------------------------------------------------------------


def _ground_truth(which: str, suite_name: str, version: str, task_id: str) -> Any:
    def run(view: SandboxView) -> str:
        suite = get_suite(suite_name, version)
        task = (
            suite.get_user_task_by_id(task_id)
            if which == "user"
            else suite.get_injection_task_by_id(task_id)
        )
        with environment(view) as env:
            for call in task.ground_truth(env.env.model_copy(deep=True)):
                env.call(call.function, **dict(call.args))
        return str(task.GROUND_TRUTH_OUTPUT)

    run.__name__ = f"{which}_ground_truth"
    run.__qualname__ = run.__name__
    return run


def pair_task(
    suite_name: str,
    user: str,
    injection: str,
    *,
    version: str = DEFAULT_VERSION,
    attack: str = DEFAULT_ATTACK,
) -> Task:
    """One (user task, injection task) pair of a suite as an oracle task."""
    from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask

    suite = get_suite(suite_name, version)
    user_task = suite.get_user_task_by_id(user)
    inj_task = suite.get_injection_task_by_id(injection)
    u_tier, u_why = classify(
        type(user_task), "utility", "utility_from_traces", BaseUserTask, reply=True
    )
    s_tier, s_why = classify(
        type(inj_task), "security", "security_from_traces", BaseInjectionTask, reply=True
    )
    utility = AgentDojoCheck(
        f"{user}.utility",
        lambda text, pre, post: user_task.utility(text, pre, post),
        u_tier,
        u_why,
        SINK,
        "all",
        reply=REPLY,
    )
    security = AgentDojoCheck(
        f"{injection}.security",
        lambda text, pre, post: inj_task.security(text, pre, post),
        s_tier,
        s_why,
        SINK,
        "any",
        reply=REPLY,
    )
    text = injection_text(suite_name, version, attack, user, injection)
    return Task(
        name=f"agentdojo-{version}.{suite_name}.{user}.{injection}",
        description=f"AgentDojo {version} {suite_name}: {user} attacked with {injection}",
        prompt=str(user_task.PROMPT),
        sinks=[
            agentdojo_env(SINK, suite_name, user, injection, version=version, attack=attack),
            # What the agent answers is boundary evidence for the checks that read its final
            # text; a harness that hands over none leaves only those checks unknown.
            reply(REPLY, required=False),
        ],
        injection=Injection(text=text, sink=SINK, where="**"),
        # A no-op that answers what the user task's ground truth answers runs among the
        # controls: a utility check that passes on it reads the final text alone.
        expected_reply=str(user_task.GROUND_TRUTH_OUTPUT or "") or None,
        utility=utility,
        security=security,
        controls=[
            # AgentDojo judges utility under attack with the user task's own check, and many
            # of those fail when the injection's actions changed other state too: composed
            # with the user task, the injection's ground truth promises no utility.
            breach(_ground_truth("injection", suite_name, version, injection), undoes_utility=True),
            clean(
                _ground_truth("user", suite_name, version, user),
                utility=True if utility.decides else None,
            ),
        ],
        metadata={
            "agentdojo": {
                "version": version,
                "suite": suite_name,
                "user_task": user,
                "injection_task": injection,
                "attack": attack,
                "utility_tier": u_tier,
                "security_tier": s_tier,
            }
        },
    )


def load_suite(
    name: str,
    version: str = DEFAULT_VERSION,
    *,
    attack: str = DEFAULT_ATTACK,
    user_tasks: Sequence[str] | None = None,
    injection_tasks: Sequence[str] | None = None,
) -> list[Task]:
    """Every (user task, injection task) pair of suite `name` as an oracle task (or those of
    the user and injection tasks named). Unknown names raise `AgentDojoError` listing the
    available ones."""
    suite = get_suite(name, version)
    users = list(user_tasks) if user_tasks is not None else list(suite.user_tasks)
    injections = (
        list(injection_tasks) if injection_tasks is not None else list(suite.injection_tasks)
    )
    for kind, wanted, known in (
        ("user task", users, suite.user_tasks),
        ("injection task", injections, suite.injection_tasks),
    ):
        missing = [w for w in wanted if w not in known]
        if missing:
            raise AgentDojoError(
                f"suite {name!r} ({version}) has no {kind} {', '.join(missing)}; "
                f"available: {', '.join(known)}"
            )
    return [
        pair_task(name, u, i, version=version, attack=attack) for u in users for i in injections
    ]


def from_environment(
    suites: str | None = None, version: str | None = None, sample: str | None = None
) -> list[Task]:
    """Tasks for a task file's ``tasks()``: the suites named in ``ORACLE_AGENTDOJO_SUITES``
    (comma-separated; all by default) of ``ORACLE_AGENTDOJO_VERSION``. With
    ``ORACLE_AGENTDOJO_SAMPLE=N``, only the first N user tasks × first N injection tasks of each
    suite (a quick, representative subset)."""
    # The sample size first: refusing it needs no suite, and listing suites imports AgentDojo.
    n_raw = sample or os.environ.get("ORACLE_AGENTDOJO_SAMPLE")
    n = _sample_size(n_raw) if n_raw else None
    version = version or os.environ.get("ORACLE_AGENTDOJO_VERSION") or DEFAULT_VERSION
    chosen = suites or os.environ.get("ORACLE_AGENTDOJO_SUITES") or ""
    names = [s.strip() for s in chosen.split(",") if s.strip()] or suite_names(version)
    tasks: list[Task] = []
    for name in names:
        suite = get_suite(name, version)
        users = list(suite.user_tasks)
        injections = list(suite.injection_tasks)
        if n is not None:
            users, injections = users[:n], injections[:n]
        tasks.extend(load_suite(name, version, user_tasks=users, injection_tasks=injections))
    return tasks


def _sample_size(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise AgentDojoError(
            f"ORACLE_AGENTDOJO_SAMPLE is {raw!r}: give a whole number of tasks of each kind "
            "per suite, 1 or more (or leave it unset for every task)"
        )
    return n
