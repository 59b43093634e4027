"""AgentDojo's suites as oracle tasks: every (user task, injection task) pair of every suite of
the default benchmark version, attacked with AgentDojo's fixed-template "direct" attack.

Narrow it with environment variables (see docs/agentdojo.md):
``ORACLE_AGENTDOJO_SUITES=banking,slack``, ``ORACLE_AGENTDOJO_VERSION=v1.2.2``,
``ORACLE_AGENTDOJO_SAMPLE=2`` (the first 2 user × 2 injection tasks of each suite).
"""

from oracle.integrations.agentdojo import from_environment


def tasks():
    return from_environment()
