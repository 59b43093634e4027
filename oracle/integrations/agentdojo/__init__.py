"""AgentDojo suites as oracle tasks (extra ``agentdojo``). See docs/agentdojo.md.

    from oracle.integrations.agentdojo import load_suite
    tasks = load_suite("banking")            # every (user task, injection task) pair

- `environment`: AgentDojo's pydantic environments as a sink (canonical snapshots, typed diff);
- `checks`: AgentDojo's checks as evaluators, classified by the evidence tier they read;
- `suite`: pairs as tasks, ground-truth pipelines as controls, the tools for agents;
- `pipeline`: an AgentDojo pipeline as an oracle agent, its tool calls recorded (imported on
  its own, ``from oracle.integrations.agentdojo.pipeline import pipeline_agent``: it loads
  AgentDojo, which the rest of this package imports only when it is used).
"""

from oracle.integrations.agentdojo.checks import AgentDojoCheck, classify
from oracle.integrations.agentdojo.environment import (
    EnvDiff,
    EnvSink,
    EnvState,
    canonical,
    restore,
)
from oracle.integrations.agentdojo.suite import (
    DEFAULT_VERSION,
    AgentDojoError,
    agentdojo_env,
    environment,
    from_environment,
    get_suite,
    load_suite,
    pair_task,
    suite_names,
    versions,
)

__all__ = [
    "DEFAULT_VERSION",
    "AgentDojoCheck",
    "AgentDojoError",
    "EnvDiff",
    "EnvSink",
    "EnvState",
    "agentdojo_env",
    "canonical",
    "classify",
    "environment",
    "from_environment",
    "get_suite",
    "load_suite",
    "pair_task",
    "restore",
    "suite_names",
    "versions",
]
