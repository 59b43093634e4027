"""AgentDojo workspace environment: oracle's per-trial overhead against AgentDojo's own.

- ours: what a trial of an AgentDojo task pays around the agent: reset (the seeded environment
  copied into place from its template) + the before snapshot + the after snapshot + the diff.
  Between the snapshots (not timed) the agent sends one email and deletes a file through
  AgentDojo's own tools, so the diff has real work to do;
- agentdojo_reparse_deepdiff: what AgentDojo pays per run for the same: the environment
  re-parsed from its YAML with the injections (`load_and_inject_default_environment`),
  ``init_environment``, the deep copy kept as the pre-environment, and DeepDiff of pre and
  post (its workspace checks call ``WorkspaceDeepDiff(pre_environment, post_environment)``).

The same agent edit runs before both diffs, and both are checked to report it.
"""

from __future__ import annotations

import cProfile

from common import Result, Stopwatch, measure, profile_call, repeats_of, result, scratch

NAME = "agentdojo workspace env: reset + 2 snapshots + diff"
GOAL = "≥ 20× less than AgentDojo's reparse + DeepDiff per run"
REPEATS = 9
USER_TASK = "user_task_0"
INJECTION_TASK = "injection_task_0"


def run(profiler: cProfile.Profile | None = None) -> Result:
    import agentdojo.task_suite.load_suites  # noqa: F401  (first: it registers every suite)
    from agentdojo.default_suites.v1.workspace.task_suite import WorkspaceDeepDiff
    from agentdojo.functions_runtime import FunctionsRuntime

    from oracle.evidence.sink import Place
    from oracle.integrations.agentdojo import environment, get_suite
    from oracle.integrations.agentdojo.suite import agentdojo_env
    from oracle.sandbox.sandbox import SandboxView

    suite = get_suite("workspace")
    user_task = suite.get_user_task_by_id(USER_TASK)
    spec = agentdojo_env("env", "workspace", USER_TASK, INJECTION_TASK)
    atk_injections = None

    def act_on(env: object) -> None:
        runtime = FunctionsRuntime(suite.tools)
        runtime.run_function(
            env,
            "send_email",
            {"recipients": ["mark.black-2134@gmail.com"], "subject": "codes", "body": "here"},
            raise_on_error=True,
        )
        runtime.run_function(env, "delete_file", {"file_id": "0"}, raise_on_error=True)

    with scratch("agentdojo") as work:
        place = Place(agent_dir=work / "agent", cache_dir=work / "cache")
        place.agent_dir.mkdir()
        prov = spec.provision(place, work)
        prov.fixture.seed()
        sink = prov.sink
        view = SandboxView(task="bench", prompt="", env=dict(prov.endpoints))

        def agent() -> None:
            with environment(view) as s:
                act_on(s.env)

        last: dict[str, object] = {}

        def ours_once(sw: Stopwatch) -> None:
            with sw.running():
                prov.fixture.reset()
                before = sink.snapshot()
            agent()
            with sw.running():
                after = sink.snapshot()
                d = sink.diff(before, after)
            last["ours"] = d

        ours_once(Stopwatch())  # warm up
        ours = measure(ours_once, repeats_of(REPEATS))
        size = (place.agent_dir / "agentdojo" / "env.json").stat().st_size
        d = last.pop("ours")
        assert len(d.added("inbox/emails/*")) == 1, d  # type: ignore[attr-defined]
        assert len(d.removed("cloud_drive/files/0")) == 1, d  # type: ignore[attr-defined]

        from agentdojo.attacks.baseline_attacks import DirectAttack

        atk_injections = DirectAttack(suite, None).attack(
            user_task, suite.get_injection_task_by_id(INJECTION_TASK)
        )

        def baseline_once(sw: Stopwatch) -> None:
            with sw.running():
                env = user_task.init_environment(
                    suite.load_and_inject_default_environment(atk_injections)
                )
                pre = env.model_copy(deep=True)
            act_on(env)
            with sw.running():
                diff = WorkspaceDeepDiff(pre, env)
            last["baseline"] = diff

        baseline_once(Stopwatch())
        baseline = measure(baseline_once, repeats_of(REPEATS))
        diff = last.pop("baseline")
        assert diff, "DeepDiff saw no change"

        if profiler is not None:

            def once() -> None:
                prov.fixture.reset()
                before = sink.snapshot()
                agent()
                sink.diff(before, sink.snapshot())

            profile_call(once, profiler)

    speedup = baseline.median / ours.median
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"agentdojo_reparse_deepdiff": baseline},
        checks={"≥ 20× less than reparse + DeepDiff": speedup >= 20},
        params={
            "suite": "workspace",
            "user_task": USER_TASK,
            "injection_task": INJECTION_TASK,
            "env_json_bytes": size,
        },
    )
